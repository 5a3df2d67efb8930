"""Compiled kernels of the CSR build (sampler/sample/adjacency.py, `build_adjacency`).

`csr_sort` is `np.lexsort((content, dst, src))`: counting sorts by the top bits of the
source fingerprint (hashes, so the buckets hold a source or two each) and, within a bucket that
stays in the cache, of the target's, then each bucket sorted by (src, dst, content) - by
insertion when small (nearly in order by then), by stable sorts when large (a hub's edges).
numpy's lexsort makes indirect passes over all the edges for every key, missing the caches at
each step (`csr_sort_pairs`: the same without an order and a content to carry, for edges
without features). `csr_rows` then walks the sorted edges once: the edge key of each
(`ids.combine(src, dst, rank among parallel edges)`) and the start of each source's run.
Same results as the numpy code they replace; tests/test_tables_jit.py compares them.
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import mix
from sampler.jit import njit

_SMALL_BUCKET = 48  # insertion sort up to this many edges, stable sorts above
_TOP_BITS = 11  # the first pass's buckets: 2,048 at most (few streams to write)
_FIRST_BUCKET_BITS = 15  # ... and about 2**15 edges each when there are enough edges
_NEXT_BITS = 14  # the source's bits that the second passes split a first bucket by, at most
_SECOND_PASS_MAX = 1 << 18  # a first bucket up to this many edges is split in the cache
_TARGET_BITS = 8  # the second pass orders each first bucket by these top bits of the target


@njit
def csr_sort(src, dst, content):
    """(np.lexsort((content, dst, src)), src and dst in that order): stable, so equal edges
    keep their input order. The keys travel with the order (the bucket sorts then compare
    neighbouring memory, not edges scattered over the input).

    A counting pass by the source's top bits over all the edges (up to `_TOP_BITS`, about
    2**`_FIRST_BUCKET_BITS` edges a bucket), then each first bucket in a buffer that stays in
    the cache (up to `_SECOND_PASS_MAX` edges; a larger one, a hub's, is sorted whole): a
    counting pass by the target's top `_TARGET_BITS` bits and one by the source's next bits
    (up to `_NEXT_BITS`), so that each final bucket (mostly one source's edges) is nearly in
    order when an insertion sort by (src, dst, content) finishes it. Every pass is stable, so
    ties keep their input order."""
    n = len(src)
    log_n = 1
    while (1 << (log_n + 1)) <= n:
        log_n += 1
    top = max(1, min(_TOP_BITS, log_n - _FIRST_BUCKET_BITS))
    bits = max(top, min(log_n, top + _NEXT_BITS))  # about one source per final bucket
    shift = np.uint64(64 - top)
    start = np.zeros((1 << top) + 1, np.int64)
    for i in range(n):
        start[np.int64(src[i] >> shift) + 1] += 1
    for b in range(1 << top):
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
    rest = bits - top
    largest = 0
    for b in range(1 << top):
        largest = max(largest, start[b + 1] - start[b])
    size = min(largest, _SECOND_PASS_MAX) if rest > 0 else 0
    t_order = np.empty(size, np.int64)
    t_s = np.empty(size, np.uint64)
    t_d = np.empty(size, np.uint64)
    t_c = np.empty(size, np.uint64)
    shift2 = np.uint64(64 - bits)
    mask = np.uint64((1 << rest) - 1)
    sub = np.zeros((1 << rest) + 1, np.int64)
    dshift = np.uint64(64 - _TARGET_BITS)
    by_target = np.zeros((1 << _TARGET_BITS) + 1, np.int64)
    for b in range(1 << top):
        lo, hi = start[b], start[b + 1]
        if rest == 0 or hi - lo <= _SMALL_BUCKET or hi - lo > _SECOND_PASS_MAX:
            _sort_run(order, s, d, c, lo, hi)
            continue
        by_target[:] = 0  # first by the target's top bits, into the buffer
        for i in range(lo, hi):
            by_target[np.int64(d[i] >> dshift) + 1] += 1
        for k in range(1 << _TARGET_BITS):
            by_target[k + 1] += by_target[k]
        for i in range(lo, hi):
            k = np.int64(d[i] >> dshift)
            p = by_target[k]
            t_order[p], t_s[p], t_d[p], t_c[p] = order[i], s[i], d[i], c[i]
            by_target[k] = p + 1
        sub[:] = 0  # then by the source's next bits, back in place
        for i in range(hi - lo):
            sub[np.int64((t_s[i] >> shift2) & mask) + 1] += 1
        for k in range(1 << rest):
            sub[k + 1] += sub[k]
        for i in range(hi - lo):
            k = np.int64((t_s[i] >> shift2) & mask)
            p = lo + sub[k]
            order[p], s[p], d[p], c[p] = t_order[i], t_s[i], t_d[i], t_c[i]
            sub[k] += 1
        first = lo  # sub[k] is now the end of final bucket k
        for k in range(1 << rest):
            if lo + sub[k] - first > 1:
                _sort_run(order, s, d, c, first, lo + sub[k])
            first = lo + sub[k]
    return order, s, d


@njit
def _sort_run(order, s, d, c, lo, hi):
    """Sorts positions lo..hi of (order, s, d, c) by (s, d, c), stably."""
    if hi - lo < 2:
        return
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
        return
    # least significant key first, each sort stable
    idx = np.arange(hi - lo)
    idx = idx[np.argsort(c[lo:hi][idx], kind="mergesort")]
    idx = idx[np.argsort(d[lo:hi][idx], kind="mergesort")]
    idx = idx[np.argsort(s[lo:hi][idx], kind="mergesort")]
    order[lo:hi] = order[lo:hi][idx]
    s[lo:hi] = s[lo:hi][idx]
    d[lo:hi] = d[lo:hi][idx]
    c[lo:hi] = c[lo:hi][idx]


@njit
def csr_sort_pairs(src, dst):
    """(src, dst) sorted by (src, dst): `csr_sort` for edges that carry nothing else (no
    features, no target times), so that no order and no content travel with the keys (edges
    equal in both are alike, so the order among them is moot). The same passes as csr_sort."""
    n = len(src)
    log_n = 1
    while (1 << (log_n + 1)) <= n:
        log_n += 1
    top = max(1, min(_TOP_BITS, log_n - _FIRST_BUCKET_BITS))
    bits = max(top, min(log_n, top + _NEXT_BITS))  # about one source per final bucket
    shift = np.uint64(64 - top)
    start = np.zeros((1 << top) + 1, np.int64)
    for i in range(n):
        start[np.int64(src[i] >> shift) + 1] += 1
    for b in range(1 << top):
        start[b + 1] += start[b]
    fill = start[:-1].copy()
    s = np.empty(n, np.uint64)
    d = np.empty(n, np.uint64)
    for i in range(n):
        b = np.int64(src[i] >> shift)
        p = fill[b]
        s[p], d[p] = src[i], dst[i]
        fill[b] = p + 1
    rest = bits - top
    largest = 0
    for b in range(1 << top):
        largest = max(largest, start[b + 1] - start[b])
    size = min(largest, _SECOND_PASS_MAX) if rest > 0 else 0
    t_s = np.empty(size, np.uint64)
    t_d = np.empty(size, np.uint64)
    shift2 = np.uint64(64 - bits)
    mask = np.uint64((1 << rest) - 1)
    sub = np.zeros((1 << rest) + 1, np.int64)
    dshift = np.uint64(64 - _TARGET_BITS)
    by_target = np.zeros((1 << _TARGET_BITS) + 1, np.int64)
    for b in range(1 << top):
        lo, hi = start[b], start[b + 1]
        if rest == 0 or hi - lo <= _SMALL_BUCKET or hi - lo > _SECOND_PASS_MAX:
            _sort_pairs(s, d, lo, hi)
            continue
        by_target[:] = 0
        for i in range(lo, hi):
            by_target[np.int64(d[i] >> dshift) + 1] += 1
        for k in range(1 << _TARGET_BITS):
            by_target[k + 1] += by_target[k]
        for i in range(lo, hi):
            k = np.int64(d[i] >> dshift)
            p = by_target[k]
            t_s[p], t_d[p] = s[i], d[i]
            by_target[k] = p + 1
        sub[:] = 0
        for i in range(hi - lo):
            sub[np.int64((t_s[i] >> shift2) & mask) + 1] += 1
        for k in range(1 << rest):
            sub[k + 1] += sub[k]
        for i in range(hi - lo):
            k = np.int64((t_s[i] >> shift2) & mask)
            p = lo + sub[k]
            s[p], d[p] = t_s[i], t_d[i]
            sub[k] += 1
        first = lo
        for k in range(1 << rest):
            if lo + sub[k] - first > 1:
                _sort_pairs(s, d, first, lo + sub[k])
            first = lo + sub[k]
    return s, d


@njit
def _sort_pairs(s, d, lo, hi):
    """Sorts positions lo..hi of (s, d) by (s, d), as `_sort_run` without order or content."""
    if hi - lo < 2:
        return
    if hi - lo <= _SMALL_BUCKET:
        for i in range(lo + 1, hi):
            se, de = s[i], d[i]
            j = i
            while j > lo and (se < s[j - 1] or (se == s[j - 1] and de < d[j - 1])):
                s[j], d[j] = s[j - 1], d[j - 1]
                j -= 1
            s[j], d[j] = se, de
        return
    idx = np.argsort(d[lo:hi], kind="mergesort")
    idx = idx[np.argsort(s[lo:hi][idx], kind="mergesort")]
    s[lo:hi] = s[lo:hi][idx]
    d[lo:hi] = d[lo:hi][idx]


@njit
def csr_rows(src, dst, keys):
    """For edges sorted by source, then target: (edge keys, distinct sources, start of each
    source's run) - `build_adjacency`'s columns (its targets are `dst`); the keys are written
    into `keys` (numpy's memory, the caller's: a dense graph keeps them)."""
    n = len(src)
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


@njit
def shape_counts(starts, degrees, targets, same_set):
    """`graph_checks.edge_shape_counts` of a CSR (row i's out-edges: targets[starts[i] :
    starts[i] + degrees[i]]), in one walk without the edge list: (self-loops, parallel edges).
    A run's targets are in canonical (ascending) order, so a parallel edge is one equal to the
    target before it; a run out of order is counted on a sorted copy."""
    loops = 0
    parallel = 0
    for i in range(len(starts)):
        lo = starts[i]
        hi = lo + degrees[i]
        ordered = True
        for p in range(lo, hi):
            t = targets[p]
            if same_set and t == i:
                loops += 1
            if p > lo:
                if t == targets[p - 1]:
                    parallel += 1
                elif t < targets[p - 1]:
                    ordered = False
        if not ordered:
            run = np.sort(targets[lo:hi])
            parallel -= np.sum(targets[lo + 1 : hi] == targets[lo : hi - 1])
            parallel += np.sum(run[1:] == run[:-1])
    return loops, parallel


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py)."""
    fps = np.array([1, 2, 3], np.uint64)
    _, src, dst = csr_sort(fps, fps, fps)
    csr_rows(src, dst, np.empty(len(src), np.uint64))
    csr_sort_pairs(fps, fps)
    rows = np.array([0, 1, 2], np.int64)
    rows.flags.writeable = False  # a dense graph's arrays, built here or mapped (dense.py)
    shape_counts(rows, rows, rows, True)
