"""Fused compiled kernels of the dense sampling (sampler/sample/dense.py): one pass per
op from its frontier to the picked edges and their targets, and one pass per edge set from
the picks to the chunk's ordered, deduplicated edges.

The picks of an op are kept per frontier row (CSR: row f picked `pos[pick_bounds[f] :
pick_bounds[f + 1]]`), in frontier order, so that they come grouped by sample; the edge
kernel then works sample by sample with the sample's members in two small look-up tables
and its edges in buffers that stay in the CPU caches, where numpy's step-by-step
sampling (tests/kernel_oracles.py) makes a dozen passes over (sample, edge) arrays of the
whole chunk. The draws are those of sampler/sample/randomness.py (`ids_jit.mix` and `draw`
are `ids.mix` and `ids.draws` bit for bit); tests/test_sampling_compiled.py compares the
two, tests/test_kernel_digests.py pins the records.
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import draw, mix
from sampler.jit import njit, prefetch

# Prefetch distances, in frontier rows: a row's own arrays (degree, start, fingerprint) are
# asked for _AHEAD rows on, its edges (which need its start) half as far.
_AHEAD = 16


def _bit_index_table() -> np.ndarray:
    """_lowest_bit's table: the top 6 bits of (1 << i) * _DE_BRUIJN -> i."""
    table = np.zeros(64, np.int64)
    for i in range(64):
        table[(((1 << i) * int(_DE_BRUIJN)) & (2**64 - 1)) >> 58] = i
    return table


_DE_BRUIJN = np.uint64(0x03F79D71B4CB0A89)
_BIT_INDEX = _bit_index_table()


@njit
def _lowest_bit(w):
    """The index of the lowest set bit of a uint64 w != 0 (a de Bruijn multiplication)."""
    low = w & (~w + np.uint64(1))
    return _BIT_INDEX[np.int64((low * _DE_BRUIJN) >> np.uint64(58))]


@njit
def unique_parts(bounds, rows, n_rows):
    """The distinct rows of each sample, ascending, over parts that hold their rows by
    sample: part p's rows of sample s are rows[bounds[p, s] : bounds[p, s + 1]]. Returns
    (bounds per sample, rows): the sorted distinct (sample, row) pairs, by sample.

    Per sample: a bit per node row and a scan of the words of 64 bits when the node set has
    at most 16 words per row of the sample, else stamps and a sort of the distinct rows."""
    n_parts, n_samples = bounds.shape[0], bounds.shape[1] - 1
    total = 0
    for p in range(n_parts):
        total += bounds[p, n_samples] - bounds[p, 0]
    out = np.empty(total, np.int64)
    out_bounds = np.empty(n_samples + 1, np.int64)
    n_rows = max(n_rows, 1)
    words = (n_rows + 63) >> 6
    bits = np.zeros(words, np.uint64)
    stamp = np.empty(0, np.int64)  # allocated when a sample first needs it
    one = np.uint64(1)
    o = 0
    for s in range(n_samples):
        out_bounds[s] = o
        count = 0
        for p in range(n_parts):
            count += bounds[p, s + 1] - bounds[p, s]
        if words <= 16 * count:
            for p in range(n_parts):
                for j in range(bounds[p, s], bounds[p, s + 1]):
                    r = rows[j]
                    bits[r >> 6] |= one << np.uint64(r & 63)
            for b in range(words):
                w = bits[b]
                if w == 0:
                    continue
                bits[b] = 0
                while w != 0:
                    out[o] = (b << 6) + _lowest_bit(w)
                    o += 1
                    w &= w - one
        else:
            if len(stamp) == 0:
                stamp = np.full(n_rows, -1, np.int64)
            for p in range(n_parts):
                for j in range(bounds[p, s], bounds[p, s + 1]):
                    r = rows[j]
                    if stamp[r] != s:
                        stamp[r] = s
                        out[o] = r
                        o += 1
            out[out_bounds[s] : o].sort()
    out_bounds[n_samples] = o
    return out_bounds, out[:o]


@njit
def live_frontier(bounds, rows, degrees):
    """(sample, row, bounds per sample) of the distinct pairs (`unique_parts`' bounds and
    rows) whose row has out-edges, in (sample, row) order."""
    n = 0
    for j in range(len(rows)):
        if j + _AHEAD < len(rows):
            prefetch(degrees, rows[j + _AHEAD])
        if degrees[rows[j]] > 0:
            n += 1
    fs = np.empty(n, np.int64)
    fr = np.empty(n, np.int64)
    fbounds = np.empty(len(bounds), np.int64)
    o = 0
    for s in range(len(bounds) - 1):
        fbounds[s] = o
        for j in range(bounds[s], bounds[s + 1]):
            if degrees[rows[j]] > 0:
                fs[o] = s
                fr[o] = rows[j]
                o += 1
    fbounds[len(bounds) - 1] = o
    return fs, fr, fbounds


