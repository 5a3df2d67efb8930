"""Compiled kernels of the dense path's per-sample work (sampler/sample/dense.py): the
frontier's and the members' dedup, and the output position of a (sample, node row).

Each works sample by sample (a counting sort by sample first): a sample's few hundred or
thousand entries stay in the CPU caches, where the numpy versions sorted and searched whole
chunks of millions. Same results, same order as the numpy code they replace (documented per
kernel); tests/test_compiled_kernels.py compares them, tests/test_kernel_digests.py pins the
records.
"""

from __future__ import annotations

import numpy as np

from sampler import arrays
from sampler.jit import njit


@njit
def _by_sample(sample, n_samples):
    """(start of each sample's run, positions in sample order, stable): a counting sort."""
    start = np.zeros(n_samples + 1, np.int64)
    for s in sample:
        start[s + 1] += 1
    for s in range(n_samples):
        start[s + 1] += start[s]
    fill = start[:-1].copy()
    order = np.empty(len(sample), np.int64)
    for i in range(len(sample)):
        s = sample[i]
        order[fill[s]] = i
        fill[s] += 1
    return start, order


@njit
def _unique_rows_bitmap(sample, row, n_samples, n_rows):
    """unique_rows by a bitmap of every (sample, row), scanned in blocks of 64 slots."""
    space = n_samples * n_rows
    seen = np.zeros(space, np.bool_)
    touched = np.zeros((space >> 6) + 1, np.bool_)
    count = 0
    for i in range(len(sample)):
        k = sample[i] * n_rows + row[i]
        if not seen[k]:
            seen[k] = True
            touched[k >> 6] = True
            count += 1
    rows = np.empty(count, np.int64)
    bounds = np.empty(n_samples + 1, np.int64)
    o = 0
    for s in range(n_samples):
        bounds[s] = o
        base = s * n_rows
        end = base + n_rows
        j = base
        while j < end:
            if not touched[j >> 6]:
                j = ((j >> 6) + 1) << 6
                continue
            if seen[j]:
                rows[o] = j - base
                o += 1
            j += 1
    bounds[n_samples] = o
    return bounds, rows


@njit
def _unique_rows_stamps(sample, row, n_samples, n_rows):
    """unique_rows by a counting sort by sample, a dedup by stamps and a sort per sample."""
    start, order = _by_sample(sample, n_samples)
    stamp = np.full(n_rows, -1, np.int64)
    rows = np.empty(len(sample), np.int64)
    bounds = np.empty(n_samples + 1, np.int64)
    o = 0
    for s in range(n_samples):
        bounds[s] = o
        for q in range(start[s], start[s + 1]):
            r = row[order[q]]
            if stamp[r] != s:
                stamp[r] = s
                rows[o] = r
                o += 1
        rows[bounds[s] : o].sort()
    bounds[n_samples] = o
    return bounds, rows[:o].copy()


def unique_rows(sample, row, n_samples: int, n_rows: int):
    """The distinct (sample, row) pairs, sorted by sample then row (what sorted_unique of
    sample * n_rows + row gives): (bounds, rows); sample s owns rows[bounds[s]:bounds[s+1]].

    A bitmap of every (sample, row) when that is small next to the pairs (as
    arrays.sorted_unique_below decides), else stamps and a sort per sample."""
    n_rows = max(int(n_rows), 1)
    space = n_samples * n_rows
    if space <= arrays._BITMAP_LIMIT and space <= 16 * len(sample) + (1 << 16):
        return _unique_rows_bitmap(sample, row, n_samples, n_rows)
    return _unique_rows_stamps(sample, row, n_samples, n_rows)


