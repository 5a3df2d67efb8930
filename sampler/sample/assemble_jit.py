"""Compiled kernels of assembly, sample by sample: the members' output positions (the dense
sampler, sampler/sample/dense.py) and the order and dedup of a bucket's edges (every
placement: dense.py's through sample_jit.chunk_edges, the `sharded` placement's here), and
the members' positions of the `sharded` placement's edge endpoints.

Each works sample by sample (a counting sort by sample first): a sample's few hundred or
thousand entries stay in the CPU caches, where numpy sorted whole chunks of millions. Same
results, same order as the numpy code they replaced (tests/kernel_oracles.py;
tests/test_compiled_kernels.py compares them, tests/test_kernel_digests.py pins the records).
"""

from __future__ import annotations

import numpy as np

from sampler.jit import njit


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
def _edge_before(i, j, dst, ekey):
    return dst[i] < dst[j] or (dst[i] == dst[j] and ekey[i] < ekey[j])


@njit
def unique_edges(sample, src, dst, ekey, src_bounds):
    """The edges' indices in (sample, source,
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


@njit
def member_orders(sample, fp, is_seed, n_samples):
    """A bucket's member rows (sample index, fp, seed or not) in two orders, and each
    sample's bounds in them: (sample, fp, row), and the output's (sample, the seed first,
    fp, row). A counting sort by sample, then a short stable sort of each sample's fps,
    where numpy sorted the bucket's fps (a merge sort of 64-bit keys) and then twice by
    sample."""
    m = len(sample)
    bounds = np.zeros(n_samples + 1, np.int64)
    for i in range(m):
        bounds[sample[i] + 1] += 1
    for s in range(n_samples):
        bounds[s + 1] += bounds[s]
    fill = bounds[:-1].copy()
    grouped = np.empty(m, np.int64)
    for i in range(m):
        grouped[fill[sample[i]]] = i
        fill[sample[i]] += 1
    by_sample = np.empty(m, np.int64)
    order = np.empty(m, np.int64)
    for s in range(n_samples):
        a, b = bounds[s], bounds[s + 1]
        run = grouped[a:b]
        run = run[np.argsort(fp[run], kind="mergesort")]
        by_sample[a:b] = run
        o = a
        for j in range(b - a):
            if is_seed[run[j]]:
                order[o] = run[j]
                o += 1
        for j in range(b - a):
            if not is_seed[run[j]]:
                order[o] = run[j]
                o += 1
    return by_sample, order, bounds


@njit
def member_directory(fps, bounds):
    """A directory of each sample's members for `find_in_directory`: sample s's sorted `fps`
    (in [bounds[s], bounds[s + 1])) cut by their top bits into 2**b slots (2**b >= its
    members: fingerprints are uniform, about one member a slot); slot k of sample s holds
    members [slots[starts[s] + k], slots[starts[s] + k + 1]), those whose fp >> shifts[s] is
    k (a sample of one member or none: one slot, shift 64)."""
    n_samples = len(bounds) - 1
    shifts = np.empty(n_samples, np.uint64)
    starts = np.empty(n_samples + 1, np.int64)
    total = 0
    for s in range(n_samples):
        bits = 0
        while (1 << bits) < bounds[s + 1] - bounds[s]:
            bits += 1
        shifts[s] = 64 - bits
        starts[s] = total
        total += (1 << bits) + 1
    starts[n_samples] = total
    slots = np.empty(total, np.int64)
    for s in range(n_samples):
        hi = bounds[s + 1]
        first, size, shift = starts[s], starts[s + 1] - starts[s] - 1, shifts[s]
        j = bounds[s]
        for k in range(size):
            while j < hi and shift < 64 and np.int64(fps[j] >> shift) < k:
                j += 1
            slots[first + k] = j
        slots[first + size] = hi
    return shifts, starts, slots


@njit
def find_in_directory(fps, local, shifts, starts, slots, sample, fp):
    """(`local` of (sample[i], fp[i]), found) for each i, the first such member: a look in
    its slot of `member_directory`'s (a member or two), where a binary search of the
    sample's members took ten mispredicted steps; a row that repeats the one before it (a
    source's edges come one after another) is not looked up again. Not found: 0, False."""
    n = len(sample)
    out = np.zeros(n, np.int64)
    found = np.zeros(n, np.bool_)
    for i in range(n):
        s = sample[i]
        if i > 0 and s == sample[i - 1] and fp[i] == fp[i - 1]:
            out[i] = out[i - 1]
            found[i] = found[i - 1]
            continue
        x = fp[i]
        shift = shifts[s]
        at = starts[s] + (np.int64(x >> shift) if shift < 64 else 0)
        j, end = slots[at], slots[at + 1]
        while j < end and fps[j] < x:
            j += 1
        if j < end and fps[j] == x:
            out[i] = local[j]
            found[i] = True
    return out, found


@njit
def find_members(fps, bounds, local, sample, fp):
    """(`local` of (sample[i], fp[i]), found) for each i: `fps` holds each sample's members'
    fingerprints sorted, sample s's in [bounds[s], bounds[s + 1]); `find_in_directory` with
    the members' directory made for these rows alone. Not found: 0, False."""
    shifts, starts, slots = member_directory(fps, bounds)
    return find_in_directory(fps, local, shifts, starts, slots, sample, fp)


@njit
def sample_positions(sorted_keys, key_order, keys):
    """(key_order[p], found) of each of `keys` (sample fingerprints), p its position in
    `sorted_keys` (not empty; a key not there: the position it would take, clipped to the
    last): np.searchsorted's, searched once per run of one key (a piece's rows come sample by
    sample)."""
    n = len(keys)
    last = len(sorted_keys) - 1
    out = np.empty(n, np.int64)
    found = np.zeros(n, np.bool_)
    for i in range(n):
        x = keys[i]
        if i > 0 and x == keys[i - 1]:
            out[i] = out[i - 1]
            found[i] = found[i - 1]
            continue
        base = 0
        size = last + 1
        while size > 1:
            half = size >> 1
            base += half * (sorted_keys[base + half] < x)
            size -= half
        base += sorted_keys[base] < x
        if base > last:
            base = last
        out[i] = key_order[base]
        found[i] = sorted_keys[base] == x
    return out, found


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py)."""
    i64 = np.array([0, 1, 1], np.int64)
    bounds, seed = np.array([0, 2, 3], np.int64), np.array([1, 1], np.int64)
    member_positions(bounds, i64, seed, True)
    zeros = np.zeros(2, np.int64)  # (each sample's first member)
    unique_edges(i64[:2], zeros, zeros, np.array([1, 2], np.uint64), bounds)
    fps = np.array([3, 5, 4], np.uint64)
    find_members(fps, bounds, i64, i64[:2], fps[:2])
    find_in_directory(fps, i64, *member_directory(fps, bounds), i64[:2], fps[:2])
    member_orders(i64, fps, np.array([True, False, True]), 2)
    keys = np.sort(fps)
    sample_positions(keys, i64, fps)
