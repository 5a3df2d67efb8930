"""Edge cut and balance of a partitioning, from small count tables (numpy only)."""

from __future__ import annotations

import numpy as np

from sampler.partition.graph import GraphTypes
from sampler.partition.layout import Layout

# Not "partition_report.json": GraphStorm takes every entry of the folder whose name starts
# with "part" for a partition, so nothing but the part<i>/ folders may.
REPORT_NAME = "cut_report.json"
LEGACY_REPORT_NAME = "partition_report.json"  # earlier runs' name: --overwrite removes it


def _balance(counts: np.ndarray) -> dict:
    """max/mean and min/mean of per-part counts (1.0 is perfect; empty sets give 1.0)."""
    counts = np.asarray(counts, dtype=np.int64)
    mean = counts.mean() if len(counts) else 0.0
    return {
        "counts": counts.tolist(),
        "max_over_mean": round(float(counts.max() / mean), 6) if mean else 1.0,
        "min_over_mean": round(float(counts.min() / mean), 6) if mean else 1.0,
    }


def partition_report(
    types: GraphTypes,
    layout: Layout,
    cut: np.ndarray,
    class_names: list[str],
    class_counts: np.ndarray,
    settings: dict,
) -> dict:
    """cut[E]: edges of each type whose ends lie in different parts; class_counts[C, P]."""
    totals = layout.edge_per_part.sum(axis=0)
    num_edges = int(totals.sum())
    per_etype = {
        types.canonical(e): {
            "cut_edges": int(cut[e]),
            "edges": int(totals[e]),
            "edge_cut": round(float(cut[e] / totals[e]), 6) if totals[e] else 0.0,
        }
        for e in range(len(types.etypes))
    }
    return {
        **settings,
        "num_nodes": int(layout.node_per_part.sum()),
        "num_edges": num_edges,
        "edge_cut": round(float(cut.sum() / num_edges), 6) if num_edges else 0.0,
        "cut_edges": int(cut.sum()),
        "edge_cut_per_etype": per_etype,
        "node_balance": {
            t: _balance(layout.node_per_part[:, i]) for i, t in enumerate(types.ntypes)
        },
        "class_balance": {name: _balance(class_counts[c]) for c, name in enumerate(class_names)},
        "edge_balance": _balance(layout.edge_per_part.sum(axis=1)),
        "max_node_imbalance": round(
            max(
                (abs(v - 1.0) for b in _type_balances(layout) for v in b),
                default=0.0,
            ),
            6,
        ),
    }


def _type_balances(layout: Layout):
    for t in range(layout.node_per_part.shape[1]):
        b = _balance(layout.node_per_part[:, t])
        yield b["max_over_mean"], b["min_over_mean"]