@njit
def member_positions(bounds, rows, seed_row, has_seed):
    """Output position (`local`) of each member and the output order (`order`): per
    sample, the seed first (when `has_seed` and it is a member), then the rest by row."""
    n_samples = len(bounds) - 1
    local = np.empty(len(rows), np.int64)
    order = np.empty(len(rows), np.int64)
    for s in range(n_samples):
        lo, hi = bounds[s], bounds[s + 1]
        seed_at = -1
        if has_seed:
            for j in range(lo, hi):
                if rows[j] == seed_row[s]:
                    seed_at = j
                    break
        o = lo
        if seed_at >= 0:
            order[o] = seed_at
            o += 1
        for j in range(lo, hi):
            if j == seed_at:
                local[j] = 0
                continue
            local[j] = j - lo + (1 if seed_at >= 0 and j < seed_at else 0)
            order[o] = j
            o += 1
    return local, order


@njit
def find(bounds, rows, local, sample, row, n_rows):
    """Output position of each (sample, row) and whether it is a member; a non-member's
    position is 0. Queries come in runs of one sample (each part of a chunk is ordered by
    sample): a table of the run's sample's members by row answers each in one look-up. When
    the runs are too many (queries in no order), the queries are first sorted by sample."""
    n = len(sample)
    out = np.zeros(n, np.int64)
    found = np.zeros(n, np.bool_)
    n_samples = len(bounds) - 1
    runs = 0
    filled = 0
    for i in range(n):
        if i == 0 or sample[i] != sample[i - 1]:
            runs += 1
            filled += bounds[sample[i] + 1] - bounds[sample[i]]
    if filled > 4 * (len(rows) + n):
        order = _by_sample(sample, n_samples)[1]
    else:
        order = np.arange(n)
    stamp = np.full(max(n_rows, 1), -1, np.int64)
    position = np.empty(max(n_rows, 1), np.int64)
    fill = -1
    for q in range(n):
        i = order[q]
        s = sample[i]
        if q == 0 or s != sample[order[q - 1]]:
            fill += 1
            for j in range(bounds[s], bounds[s + 1]):
                stamp[rows[j]] = fill
                position[rows[j]] = local[j]
        r = row[i]
        if stamp[r] == fill:
            out[i] = position[r]
            found[i] = True
    return out, found


@njit
def _edge_before(i, j, dst, ekey):
    return dst[i] < dst[j] or (dst[i] == dst[j] and ekey[i] < ekey[j])


@njit
def unique_edges(sample, src, dst, ekey, src_bounds):
    """`assemble.unique_edges` then `group_bounds`: the edges' indices in (sample, source,
    target, edge key, input) order, less each edge whose (sample, edge key) repeats the one
    before it, and each sample's bounds in that list. `src` is the source's output position
    in its sample, `src_bounds` the source set's member bounds: a counting sort by (sample,
    source), then a short sort of each source's edges by (target, edge key), stable."""
    n_samples = len(src_bounds) - 1
    m = len(sample)
    n_groups = src_bounds[n_samples]
    start = np.zeros(n_groups + 1, np.int64)
    for i in range(m):
        start[src_bounds[sample[i]] + src[i] + 1] += 1
    for g in range(n_groups):
        start[g + 1] += start[g]
    fill = start[:-1].copy()
    order = np.empty(m, np.int64)
    for i in range(m):
        g = src_bounds[sample[i]] + src[i]
        order[fill[g]] = i
        fill[g] += 1
    for g in range(n_groups):
        a, b = start[g], start[g + 1]
        if b - a > 32:
            sub = order[a:b].copy()
            order[a:b] = sub[np.argsort(dst[sub], kind="mergesort")]
        for x in range(a + 1, b):  # insertion sort: by (target, edge key), stable
            v = order[x]
            y = x
            while y > a and _edge_before(v, order[y - 1], dst, ekey):
                order[y] = order[y - 1]
                y -= 1
            order[y] = v
    chosen = np.empty(m, np.int64)
    bounds = np.empty(n_samples + 1, np.int64)
    o = 0
    q = 0
    for s in range(n_samples):
        bounds[s] = o
        end = start[src_bounds[s + 1]]
        first = True
        while q < end:
            i = order[q]
            if first or ekey[i] != ekey[order[q - 1]]:
                chosen[o] = i
                o += 1
            first = False
            q += 1
    bounds[n_samples] = o
    return chosen[:o], bounds
