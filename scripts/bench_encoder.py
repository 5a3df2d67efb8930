"""Benchmark: the chunk encoder alone, numpy (`encode_chunk_numpy`) against compiled
(`encode_chunk_compiled`; `compiled_buffer`: the same, its records cut from one buffer instead
of written into their bytes objects), on the chunks of a `--runner InMemory` run.

Samples the first N papers once, as `pipelines.sample --runner InMemory` does, keeping the
SubgraphChunks instead of writing them; checks that both encoders give the same records for
every chunk; then runs each encoder over all chunks, alternating, and reports CPU seconds of
this process (user + system) per pass and the best MB of records per CPU-second.

  PYTHONPATH=. python scripts/bench_encoder.py --graph /tmp/mag50k_d128 --seeds 10000 [--passes 3]
"""

from __future__ import annotations

import argparse
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
    original = runner._write
    runner._write = lambda args, chunks, specs, counters: kept.append((list(chunks), specs))
    try:
        runner.run(loaded.config, loaded.graph, loaded.plan, out_dir)
    finally:
        runner._write = original
    return kept[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", required=True, help="folder with graph_schema.pbtxt and spec")
    parser.add_argument("--seeds", type=int, default=10000, help="the first N papers")
    parser.add_argument("--passes", type=int, default=3, help="passes of each encoder")
    args = parser.parse_args()

    from sampler.sample import encode_compiled
    from sampler.sample.encode_compiled import encode_chunk_compiled
    from sampler.sample.encode_numpy import encode_chunk_numpy

    def compiled_buffer(chunk, specs):
        """The compiled encoder, records cut from its buffer (as without direct writes)."""
        direct, encode_compiled._DIRECT = encode_compiled._DIRECT, None
        try:
            return encode_chunk_compiled(chunk, specs)
        finally:
            encode_compiled._DIRECT = direct

    with tempfile.TemporaryDirectory() as out_dir:
        chunks, specs = sampled_chunks(args.graph, args.seeds, out_dir)
    for chunk in chunks:
        want = encode_chunk_numpy(chunk, specs)
        if want != encode_chunk_compiled(chunk, specs) or want != compiled_buffer(chunk, specs):
            raise SystemExit("the encoders' records differ")
    encoders = {
        "numpy": encode_chunk_numpy,
        "compiled": encode_chunk_compiled,
        "compiled_buffer": compiled_buffer,
    }
    seconds: dict[str, list[float]] = {name: [] for name in encoders}
    for _ in range(args.passes):
        for name, encode in encoders.items():
            start, size = cpu(), 0
            for chunk in chunks:
                size += sum(map(len, encode(chunk, specs)))
            seconds[name].append(round(cpu() - start, 2))
    mb = size / 1e6
    result = {"graph": args.graph, "subgraphs": sum(map(len, chunks)), "records_mb": round(mb, 1)}
    for name, values in seconds.items():
        result[f"{name}_cpu_s"] = values
        result[f"{name}_mb_per_cpu_s"] = round(mb / min(values))
    result["load_avg"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
