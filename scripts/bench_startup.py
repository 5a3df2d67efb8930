"""Benchmark: fixed costs of the sample CLI (start-up, a tiny run, per-process memory).

Runs, for each checkout given (default: this one), `python -m pipelines.sample --help` and a
whole sample run of a tiny generated graph (100 MAG-shaped papers, generated once with this
checkout), each --repeat times, and records wall time and the peak RSS of the process tree
(sampled every 0.02 s). Pass an older checkout to compare, e.g. a worktree of the commit
before the project's own protos: `git worktree add /tmp/before f7b8adf`.

  python scripts/bench_startup.py --checkouts .,/tmp/before --out docs/bench_startup.json

Results are appended to the JSON file, one record per checkout and measurement; the median of
the repeats is what docs/BENCHMARKS.md reports.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import psutil
from bench_sample import machine, tree_rss

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(cmd: list[str], cwd: str) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes of the process tree) of one run; fails if it fails."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=cwd)
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    ps, peak = psutil.Process(proc.pid), 0
    while proc.poll() is None:
        try:
            peak = max(peak, tree_rss(ps))
        except psutil.NoSuchProcess:
            break
        time.sleep(0.02)
    _, err = proc.communicate()
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed in {cwd}: {err.decode()[-500:]}")
    return seconds, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkouts", default=".", help="comma-separated checkout folders")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--work_dir", default="/tmp/bench_startup")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_startup.json"))
    args = parser.parse_args()
    graph = os.path.join(args.work_dir, "mag100")
    if not os.path.exists(os.path.join(graph, "sampling_spec.pbtxt")):
        generate = [sys.executable, "-m", "pipelines.generate", "--num_papers", "100"]
        subprocess.run([*generate, "--output_dir", graph, "--write_spec"], cwd=ROOT, check=True)
    results = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    for checkout in [os.path.abspath(c) for c in args.checkouts.split(",")]:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=checkout, capture_output=True, text=True
        ).stdout.strip()
        out = os.path.join(args.work_dir, f"out_{commit}", "samples@2")
        tiny = [sys.executable, "-m", "pipelines.sample", "--graph_schema", graph,
                "--sampling_spec", os.path.join(graph, "sampling_spec.pbtxt"),
                "--output_samples", out, "--overwrite", "--progress_interval", "0"]  # fmt: skip
        help_ = [sys.executable, "-m", "pipelines.sample", "--help"]
        for name, cmd in (("sample --help", help_), ("tiny run (100 papers)", tiny)):
            runs = [measure(cmd, checkout) for _ in range(args.repeat)]
            record = {
                "measurement": name,
                "commit": commit,
                "median_seconds": round(statistics.median(s for s, _ in runs), 2),
                "median_peak_rss_mb": round(statistics.median(r for _, r in runs) / 2**20),
                "runs": [[round(s, 2), round(r / 2**20)] for s, r in runs],
                "command": " ".join(
                    os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd
                ),  # fmt: skip
                "machine": machine(),
                "date": time.strftime("%Y-%m-%d"),
            }
            print(json.dumps({k: record[k] for k in list(record)[:5]}), flush=True)
            results.append(record)
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
