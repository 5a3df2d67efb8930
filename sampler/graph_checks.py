"""Checks of a graph's shape that both stages count: self-loops and parallel edges."""

from __future__ import annotations

import numpy as np


def edge_shape_counts(src: np.ndarray, dst: np.ndarray, same_set: bool) -> tuple[int, int]:
    """(self-loops, parallel edges) among edges given by source/target ids or fingerprints.

    A self-loop joins a node to itself (only possible when both ends are one node set); an
    edge is parallel when an earlier edge has the same source and target (so k edges between
    one pair count k - 1).
    """
    n = len(src)
    if n == 0:
        return 0, 0
    loops = int(np.count_nonzero(src == dst)) if same_set else 0
    if _grouped_and_sorted(src, dst):  # e.g. CSR adjacency: no sort needed
        same = (src[1:] == src[:-1]) & (dst[1:] == dst[:-1])
        return loops, int(np.count_nonzero(same))
    order = np.lexsort((dst, src))
    s, d = src[order], dst[order]
    repeat = (s[1:] == s[:-1]) & (d[1:] == d[:-1])
    return loops, int(np.count_nonzero(repeat))


def _grouped_and_sorted(src: np.ndarray, dst: np.ndarray) -> bool:
    """Whether the edges are already in (src, dst) order: one O(n) pass instead of a sort."""
    step_src = src[1:] >= src[:-1]
    if not step_src.all():
        return False
    return bool(((src[1:] > src[:-1]) | (dst[1:] >= dst[:-1])).all())
