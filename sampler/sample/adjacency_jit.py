"""Compiled kernels of the CSR build (sampler/sample/adjacency.py, `build_adjacency`).

`csr_order` is `np.lexsort((content, dst, src))`: a counting sort by the top bits of the
source fingerprint (hashes, so the buckets hold a few edges each), then each bucket sorted by
(src, dst, content) - by insertion when small, by stable sorts when large (a hub's edges).
numpy's lexsort makes indirect passes over all the edges for every key, missing the caches at
each step. `csr_rows` then walks the sorted edges once: the target of each, its edge key
(`ids.combine(src, dst, rank among parallel edges)`) and the start of each source's run.
Same results as the numpy code they replace; tests/test_tables_jit.py compares them.
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import directory_bits, mix
from sampler.jit import njit

_SMALL_BUCKET = 48  # insertion sort up to this many edges, stable sorts above


@njit
def _less(src, dst, content, a, b):
    """Whether edge a sorts before edge b by (src, dst, content) (ties: not less)."""
    if src[a] != src[b]:
        return src[a] < src[b]
    if dst[a] != dst[b]:
        return dst[a] < dst[b]
    return content[a] < content[b]


@njit
def csr_order(src, dst, content):
    """np.lexsort((content, dst, src)) (stable: equal edges keep their input order)."""
    n = len(src)
    bits = directory_bits(n)
    shift = np.uint64(64 - bits)
    start = np.zeros((1 << bits) + 1, np.int64)
    for i in range(n):
        start[np.int64(src[i] >> shift) + 1] += 1
    for b in range(1 << bits):
        start[b + 1] += start[b]
    fill = start[:-1].copy()
    order = np.empty(n, np.int64)
    for i in range(n):  # stable: input order within a bucket
        b = np.int64(src[i] >> shift)
        order[fill[b]] = i
        fill[b] += 1
    for b in range(1 << bits):
        lo, hi = start[b], start[b + 1]
        if hi - lo < 2:
            continue
        if hi - lo <= _SMALL_BUCKET:
            for i in range(lo + 1, hi):
                e = order[i]
                j = i
                while j > lo and _less(src, dst, content, e, order[j - 1]):
                    order[j] = order[j - 1]
                    j -= 1
                order[j] = e
        else:  # least significant key first, each sort stable
            seg = order[lo:hi].copy()
            seg = seg[np.argsort(content[seg], kind="mergesort")]
            seg = seg[np.argsort(dst[seg], kind="mergesort")]
            seg = seg[np.argsort(src[seg], kind="mergesort")]
            order[lo:hi] = seg
    return order


@njit
def csr_rows(src, dst, order):
    """For edges taken in `order` (sorted by source, then target): (targets, edge keys,
    distinct sources, start of each source's run) - `build_adjacency`'s columns."""
    n = len(order)
    targets = np.empty(n, np.uint64)
    keys = np.empty(n, np.uint64)
    firsts = np.empty(n, np.int64)
    n_nodes = 0
    rank = 0
    for i in range(n):
        e = order[i]
        s, d = src[e], dst[e]
        if i == 0 or s != src[order[i - 1]]:
            firsts[n_nodes] = i
            n_nodes += 1
            rank = 0
        elif d != dst[order[i - 1]]:
            rank = 0
        else:
            rank += 1
        targets[i] = d
        keys[i] = mix(mix(mix(s) ^ d) ^ np.uint64(rank))
    nodes = np.empty(n_nodes, np.uint64)
    for k in range(n_nodes):
        nodes[k] = src[order[firsts[k]]]
    return targets, keys, nodes, firsts[:n_nodes].copy()
