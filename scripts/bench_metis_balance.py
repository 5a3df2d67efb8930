"""METIS parts before and after the class-balance post-pass, in memory (no pipeline).

    source scripts/env.sh
    .venv/bin/python scripts/bench_metis_balance.py --num_papers 100000 --num_parts 4 8

Generates the MAG-shaped graph (seed 0), builds global integer edge arrays (node types laid
out one after the other, classes = node types, as the stage does without --balance_ntypes)
and calls sampler.partition.assign.metis_parts with tolerance=None (METIS as it is) and
with the default tolerance. Prints a Markdown table: edge cut (fraction of all edges, every
edge type counted, as cut_report.json), worst class imbalance |count / mean - 1|,
owned-edge (in-degree) imbalance, nodes moved and the post-pass's own seconds.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_partition import export_for_dgl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sampler.partition import assign  # noqa: E402
from sampler.tools import synthetic  # noqa: E402


def global_graph(num_papers: int):
    """(num_nodes, src int64[E], dst int64[E], classes int64[N], class names)."""
    graph = synthetic.generate_mag(num_papers, seed=0)
    ntypes = sorted(graph.num_nodes)
    sizes = np.array([graph.num_nodes[t] for t in ntypes], np.int64)
    offset = dict(zip(ntypes, np.cumsum(sizes) - sizes, strict=True))
    with tempfile.TemporaryDirectory() as tmp:
        edges = export_for_dgl(graph, Path(tmp) / "graph.npz")
    src = np.concatenate([a + offset[s] for (s, _, _), (a, _) in edges.items()])
    dst = np.concatenate([b + offset[d] for (_, d, _), (_, b) in edges.items()])
    classes = np.repeat(np.arange(len(ntypes)), sizes)
    return int(sizes.sum()), src, dst, classes, ntypes


def measure(parts, src, dst, classes, num_parts, in_degree) -> tuple[float, float, str, float]:
    """(edge cut, worst class imbalance, its class index, worst owned-edge imbalance)."""
    counts = np.bincount(classes * num_parts + parts).reshape(-1, num_parts)
    mean = counts.mean(axis=1, keepdims=True)
    off = np.maximum(
        counts.max(1, keepdims=True) / mean - 1, 1 - counts.min(1, keepdims=True) / mean
    )
    load = np.bincount(parts, weights=in_degree, minlength=num_parts) / (len(src) / num_parts)
    worst = int(np.argmax(off))
    return (
        float(np.mean(parts[src] != parts[dst])),
        float(off[worst, 0]),
        worst,
        max(load.max() - 1, 1 - load.min()),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_papers", type=int, default=100_000)
    parser.add_argument("--num_parts", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--balance_edges", action="store_true")
    args = parser.parse_args()
    num_nodes, src, dst, classes, names = global_graph(args.num_papers)
    in_degree = np.bincount(dst, minlength=num_nodes)
    num_classes = len(names)
    print(f"{num_nodes:,} nodes, {len(src):,} edges, balance_edges={args.balance_edges}")
    print("| parts | pass | edge cut | worst class imbalance | owned-edge imbalance | moved | s |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: |")
    for num_parts in args.num_parts:
        raw = assign.metis_parts(
            num_nodes, src, dst, classes, num_classes, num_parts, 0, args.balance_edges,
            tolerance=None,
        )  # fmt: skip
        xadj, adjncy = assign.symmetric_csr(num_nodes, src, dst)
        load = in_degree if args.balance_edges else None
        start = time.time()
        fixed = assign.rebalance_parts(
            raw, classes, num_classes, num_parts, xadj, adjncy, assign.METIS_IMBALANCE, load
        )
        seconds = time.time() - start
        for label, parts, moved, secs in (
            ("METIS", raw, 0, 0.0),
            ("+ rebalance", fixed, int(np.sum(raw != fixed)), seconds),
        ):
            cut, worst, c, edge = measure(parts, src, dst, classes, num_parts, in_degree)
            print(
                f"| {num_parts} | {label} | {cut:.4f} | {worst:.2%} ({names[c]}) | {edge:.2%} "
                f"| {moved:,} | {secs:.2f} |"
            )


if __name__ == "__main__":
    main()
