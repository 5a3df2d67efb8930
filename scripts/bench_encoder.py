"""Benchmark: the chunk encoder alone (`encode_chunk`, its records written into their bytes
objects; `buffer`: the same, its records cut from one buffer, as where that is not possible;
`framed`: `encode_framed`, the records in TFRecord framing in one pooled buffer, as the
InMemory runner writes them), on the chunks of a `--runner InMemory` run.

Samples the first N papers once, as `pipelines.sample --runner InMemory` does, keeping the
SubgraphChunks instead of writing them; checks the first chunk's records against the protobuf
encoder (tests/encode_oracle.py); then runs each way over all chunks, alternating, and reports
CPU seconds of this process (user + system) per pass and the best MB of records per CPU-second.

  PYTHONPATH=. python scripts/bench_encoder.py --graph /tmp/mag50k_d128 --seeds 10000 [--passes 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import tempfile


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def sampled_chunks(graph_dir: str, seeds: int, out_dir: str):
    """(the SubgraphChunks of the first `seeds` papers, the EncodeSpecs they are written with)."""
    from pipelines import sample
    from pipelines import sample_in_memory as runner

    path = os.path.join(out_dir, "seeds.csv")
    with open(path, "w") as f:
        f.write("#id\n")
        f.writelines(f"p{i}\n" for i in range(seeds))
    argv = ["--graph_schema", os.path.join(graph_dir, "graph_schema.pbtxt"),
            "--sampling_spec", os.path.join(graph_dir, "sampling_spec.pbtxt"),
            "--output_samples", os.path.join(out_dir, "samples@1"), "--runner", "InMemory",
            "--input_seeds", path, "--overwrite"]  # fmt: skip
    loaded = sample.load(argv, check_outputs=False)
    kept = []

    def keep(jobs, sample, specs, *args, **kwargs):  # the chunks sampled, none encoded
        counters = collections.Counter()
        kept.append(([sample(seeds, counters) for _, seeds in jobs], specs))
        yield from ()

    original = runner.encoded_chunks
    runner.encoded_chunks = keep
    try:
        runner.run(loaded.config, loaded.graph, loaded.plan, out_dir)
    finally:
        runner.encoded_chunks = original
    return kept[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", required=True, help="folder with graph_schema.pbtxt and spec")
    parser.add_argument("--seeds", type=int, default=10000, help="the first N papers")
    parser.add_argument("--passes", type=int, default=3, help="passes of each encoder")
    args = parser.parse_args()

    from sampler.io.framed import FrameBuffers
    from sampler.io.tfrecord import frame
    from sampler.sample import encode_chunk as encoder
    from sampler.sample.encode_framed import encode_framed
    from tests.encode_oracle import encode_subgraph

    def buffer(chunk, specs):
        """The encoder, records cut from its buffer (as without direct writes)."""
        direct, encoder._DIRECT = encoder._DIRECT, None
        try:
            return encoder.encode_chunk(chunk, specs)
        finally:
            encoder._DIRECT = direct

    with tempfile.TemporaryDirectory() as out_dir:
        chunks, specs = sampled_chunks(args.graph, args.seeds, out_dir)
    want = [encode_subgraph(s, specs) for s in chunks[0].subgraphs(collections.Counter())]
    pool = FrameBuffers(1)

    def framed(chunk, specs):
        """The records in TFRecord framing, in a buffer of the pool (given back at once)."""
        records = encode_framed(chunk, specs, pool)
        size = len(records.data)
        records.release()
        return [size]

    if want != encoder.encode_chunk(chunks[0], specs) or want != buffer(chunks[0], specs):
        raise SystemExit("the records differ from the protobuf encoder's")
    first = encode_framed(chunks[0], specs)
    if bytes(first.data) != frame(want):
        raise SystemExit("the framed records differ from the protobuf encoder's")
    encoders = {"direct": encoder.encode_chunk, "buffer": buffer, "framed": framed}
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    sizes: dict[str, float] = {}
    for _ in range(args.passes):
        for name, encode in encoders.items():
            start, size = cpu(), 0
            for chunk in chunks:
                records = encode(chunk, specs)
                size += sum(records) if name == "framed" else sum(map(len, records))
            seconds[name].append(round(cpu() - start, 2))
            sizes[name] = size / 1e6
    mb = sizes["direct"]
    result = {"graph": args.graph, "subgraphs": sum(map(len, chunks)), "records_mb": round(mb, 1)}
    for name, values in seconds.items():  # (framed: its MB include the 16 framing bytes a record)
        result[f"{name}_cpu_s"] = values
        result[f"{name}_mb_per_cpu_s"] = round(sizes[name] / min(values))
    result["load_avg"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
