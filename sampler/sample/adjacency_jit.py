"""Compiled kernels of the CSR build (sampler/sample/adjacency.py, `build_adjacency`).

`csr_sort` is `np.lexsort((content, dst, src))`: a counting sort by the top bits of the
source fingerprint (hashes, so the buckets hold a few edges each), then each bucket sorted by
(src, dst, content) - by insertion when small, by stable sorts when large (a hub's edges).
numpy's lexsort makes indirect passes over all the edges for every key, missing the caches at
each step. `csr_rows` then walks the sorted edges once: the edge key of each
(`ids.combine(src, dst, rank among parallel edges)`) and the start of each source's run.
Same results as the numpy code they replace; tests/test_tables_jit.py compares them.
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import directory_bits, mix
from sampler.jit import njit

_SMALL_BUCKET = 48  # insertion sort up to this many edges, stable sorts above


@njit
def csr_sort(src, dst, content):
    """(np.lexsort((content, dst, src)), src and dst in that order): stable, so equal edges
    keep their input order. The keys travel with the order (the bucket sorts then compare
    neighbouring memory, not edges scattered over the input)."""
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
    s = np.empty(n, np.uint64)
    d = np.empty(n, np.uint64)
    c = np.empty(n, np.uint64)
    for i in range(n):  # stable: input order within a bucket
        b = np.int64(src[i] >> shift)
        p = fill[b]
        order[p], s[p], d[p], c[p] = i, src[i], dst[i], content[i]
        fill[b] = p + 1
    for b in range(1 << bits):
        lo, hi = start[b], start[b + 1]
        if hi - lo < 2:
            continue
        if hi - lo <= _SMALL_BUCKET:
            for i in range(lo + 1, hi):
                e, se, de, ce = order[i], s[i], d[i], c[i]
                j = i
                while j > lo and (
                    se < s[j - 1]
                    or (se == s[j - 1] and (de < d[j - 1] or (de == d[j - 1] and ce < c[j - 1])))
                ):
                    order[j], s[j], d[j], c[j] = order[j - 1], s[j - 1], d[j - 1], c[j - 1]
                    j -= 1
                order[j], s[j], d[j], c[j] = e, se, de, ce
        else:  # least significant key first, each sort stable
            idx = np.arange(hi - lo)
            idx = idx[np.argsort(c[lo:hi][idx], kind="mergesort")]
            idx = idx[np.argsort(d[lo:hi][idx], kind="mergesort")]
            idx = idx[np.argsort(s[lo:hi][idx], kind="mergesort")]
            order[lo:hi] = order[lo:hi][idx]
            s[lo:hi] = s[lo:hi][idx]
            d[lo:hi] = d[lo:hi][idx]
            c[lo:hi] = c[lo:hi][idx]
    return order, s, d


@njit
def csr_rows(src, dst):
    """For edges sorted by source, then target: (edge keys, distinct sources, start of each
    source's run) - `build_adjacency`'s columns (its targets are `dst`)."""
    n = len(src)
    keys = np.empty(n, np.uint64)
    firsts = np.empty(n, np.int64)
    n_nodes = 0
    rank = 0
    for i in range(n):
        if i == 0 or src[i] != src[i - 1]:
            firsts[n_nodes] = i
            n_nodes += 1
            rank = 0
        elif dst[i] != dst[i - 1]:
            rank = 0
        else:
            rank += 1
        keys[i] = mix(mix(mix(src[i]) ^ dst[i]) ^ np.uint64(rank))
    nodes = np.empty(n_nodes, np.uint64)
    for k in range(n_nodes):
        nodes[k] = src[firsts[k]]
    return keys, nodes, firsts[:n_nodes].copy()


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py)."""
    fps = np.array([1, 2, 3], np.uint64)
    _, src, dst = csr_sort(fps, fps, fps)
    csr_rows(src, dst)