@njit
def streams(fs, fr, sample_keys, fp, prefix):
    """`Randomness.stream(op key, sample_keys[fs], fp[fr])`, `prefix` being
    mix(mix(seed) ^ op key): ids.combine's first two steps, the same for every row."""
    out = np.empty(len(fs), np.uint64)
    last = -1
    hs = np.uint64(0)
    for f in range(len(fs)):
        s = fs[f]
        if s != last:
            hs = mix(prefix ^ sample_keys[s])
            last = s
        out[f] = mix(hs ^ fp[fr[f]])
    return out


@njit
def floyd(stream, d, k, out, o):
    """Floyd's k distinct indices of range(d) (d > k), in draw order, into out[o : o + k]:
    the uniform draw without replacement of every placement (`sampling._floyd`), the draws
    of `stream` (sampler/sample/randomness.py). pick_uniform, choose_jit and temporal_jit
    map the indices to adjacency positions."""
    for step in range(k):
        j = d - k + step
        t = np.int64(draw(stream, step) * np.float64(j + 1))
        if t > j:
            t = j
        for q in range(o, o + step):
            if out[q] == t:
                t = j
                break
        out[o + step] = t


@njit
def pick_uniform(fs, fr, starts, degrees, targets, sample_keys, fp, prefix, k):
    """RANDOM_UNIFORM per frontier row: a row of degree <= k gives every edge, in order;
    another Floyd's k picks, in draw order (`sampling._floyd`, `choose_jit._uniform`).
    Returns (pick bounds per frontier row, positions, target row)."""
    n = len(fr)
    pick_bounds = np.empty(n + 1, np.int64)
    total = 0
    for f in range(n):
        if f + _AHEAD < n:
            prefetch(degrees, fr[f + _AHEAD])
            prefetch(starts, fr[f + _AHEAD])
        pick_bounds[f] = total
        d = degrees[fr[f]]
        total += d if d <= k else k
    pick_bounds[n] = total
    pos = np.empty(total, np.int64)
    tr = np.empty(total, np.int64)
    last = -1
    hs = np.uint64(0)
    for f in range(n):
        if f + _AHEAD < n:
            prefetch(degrees, fr[f + _AHEAD])
            prefetch(starts, fr[f + _AHEAD])
            prefetch(fp, fr[f + _AHEAD])
        if f + _AHEAD // 2 < n:  # (its start was asked for _AHEAD // 2 rows ago)
            prefetch(targets, starts[fr[f + _AHEAD // 2]])
        s = fs[f]
        r = fr[f]
        d = degrees[r]
        st = starts[r]
        o = pick_bounds[f]
        if d <= k:
            for e in range(d):
                pos[o + e] = st + e
        else:
            if s != last:
                hs = mix(prefix ^ sample_keys[s])
                last = s
            floyd(mix(hs ^ fp[r]), d, k, pos, o)
            for q in range(o, o + k):
                pos[q] += st
        for q in range(o, pick_bounds[f + 1]):
            tr[q] = targets[pos[q]]
    return pick_bounds, pos, tr


@njit
def picks_by_row(rows, pos, n, targets):
    """`choose`'s (frontier row, position) picks of n frontier rows, rows ascending, as
    pick_uniform's (pick bounds, positions, target row)."""
    pick_bounds = np.zeros(n + 1, np.int64)
    for q in range(len(rows)):
        pick_bounds[rows[q] + 1] += 1
    for f in range(n):
        pick_bounds[f + 1] += pick_bounds[f]
    tr = np.empty(len(pos), np.int64)
    for q in range(len(pos)):
        tr[q] = targets[pos[q]]
    return pick_bounds, pos, tr


@njit
def _before(i, j, dst, key):
    return dst[i] < dst[j] or (dst[i] == dst[j] and key[i] < key[j])


@njit
def _sort_group(order, a, b, dst, key):
    """order[a:b] by (target, edge key), stable."""
    if b - a > 32:
        sub = order[a:b].copy()
        order[a:b] = sub[np.argsort(dst[sub], kind="mergesort")]
    for x in range(a + 1, b):
        v = order[x]
        y = x
        while y > a and _before(v, order[y - 1], dst, key):
            order[y] = order[y - 1]
            y -= 1
        order[y] = v


# A run of at most this many edges is sorted by one int64 per edge, (target << _RUN_BITS) | its
# place in the run, and the edges are moved once; a longer run, or one with two edges to one
# target (the edge keys then decide), by `_sort_run_by_target_and_key`.
_RUN_BITS = 5
_SHORT_RUN = 1 << _RUN_BITS


@njit
def _sort_run(a, b, dst, pos, key, scratch):
    """Entries a..b of (dst, pos, key) by (target, edge key), stable, in place; `scratch`
    holds at least 3 * _SHORT_RUN int64 values (written over)."""
    n = b - a
    if n > _SHORT_RUN:
        _sort_run_by_target_and_key(a, b, dst, pos, key)
        return
    for x in range(n):
        v = (dst[a + x] << _RUN_BITS) | x
        y = x
        while y > 0 and scratch[y - 1] > v:
            scratch[y] = scratch[y - 1]
            y -= 1
        scratch[y] = v
    for x in range(1, n):
        if scratch[x] >> _RUN_BITS == scratch[x - 1] >> _RUN_BITS:  # one target twice
            _sort_run_by_target_and_key(a, b, dst, pos, key)
            return
    low = _SHORT_RUN - 1
    for x in range(n):
        j = a + (scratch[x] & low)
        scratch[n + x] = pos[j]
        scratch[2 * n + x] = np.int64(key[j])
    for x in range(n):
        dst[a + x] = scratch[x] >> _RUN_BITS
        pos[a + x] = scratch[n + x]
        key[a + x] = np.uint64(scratch[2 * n + x])


@njit
def _sort_run_by_target_and_key(a, b, dst, pos, key):
    """Entries a..b of (dst, pos, key) by (target, edge key), stable, in place."""
    if b - a > 32:
        o = a + np.argsort(dst[a:b], kind="mergesort")
        dst[a:b] = dst[o]
        pos[a:b] = pos[o]
        key[a:b] = key[o]
    for x in range(a + 1, b):
        vd, vp, vk = dst[x], pos[x], key[x]
        y = x
        while y > a and (dst[y - 1] > vd or (dst[y - 1] == vd and key[y - 1] > vk)):
            dst[y] = dst[y - 1]
            pos[y] = pos[y - 1]
            key[y] = key[y - 1]
            y -= 1
        dst[y], pos[y], key[y] = vd, vp, vk


@njit
def chunk_edges(
    fs,
    fr,
    lo,
    hi,
    picks,
    picked,
    identity,
    part_bounds,
    n_samples,
    src_bounds,
    src_rows,
    src_local,
    n_src_rows,
    dst_bounds,
    dst_rows,
    dst_local,
    n_dst_rows,
    targets,
    edge_keys,
):
    """An edge set's edges of a chunk: ((2, m) source and target output positions, adjacency
    positions, bounds per sample), ordered by (sample, source, target, edge key, input), each
    (sample, edge key) once, edges whose target is not a member dropped.

    Frontier row f (sample fs[f], node row fr[f]) picked the adjacency positions
    picks[lo[f]:hi[f]], whose targets are picked[lo[f]:hi[f]] (or the positions lo[f]..hi[f]
    themselves when `identity`, their targets read from `targets`); the frontier rows are
    the parts' rows one after the other (part p: part_bounds[p]..part_bounds[p + 1]), each
    part in sample order. The members of the source and target node sets are given as
    `unique_parts`' (bounds, rows) and `member_positions`' local positions, with the
    number of rows of each node set.

    Per sample: each frontier row's edges (one source) are sorted by (target, edge key) as
    they are gathered, then the rows are emitted in source order. When a source has edges
    from more than one frontier row (several ops on one edge set), the sample's edges are
    ordered by a counting sort by source and a stable sort per source instead."""
    n_parts = len(part_bounds) - 1
    per = np.zeros(n_samples + 1, np.int64)
    total = 0
    for f in range(len(fs)):
        c = hi[f] - lo[f]
        per[fs[f]] += c
        total += c
    most = 1
    for s in range(n_samples):
        most = max(most, per[s], src_bounds[s + 1] - src_bounds[s] + 1)
    b_src = np.empty(most, np.int64)
    b_dst = np.empty(most, np.int64)
    b_pos = np.empty(most, np.int64)
    b_key = np.empty(most, np.uint64)
    order = np.empty(max(most, 3 * _SHORT_RUN), np.int64)  # (and _sort_run's scratch)
    count = np.empty(most + 1, np.int64)
    run_start = np.empty(most + 1, np.int64)
    run_end = np.empty(most + 1, np.int64)
    run_stamp = np.full(most + 1, -1, np.int64)
    src_stamp = np.full(max(n_src_rows, 1), -1, np.int64)
    src_pos = np.zeros(max(n_src_rows, 1), np.int64)
    dst_stamp = np.full(max(n_dst_rows, 1), -1, np.int64)
    dst_pos = np.zeros(max(n_dst_rows, 1), np.int64)
    out = np.empty(2 * total, np.int64)  # sources in [0, total), targets in [total, 2 total)
    out_pos = np.empty(total, np.int64)
    bounds = np.empty(n_samples + 1, np.int64)
    cur = part_bounds[:-1].copy()
    o = 0
    for s in range(n_samples):
        bounds[s] = o
        for j in range(src_bounds[s], src_bounds[s + 1]):
            src_stamp[src_rows[j]] = s
            src_pos[src_rows[j]] = src_local[j]
        for j in range(dst_bounds[s], dst_bounds[s + 1]):
            dst_stamp[dst_rows[j]] = s
            dst_pos[dst_rows[j]] = dst_local[j]
        nb = 0
        multi = False
        for p in range(n_parts):
            f = cur[p]
            end = part_bounds[p + 1]
            while f < end and fs[f] == s:
                ahead = f + _AHEAD
                if ahead < end and lo[ahead] < hi[ahead]:  # a later row's first edge
                    if identity:
                        prefetch(targets, lo[ahead])
                        prefetch(edge_keys, lo[ahead])
                    else:
                        prefetch(edge_keys, picks[lo[ahead]])
                r = fr[f]
                sp = src_pos[r] if src_stamp[r] == s else 0
                a = nb
                in_order = True  # (most rows: their edges come in canonical order)
                for i in range(lo[f], hi[f]):
                    if identity:
                        e, t = i, targets[i]
                    else:
                        e, t = picks[i], picked[i]
                    if dst_stamp[t] == s:
                        d, key = dst_pos[t], edge_keys[e]
                        if nb > a and (
                            b_dst[nb - 1] > d or (b_dst[nb - 1] == d and b_key[nb - 1] > key)
                        ):
                            in_order = False
                        b_src[nb] = sp
                        b_dst[nb] = d
                        b_pos[nb] = e
                        b_key[nb] = key
                        nb += 1
                if not in_order:
                    _sort_run(a, nb, b_dst, b_pos, b_key, order)
                if run_stamp[sp] == s:
                    multi = True
                run_stamp[sp] = s
                run_start[sp] = a
                run_end[sp] = nb
                f += 1
            cur[p] = f
        n_src = src_bounds[s + 1] - src_bounds[s] + 1
        if multi:
            count[: n_src + 1] = 0
            for q in range(nb):
                count[b_src[q] + 1] += 1
            for g in range(n_src):
                count[g + 1] += count[g]
            for q in range(nb):
                g = b_src[q]
                order[count[g]] = q
                count[g] += 1
            a = 0
            for g in range(n_src):  # count[g] is now the end of group g
                _sort_group(order, a, count[g], b_dst, b_key)
                a = count[g]
            for q in range(nb):
                i = order[q]
                if q == 0 or b_key[i] != b_key[order[q - 1]]:
                    out[o] = b_src[i]
                    out[total + o] = b_dst[i]
                    out_pos[o] = b_pos[i]
                    o += 1
        else:
            first = True
            last = np.uint64(0)
            for g in range(n_src):
                if run_stamp[g] != s:
                    continue
                for q in range(run_start[g], run_end[g]):
                    k = b_key[q]
                    if first or k != last:
                        out[o] = g
                        out[total + o] = b_dst[q]
                        out_pos[o] = b_pos[q]
                        o += 1
                    first = False
                    last = k
    bounds[n_samples] = o
    for p in range(n_parts):
        if cur[p] != part_bounds[p + 1]:
            raise ValueError("a part's frontier rows are not in sample order")
    if o == total:  # no edge dropped (edge aggregation): sources, then targets: (2, o)
        return out.reshape((2, o)), out_pos, bounds
    edges = np.empty((2, o), np.int64)  # exact sizes: node aggregation drops most candidates
    for q in range(o):
        edges[0, q] = out[q]
        edges[1, q] = out[total + q]
    return edges, out_pos[:o].copy(), bounds


def warm() -> None:
    """Compiles each kernel for the argument types sampler/sample/dense.py passes
    (sampler/jit_loader.py): the graph's arrays read-only, the chunk's writable."""

    def graph(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    i64 = np.array([0, 1], np.int64)
    keys = np.array([1, 2], np.uint64)
    for n_rows in (2, 1000):  # bits and stamps
        bounds, rows = unique_parts(np.array([[0, 1, 2]], np.int64), i64, n_rows)
    degrees, fp = graph(np.array([1, 1], np.int64)), graph(keys)
    fs, fr, _ = live_frontier(bounds, rows, degrees)
    streams(fs, fr, keys, fp, np.uint64(3))
    starts, targets = graph(i64), graph(i64)
    picks, pos, _ = pick_uniform(fs, fr, starts, degrees, targets, keys, fp, np.uint64(3), 1)
    picks_by_row(i64.copy(), i64.copy(), 2, targets)
    local = np.zeros(2, np.int64)
    for identity in (False, True):
        chunk_edges(
            *(fs, fr, picks[:-1], picks[1:], pos, pos, identity, np.array([0, 2], np.int64), 2),
            *(bounds, rows, local, 2, bounds, rows, local, 2, targets, graph(keys)),
        )
