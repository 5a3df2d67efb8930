"""`pipelines.sample --runner InMemory`: the same sampling without Beam, on one machine.

The same kernels and the same records as the Beam pipeline for the same --seed;
the floor of the benchmarks and the oracle of the pipeline's tests.
"""

from __future__ import annotations

import collections
import time

from pipelines import accounting
from pipelines.runner import output_shards
from sampler.io import tfrecord
from sampler.io.files import create_file, shard_name
from sampler.io.graph_tables import read_seed_ids
from sampler.sample import in_memory
from sampler.sample.adjacency import make_seeds
from sampler.sample.encode import encode_specs, encode_subgraph
from sampler.sample.rejected import rejected_seed_lines

IN_MEMORY = "InMemory"


def run(args, graph, plan, output_dir: str) -> collections.Counter:
    """Samples every seed and writes the records; returns the counters.

    `args` is the CLI's config (pipelines.sample.SampleConfig), parsed and validated once there;
    `graph` and `plan` are the schema and plan it loaded once.
    """
    start = time.time()
    mem = in_memory.load_dense_graph(graph, plan)
    if args.input_seeds:
        seed_ids = read_seed_ids(args.input_seeds)
    else:
        seed_ids = mem.node_tables[plan.seed_set].rows.ids
    seeds = make_seeds(seed_ids)
    counters = collections.Counter(seeds_in=len(seeds))
    if args.input_seeds:
        node_fps = mem.node_tables[plan.seed_set].rows.fp
        rejected = rejected_seed_lines(seeds, node_fps, plan.seed_set)
        accounting.write_rejected_seeds_file(rejected, output_dir)
    prefix, num_shards, template = output_shards(args.output_samples)
    paths = (
        [prefix]
        if template == ""
        else [shard_name(prefix, i, num_shards) for i in range(num_shards)]
    )
    writers = [create_file(path) for path in paths]  # TFRecord framing: sampler.io.tfrecord
    specs = encode_specs(graph.schema)
    try:
        randomness = in_memory.Randomness(args.seed)
        subgraphs = in_memory.sample_in_memory(graph, plan, mem, seeds, randomness, counters)
        for i, subgraph in enumerate(subgraphs):
            writers[i % len(writers)].write(tfrecord.frame([encode_subgraph(subgraph, specs)]))
    finally:
        for writer in writers:
            writer.close()
    counters["seconds"] = round(time.time() - start, 1)
    return counters
