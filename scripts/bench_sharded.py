"""Benchmark: the `sharded` placement's memory bound by growth.

The same MAG-shaped graph (128-dim paper features, TFRecord, MAG's SamplingSpec) at growing
sizes with the seeds growing with it (papers / 10), the local runner in multi-process mode with
2 SDK worker processes, `worker` beside `sharded`; `sharded` runs with a --worker_memory_mb
below what `worker` needs at the largest size, and the flags it chose for that budget
(`--num_shards`, `--num_buckets`, printed by the run) are the bound. Per run:
wall, CPU seconds of the process tree (getrusage of the reaped run), CPU per record, the largest
SDK worker's peak RSS and the runner's.

  python scripts/bench_sharded.py --sizes 50000,100000,200000 --budget_mb 850 \\
      [--out docs/bench_sharded.json] [--report]
"""

from __future__ import annotations

import argparse
import json
import os
import re
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

FLAGS = re.compile(r"sharded flags: --num_shards (\d+) --num_buckets (\d+)")


def _row(r: dict, worker: dict | None) -> list[str]:
    cpu, records = r["tree_cpu_seconds"], max(r["subgraphs"], 1)
    sdk = max(r["sdk_worker_peak_rss_bytes"] or [0]) / 2**20
    vs = ""
    if worker and worker is not r:
        vs = (
            f"{r['seconds'] / worker['seconds']:.1f}x wall,"
            f" {cpu / worker['tree_cpu_seconds']:.1f}x CPU"
        )
    return [str(r["papers"]), str(r["seeds"]), r["placement"], r.get("flags", "-"),
            f"{r['seconds']:.0f}" + (f" ({r['stopped']})" if r["stopped"] else ""),
            f"{cpu:.0f}", f"{1000 * cpu / records:.1f}", f"{sdk:,.0f}",
            f"{r['runner_peak_rss_bytes'] / 2**20:,.0f}", vs]  # fmt: skip


def report(results: list[dict]) -> str:
    head = ("| papers | seeds | placement | flags | wall s | tree CPU s | CPU ms / record"
            " | largest SDK worker peak RSS MB | runner peak RSS MB | vs worker |\n"
            + "|---" * 10 + "|")  # fmt: skip
    rows = [head]
    for r in results:
        worker = next(
            (o for o in results if o["placement"] == "worker" and o["papers"] == r["papers"]
             and o.get("note") == r.get("note")), None,
        )  # fmt: skip
        rows.append("| " + " | ".join(_row(r, worker)) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="50000,100000,200000")
    parser.add_argument("--seeds_per_paper", type=float, default=0.1)
    parser.add_argument("--placements", default="worker,sharded")
    parser.add_argument("--budget_mb", type=float, default=850, help="sharded's --worker_memory_mb")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--note", default="")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--work_dir", default="/tmp/bench_sample")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_sharded.json"))
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
        graph_dir = make_graph(size, args.work_dir, 0.0, "tfrecord", 128, True)
        num_seeds = int(size * args.seeds_per_paper)
        seeds = make_seeds(graph_dir, num_seeds)
        for placement in args.placements.split(","):
            flags = [
                "--direct_running_mode=multi_processing",
                f"--direct_num_workers={args.workers}",
            ]
            if placement == "sharded":
                flags += ["--graph_placement", "sharded", "--worker_memory_mb", str(args.budget_mb)]
            out_dir = os.path.join(args.work_dir, "out", f"sharded_bench_{placement}_{size}")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            cmd = command("ours", graph_dir, out_dir, seeds, flags)
            print(f"[{time.strftime('%H:%M:%S')}] {placement} at {size} ...", flush=True)
            measured = run_measured(cmd, args.timeout, 20 * 2**30, out_dir + ".log")
            ok = measured["returncode"] == 0 and not measured["stopped"]
            count, size_bytes = count_records(out_dir) if ok else (0, 0)
            with open(out_dir + ".log") as f:
                log = f.read()
            if not ok and not measured["stopped"]:
                measured["stopped"] = "failed: " + log.strip()[-300:]
            chosen = FLAGS.search(log)
            record = {
                "placement": placement, "papers": size, "seeds": num_seeds,
                "budget_mb": args.budget_mb if placement == "sharded" else None,
                "flags": f"{chosen[1]} shards, {chosen[2]} buckets" if chosen else "-",
                "workers": args.workers, "subgraphs": count, "output_bytes": size_bytes,
                **measured, "resources": run_resources(out_dir), "note": args.note,
                "command": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                                    for c in cmd),
                "machine": machine(),
            }  # fmt: skip
            results.append(record)
            print(report([record]).splitlines()[-1], flush=True)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    print(report(results))


if __name__ == "__main__":
    main()
