"""Benchmark: one machine, every core. The same sampling run with 1, 2, ... SDK worker processes.

Runs our `worker` placement (and --runner InMemory as the one-process floor) on a generated
MAG-shaped graph with the local runner in multi-process mode, and records per run: wall time,
CPU seconds of the whole process tree (getrusage of the reaped run) and of the runner process
alone (run_summary.json's resources), the runner's share of the CPU, MB of records written per
CPU-second, and the peak RSS and PSS of the process tree (PSS counts the pages that several
processes map, such as the graph snapshot, once in all).

  python scripts/bench_scaling.py --sizes 50000,200000 --workers 1,2,8 --feature_dim 128 \\
      --input_seeds 10000 [--out docs/bench_scaling.json] [--report]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_sample import (  # noqa: E402 - the script's own folder first
    ROOT,
    command,
    count_records,
    machine,
    make_graph,
    make_seeds,
    run_measured,
    run_resources,
)


def _row(r: dict, base: dict | None) -> list[str]:
    used = r.get("resources") or {}
    cpu, runner = r["tree_cpu_seconds"], used.get("runner_cpu_seconds")
    share = f"{runner / cpu:.0%}" if runner is not None and cpu and r["workers"] else "-"
    speedup = f"{base['seconds'] / r['seconds']:.2f}x" if base else "-"
    rate = r["output_bytes"] / 1e6 / cpu if cpu else 0
    wall = f"{r['seconds']:.1f}" + (f" ({r['stopped']})" if r["stopped"] else "")
    return [str(r["papers"]), r["system"], str(r["workers"] or "-"), wall, speedup, f"{cpu:.1f}",
            f"{runner:.1f}" if runner is not None else "-", share, f"{rate:.0f}",
            f"{r['peak_rss_bytes'] / 2**30:.2f}", f"{r['peak_pss_bytes'] / 2**30:.2f}"]  # fmt: skip


def report(results: list[dict]) -> str:
    head = ("| papers | system | SDK workers | wall s | vs 1 worker | tree CPU s | runner CPU s"
            " | runner share | MB records / CPU-s | peak RSS GB | peak PSS GB |\n"
            + "|---" * 11 + "|")  # fmt: skip
    rows = [head]
    for r in results:
        base = next(
            (o for o in results if o["workers"] == 1 and o["system"] == r["system"]
             and o["papers"] == r["papers"] and o.get("note") == r.get("note")), None,
        )  # fmt: skip
        rows.append("| " + " | ".join(_row(r, base if r["workers"] else None)) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="50000")
    parser.add_argument("--workers", default="1,2,8", help="SDK worker process counts")
    parser.add_argument("--systems", default="ours,inmemory")
    parser.add_argument("--input_seeds", type=int, default=10000)
    parser.add_argument("--feature_dim", type=int, default=128)
    parser.add_argument("--format", default="tfrecord", choices=["tfrecord", "csv", "parquet"])
    parser.add_argument("--note", default="", help="recorded with each run")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--max_rss_gb", type=float, default=20)
    parser.add_argument("--work_dir", default="/tmp/bench_sample")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_scaling.json"))
    parser.add_argument("--report", action="store_true", help="print the table of --out and exit")
    args = parser.parse_args()
    results = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    if args.report:
        print(report(results))
        return
    for size in [int(s) for s in args.sizes.split(",")]:
        graph_dir = make_graph(size, args.work_dir, 0.0, args.format, args.feature_dim, True)
        seeds = make_seeds(graph_dir, args.input_seeds) if args.input_seeds else None
        runs = []
        for system in args.systems.split(","):
            counts = [0] if system == "inmemory" else [int(w) for w in args.workers.split(",")]
            runs += [(system, w) for w in counts]
        for system, workers in runs:
            flags = ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
            out_dir = os.path.join(args.work_dir, "out", f"scaling_{system}_{workers}_{size}")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            cmd = command(system, graph_dir, out_dir, seeds, flags if workers else [])
            print(f"[{time.strftime('%H:%M:%S')}] {system} x{workers} at {size} ...", flush=True)
            measured = run_measured(cmd, args.timeout, args.max_rss_gb * 2**30, out_dir + ".log")
            ok = measured["returncode"] == 0 and not measured["stopped"]
            count, size_bytes = count_records(out_dir) if ok else (0, 0)
            if not ok and not measured["stopped"]:
                with open(out_dir + ".log") as f:
                    measured["stopped"] = "failed: " + f.read().strip()[-300:]
            record = {
                "system": system, "papers": size, "seeds": args.input_seeds or size,
                "feature_dim": args.feature_dim, "format": args.format, "workers": workers,
                "subgraphs": count, "output_bytes": size_bytes, **measured,
                "resources": run_resources(out_dir), "note": args.note,
                "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                    for c in cmd),
                "machine": machine(),
            }  # fmt: skip
            results.append(record)
            print(report([r for r in results if r["papers"] == size]).splitlines()[-1], flush=True)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    print(report(results))


if __name__ == "__main__":
    main()
