"""Benchmarks the partition stage against DGL 2.1.0's own partition_graph on one graph.

    source scripts/env.sh
    .venv/bin/python scripts/bench_partition.py --num_papers 100000 --num_parts 4 8 \\
        --methods random metis lp --dgl_methods random metis --work_dir /tmp/partbench \\
        [--num_hops 1]

Generates the MAG-shaped graph (seed 0), runs `python -m pipelines.partition` per
(method, num_parts) and, in the DGL oracle venv (scripts/setup_dgl_oracle.sh),
tests/oracle/dgl_partition_bench.py, which calls dgl.distributed.partition_graph on the
same graph. Every run is a child process; its wall time and peak RSS (ru_maxrss of the
child and its children) are measured here. The edge cut of DGL's runs is computed here
from DGL's node assignment over the same edge list. Prints a Markdown table, appends one
record per run to --out (docs/bench_partition.json) and draws them beside it as a PNG
(scripts/bench_plots.py: docs/bench_partition.png).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sampler.tools import synthetic  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
import bench_plots  # noqa: E402


def timed(cmd: list[str], log: Path) -> tuple[float, float, bool]:
    """(seconds, peak RSS in MB, ok) of a child process; a failure is printed, not fatal,
    so that the other tools still run (their rows say which run failed)."""
    start = time.time()
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        print(f"failed (status {status}): {' '.join(cmd)}; see {log}", file=sys.stderr)
    return time.time() - start, usage.ru_maxrss / 1024, status == 0


def export_for_dgl(graph: synthetic.SyntheticGraph, path: Path) -> dict:
    """The graph as integer arrays (id = index in the generator's ids) for the DGL side."""
    ntypes = sorted(graph.num_nodes)
    etypes = sorted((s, name, d) for name, (s, d) in synthetic.EDGE_SETS.items())
    arrays = {
        "ntypes": np.array(ntypes),
        "etypes": np.array([":".join(e) for e in etypes]),
        "num_nodes": np.array([graph.num_nodes[t] for t in ntypes], np.int64),
    }

    def index(column):
        return np.array([int(x[1:]) for x in column.to_pylist()], dtype=np.int64)

    edges = {}
    for i, (s, name, d) in enumerate(etypes):
        table = graph.tables[synthetic.REVERSED.get(name, name)]
        a, b = index(table.column("#source")), index(table.column("#target"))
        if name in synthetic.REVERSED:
            a, b = b, a
        arrays[f"src_{i}"], arrays[f"dst_{i}"] = a, b
        edges[(s, d, i)] = (a, b)
    paper = graph.tables["paper"]
    feat = paper.column("feat").combine_chunks().flatten().to_numpy()
    arrays["feat_paper_feat"] = feat.reshape(graph.num_nodes["paper"], -1)
    arrays["feat_paper_year"] = paper.column("year").to_numpy()
    arrays["feat_paper_label"] = paper.column("label").to_numpy()
    np.savez(path, **arrays)
    return edges


def dgl_cut(assignment: Path, edges: dict) -> float:
    with np.load(assignment) as parts:
        cut = total = 0
        for (s, d, _), (a, b) in edges.items():
            cut += int(np.sum(parts[f"parts_{s}"][a] != parts[f"parts_{d}"][b]))
            total += len(a)
    return cut / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_papers", type=int, default=100_000)
    parser.add_argument("--num_parts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--methods", nargs="*", default=["random", "metis", "lp"])
    parser.add_argument("--dgl_methods", nargs="*", default=["random", "metis"])
    parser.add_argument("--num_hops", type=int, default=1, help="HALO hops, both tools")
    parser.add_argument("--work_dir", default="/tmp/partbench")
    parser.add_argument("--extra", nargs="*", default=[], help="more flags for our CLI")
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench_partition.json"),
                        help="JSON records, appended to (and plotted beside it)")  # fmt: skip
    args = parser.parse_args()
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    graph = synthetic.generate_mag(args.num_papers, seed=0)
    schema = synthetic.write_graph(graph, str(work / "graph"), fmt="parquet", num_shards=4)
    edges = export_for_dgl(graph, work / "graph.npz")
    dgl_python = Path(os.environ.get("DGL_VENV") or ROOT / ".venv-dgl") / "bin" / "python"
    rows = []
    for parts in args.num_parts:
        for method in args.methods:
            out = work / f"ours_{method}_{parts}"
            cmd = [sys.executable, "-m", "pipelines.partition", "--graph_schema", schema,
                   "--output_dir", str(out), "--graph_name", "mag", "--num_parts", str(parts),
                   "--part_method", method, "--num_hops", str(args.num_hops), "--overwrite",
                   *args.extra]  # fmt: skip
            seconds, rss, ok = timed(cmd, work / f"ours_{method}_{parts}.log")
            if not ok:
                rows.append(("this stage (failed)", method, parts, seconds, rss, float("nan"), 0))
                continue
            report = json.loads((out / "cut_report.json").read_text())
            worst = max(
                max(b["max_over_mean"] - 1, 1 - b["min_over_mean"])
                for b in report["node_balance"].values()
            )
            rows.append(("this stage", method, parts, seconds, rss, report["edge_cut"], worst))
        for method in args.dgl_methods:
            out = work / f"dgl_{method}_{parts}"
            cmd = [str(dgl_python), str(ROOT / "tests/oracle/dgl_partition_bench.py"),
                   str(work / "graph.npz"), str(out), str(parts), method,
                   str(args.num_hops)]  # fmt: skip
            seconds, rss, ok = timed(cmd, work / f"dgl_{method}_{parts}.log")
            if not ok:
                rows.append(("DGL 2.1.0 (failed)", method, parts, seconds, rss, float("nan"), 0))
                continue
            with np.load(out / "assignment.npz") as a:
                worst = 0.0
                for key in a.files:
                    counts = np.bincount(a[key], minlength=parts)
                    mean = counts.mean()
                    worst = max(worst, counts.max() / mean - 1, 1 - counts.min() / mean)
            cut = dgl_cut(out / "assignment.npz", edges)
            rows.append(("DGL 2.1.0", method, parts, seconds, rss, cut, worst))
    print(f"num_hops {args.num_hops}")
    print("| tool | method | parts | wall s | peak RSS MB | edge cut | worst type imbalance |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for tool, method, parts, seconds, rss, cut, worst in rows:
        print(
            f"| {tool} | {method} | {parts} | {seconds:.1f} | {rss:,.0f} | {cut:.3f} | {worst:.1%} |"
        )
    write_records(args, rows)


def write_records(args, rows) -> None:
    """Appends the runs that finished to --out (the format bench_plots.plot_partition reads)."""
    out = Path(args.out)
    records = json.loads(out.read_text()) if out.exists() else []
    machine = {"cores": os.cpu_count(), "python": sys.version.split()[0],
               "date": time.strftime("%Y-%m-%d")}  # fmt: skip
    for tool, method, parts, seconds, rss, cut, worst in rows:
        if "failed" in tool:
            continue
        records.append({"tool": "ours" if tool == "this stage" else "dgl", "method": method,
                        "papers": args.num_papers, "parts": parts, "num_hops": args.num_hops,
                        "seconds": round(seconds, 1), "peak_rss_mb": round(rss),
                        "edge_cut": round(cut, 4), "worst_imbalance": round(worst, 4),
                        "command": " ".join(["scripts/bench_partition.py", *sys.argv[1:]]),
                        "machine": machine})  # fmt: skip
    out.write_text(json.dumps(records, indent=1) + "\n")
    bench_plots.plot_file(str(out))


if __name__ == "__main__":
    main()
