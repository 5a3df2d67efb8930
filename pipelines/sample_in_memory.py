"""`pipelines.sample --runner InMemory`: the same sampling without Beam, on one machine.

The same kernels and the same records as the Beam pipeline for the same --seed;
the floor of the benchmarks and the oracle of the pipeline's tests.
"""

from __future__ import annotations

import collections
import struct
import time
import uuid

from pipelines.reporting import accounting
from pipelines.runtime.runner import output_shards
from pipelines.toolkit import RowProgress
from sampler import shards
from sampler.io import tfrecord
from sampler.io.files import create_file, delete, has_scheme, join, rename, shard_name
from sampler.io.graph_tables import read_seed_ids, read_seed_pairs
from sampler.sample import in_memory, link
from sampler.sample.adjacency import make_seeds
from sampler.sample.dense import densify, edge_facts
from sampler.sample.encode import encode_specs
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.rejected import rejected_seed_lines

IN_MEMORY = "InMemory"


def run(args, graph, plan, output_dir: str) -> collections.Counter:
    """Samples every seed and writes the records; returns the counters.

    `args` is the CLI's config (pipelines.sample_config.SampleConfig), parsed and validated once there;
    `graph` and `plan` are the schema and plan it loaded once.
    """
    start = time.time()
    dead = DeadLetters(args.max_bad_records)
    node_tables, adjacency = in_memory.load_tables(graph, plan, dead.on_bad)
    if plan.link is not None:
        return _run_links(args, graph, plan, node_tables, adjacency, start, dead, output_dir)
    mem = densify(graph, node_tables, adjacency)
    facts = graph_facts(graph, node_tables, adjacency, mem)
    if args.input_seeds:
        seed_ids = read_seed_ids(args.input_seeds, dead.seeds_on_bad)
        facts["rows_read/seeds"] = len(seed_ids)
    else:
        seed_ids = mem.node_tables[plan.seed_set].rows.ids
    seeds = make_seeds(seed_ids)
    counters = collections.Counter(seeds_in=len(seeds), **facts)
    dead.account(counters, output_dir)
    if args.input_seeds:
        node_fps = mem.node_tables[plan.seed_set].rows.fp
        rejected = rejected_seed_lines(seeds, node_fps, plan.seed_set)
        accounting.write_rejected_seeds_file(rejected, output_dir)
    randomness = in_memory.Randomness(args.seed)
    chunks = (
        (bucket, chunk)
        for bucket, part in by_bucket(seeds, args.num_buckets)
        for chunk in in_memory.sample_chunks(graph, plan, mem, part, randomness, counters)
    )
    _write(args, chunks, encode_specs(graph.schema), counters)
    counters["seconds"] = round(time.time() - start, 1)
    return counters


class DeadLetters:
    """Bad rows of the tables and the seed table, as the Beam runner accounts for them
    (sampler.beam.read): with --max_bad_records 0 the first one fails the run; above it each
    is a dead letter and counts in `bad_records/<set>` (the seed table's set is "seeds"), and
    more than the limit fails the run once every table is read, before any sampling."""

    def __init__(self, limit: int):
        self.limit = limit
        self.lines: list[str] = []
        self.counts: collections.Counter = collections.Counter()
        self.on_bad = self._add if limit else None
        self.seeds_on_bad = (lambda bad: self._add("seeds", bad)) if limit else None

    def _add(self, name: str, bad) -> None:
        self.lines.append(bad.to_json(set=name))
        self.counts[f"bad_records/{name}"] += 1

    def account(self, counters: collections.Counter, output_dir: str) -> None:
        """Writes the dead letters, counts them, and fails past the limit."""
        accounting.write_bad_records_file(self.lines, output_dir)
        counters.update(self.counts)
        accounting.check_bad_records(counters, self.limit, output_dir)


def graph_facts(graph, node_tables, adjacency, mem) -> dict[str, int]:
    """The counters from which pipelines.reporting.accounting.graph_issues finds a graph's issues, as the
    Beam runner counts them (sampler.beam.read, the placements' GraphFacts): rows read per
    table, duplicate node ids, edges with a missing endpoint (dropped), self-loops and
    parallel edges (of the edges kept)."""
    out: dict[str, int] = {}
    for name, info in graph.node_sets.items():
        if info.filename:
            table = node_tables[name]
            out[f"rows_read/{name}"] = len(table.rows.ids) + table.duplicates
            out[f"duplicate_node_ids/{name}"] = table.duplicates
    for name in graph.edge_sets:
        out[f"rows_read/{name}"] = adjacency[name].num_edges
    out.update(edge_facts(graph, mem))
    return {k: v for k, v in out.items() if v or k.startswith("rows_read/")}


