"""Benchmark: CPU cost of `--runner InMemory` split into start-up, reading and the kernels.

Runs `pipelines.sample --runner InMemory` in this process, for the checkout on PYTHONPATH
(pass a read-only older checkout to compare), and reports CPU seconds (user + system of this
process) of:

  start-up   importing pipelines.sample and loading the schema and spec
  reading    sampler.sample.in_memory.read_tables (every table file read once)
  kernels    the rest of sample_in_memory.run: the build, seeds, sampling, encoding, writing

and the MB of records written per CPU-second with reading excluded (kernels) and included
(start-up + reading + kernels). The tables are read once and handed to each run by replacing
`in_memory.read_tables` for the duration of the call; a run that reads its tables some other
way is an error (the kernels' figure would include the reading).

  PYTHONPATH=. python scripts/bench_encode.py --graph /tmp/mag50k_d128 --seeds 10000 \\
      [--edge_aggregation_method node] [--repeat 2] [--out /tmp/bench_encode]
      [--large_graph_paths]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import time


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def make_seeds(graph_dir: str, count: int, out_dir: str) -> str:
    """The first `count` paper ids (p0, p1, ...) as a CSV seed table."""
    path = os.path.join(out_dir, f"seeds{count}.csv")
    with open(path, "w") as f:
        f.write("#id\n")
        f.writelines(f"p{i}\n" for i in range(count))
    return path


def main() -> None:
    start = cpu()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", required=True, help="folder with graph_schema.pbtxt and spec")
    parser.add_argument("--spec", default=None, help="default: GRAPH/sampling_spec.pbtxt")
    parser.add_argument("--seeds", type=int, default=0, help="first N papers (0: every paper)")
    parser.add_argument("--edge_aggregation_method", default="edge")
    parser.add_argument("--repeat", type=int, default=1, help="kernel runs on the same tables")
    parser.add_argument("--out", default="/tmp/bench_encode")
    parser.add_argument(
        "--large_graph_paths",
        action="store_true",
        help="turn off the bitmap shortcut for small (sample, row) key spaces, as on a graph"
        " whose node sets are ~15x larger (ogbn-mag's projection)",
    )
    args = parser.parse_args()
    if args.large_graph_paths:
        from sampler import arrays

        arrays._BITMAP_LIMIT = 0

    from pipelines import sample
    from pipelines import sample_in_memory as runner
    from sampler.sample import in_memory

    os.makedirs(args.out, exist_ok=True)
    argv = [
        "--graph_schema",
        os.path.join(args.graph, "graph_schema.pbtxt"),
        "--sampling_spec",
        args.spec or os.path.join(args.graph, "sampling_spec.pbtxt"),
        "--output_samples",
        os.path.join(args.out, "run", "samples@4"),
        "--runner",
        "InMemory",
        "--edge_aggregation_method",
        args.edge_aggregation_method,
        "--overwrite",
    ]
    if args.seeds:
        argv += ["--input_seeds", make_seeds(args.graph, args.seeds, args.out)]
    loaded = sample.load(argv, check_outputs=False)
    startup = cpu() - start

    t = cpu()
    parts = in_memory.read_tables(loaded.graph)
    reading = cpu() - t

    handed = []

    def read_tables(graph, on_bad=None):
        handed.append(graph)
        return list(parts)  # (the build empties the list it gets, not the pieces)

    original = in_memory.read_tables
    in_memory.read_tables = read_tables
    kernels = []
    try:
        for _ in range(args.repeat):
            out_dir = os.path.join(args.out, "run")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            t = cpu()
            counters = runner.run(loaded.config, loaded.graph, loaded.plan, out_dir)
            kernels.append(cpu() - t)
    finally:
        in_memory.read_tables = original
    if len(handed) != args.repeat:
        sys.exit("bench_encode: the run did not read its tables through in_memory.read_tables")
    out_bytes = sum(
        os.path.getsize(os.path.join(out_dir, f))
        for f in os.listdir(out_dir)
        if f.startswith("samples")
    )
    kernel = min(kernels)
    mb = out_bytes / 1e6
    result = {
        "graph": args.graph,
        "aggregation": args.edge_aggregation_method,
        "subgraphs": counters.get("subgraphs", 0),
        "output_mb": round(mb, 1),
        "startup_cpu_s": round(startup, 2),
        "reading_cpu_s": round(reading, 2),
        "tables_read": 1,  # (once, handed to every run)
        "kernel_cpu_s": [round(k, 2) for k in kernels],
        "mb_per_cpu_s_reading_excluded": round(mb / kernel, 1),
        "mb_per_cpu_s_reading_included": round(mb / (startup + reading + kernel), 1),
        "beam_imported": "apache_beam" in sys.modules,
        "large_graph_paths": args.large_graph_paths,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "load_avg": os.getloadavg()[0],
        "date": time.strftime("%Y-%m-%d %H:%M"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