def by_bucket(seeds, num_buckets: int):
    """(bucket, its seeds) in bucket order: the Beam runner's buckets (sample key % --num_buckets,
    whose default this runner keeps), so that the records are laid out over the shards as a
    Beam run lays them out (sampler.beam.sample.write): shard s holds buckets s, s + N, ...,
    in bucket order, each bucket's records in sample order. The files are the same bytes."""
    for bucket, index in shards.by_bucket(seeds.sample, num_buckets):
        yield bucket, seeds.take(index)


def _write(args, chunks, specs, counters) -> None:
    """Encodes chunk by chunk (encode_chunk) and writes a chunk of bucket b to shard
    b % shards, as the Beam runner's shards hold them (`by_bucket`).

    The shards are written in a `.temp-samples-*` folder beside them and renamed to their
    final names once all are complete: a run that is killed (SIGKILL, a power loss) leaves no
    truncated shard under a final name, as the Beam runner's concatenation does not."""
    prefix, num_shards, template = output_shards(args.output_samples)
    paths = (
        [prefix]
        if template == ""
        else [shard_name(prefix, i, num_shards) for i in range(num_shards)]
    )
    folder = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    temp = join(folder or ".", f".temp-samples-{uuid.uuid4().hex[:12]}")
    temps = [join(temp, path.rsplit("/", 1)[-1]) for path in paths]
    writers = [create_file(path) for path in temps]
    # --progress_interval: a line on stderr per interval, as the Beam runner prints its own
    progress = RowProgress("in memory", args.progress_interval)
    try:
        for bucket, chunk in chunks:
            writer = writers[bucket % len(writers)]
            for record in encode_chunk(chunk, specs):
                _write_record(writer, record)
            counters["subgraphs"] += len(chunk)
            progress("subgraphs", counters["subgraphs"])
    finally:
        progress.done()
        for writer in writers:
            writer.close()
    for source, target in zip(temps, paths, strict=True):
        rename(source, target)
    if not has_scheme(temp):  # an object store has no folder left once its files moved
        delete([temp])


def _write_record(writer, record: bytes) -> None:
    """One TFRecord (the framing of sampler.io.tfrecord.frame), without copying `record`."""
    length = struct.pack("<Q", len(record))
    writer.write(length + struct.pack("<I", tfrecord.masked_crc(length)))
    writer.write(record)
    writer.write(struct.pack("<I", tfrecord.masked_crc(record)))


def _run_links(
    args, graph, plan, node_tables, adjacency, start, dead, output_dir
) -> collections.Counter:
    """A symmetric_link_seed_op: one example per seed edge and negative (sampler.sample.link).

    Default seeds are every edge of the seed edge set, those with a missing endpoint included
    (rejected as `seeds_not_in_node_set`, as the Beam placements do)."""
    facts = {}
    if args.input_seeds:
        pairs = read_seed_pairs(args.input_seeds, dead.seeds_on_bad)
        facts["rows_read/seeds"] = len(pairs[0])
    else:
        pairs = link.edge_pairs(adjacency[plan.link.edge_set])
    seeds = link.make_link_seeds(*pairs)
    mem = densify(graph, node_tables, adjacency)
    counters = collections.Counter(
        seeds_in=len(seeds), **graph_facts(graph, node_tables, adjacency, mem), **facts
    )
    dead.account(counters, output_dir)
    randomness = in_memory.Randomness(args.seed)
    chunks = (
        (bucket, chunk)
        for bucket, part in by_bucket(seeds, args.num_buckets)
        for chunk in link.sample_link_chunks(
            graph,
            plan,
            mem,
            part,
            randomness,
            counters,
            args.negatives_per_seed,
            args.keep_seed_edges,
        )
    )
    _write(args, chunks, encode_specs(link.link_output_schema(graph.schema, plan)), counters)
    counters["seconds"] = round(time.time() - start, 1)
    return counters
