"""Compiled kernels of temporal sampling (sampler/sample/temporal_dense.py): per frontier row,
the out-edges eligible at its seed's time, and the picks among them.

A frontier row f (sample fs[f], node row fr[f]) has the out-edges starts[r] .. starts[r] +
degrees[r]; edge e is eligible when lo[s] <= times[e] <= hi[s] (a NaN time never is) and, with
node times, node_times[targets[e]] <= hi[s]. Uniform picks are Floyd's over the row's
eligible edges in canonical order, with the draws of sampler/sample/randomness.py (as
sample_jit.pick_uniform over all edges); the most recent are the k latest (ties: the lower
position first). tests/kernel_oracles.py holds the numpy oracle (`temporal_picks`).
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import draw, mix
from sampler.jit import njit
from sampler.sample.sample_jit import floyd


@njit
def _ok(e, s, times, lo, hi, targets, node_times, has_node_time):
    t = times[e]
    if not (t >= lo[s] and t <= hi[s]):
        return False
    if has_node_time:
        n = node_times[targets[e]]
        if not (n <= hi[s]):
            return False
    return True


@njit
def eligible(fs, fr, starts, degrees, targets, times, lo, hi, node_times, has_node_time):
    """(bounds per frontier row, positions): each row's eligible out-edges, ascending."""
    n = len(fr)
    total = 0
    for f in range(n):
        s = fs[f]
        st = starts[fr[f]]
        for e in range(st, st + degrees[fr[f]]):
            if _ok(e, s, times, lo, hi, targets, node_times, has_node_time):
                total += 1
    pos = np.empty(total, np.int64)
    bounds = np.empty(n + 1, np.int64)
    o = 0
    for f in range(n):
        bounds[f] = o
        s = fs[f]
        st = starts[fr[f]]
        for e in range(st, st + degrees[fr[f]]):
            if _ok(e, s, times, lo, hi, targets, node_times, has_node_time):
                pos[o] = e
                o += 1
    bounds[n] = o
    return bounds, pos


@njit
def draws_within(bounds, pos, fr, starts, stream):
    """The draw of each eligible edge: its row's stream at the edge's index within the row
    (the same draw whatever else is eligible)."""
    u = np.empty(len(pos), np.float64)
    for f in range(len(bounds) - 1):
        st = starts[fr[f]]
        for q in range(bounds[f], bounds[f + 1]):
            u[q] = draw(stream[f], pos[q] - st)
    return u


@njit
def _later(ta, pa, tb, pb):
    """(time desc, position asc): a before b."""
    if ta != tb:
        return ta > tb
    return pa < pb


@njit
def pick(
    fs,
    fr,
    starts,
    degrees,
    targets,
    times,
    lo,
    hi,
    node_times,
    has_node_time,
    sample_keys,
    fp,
    prefix,
    k,
    most_recent,
):
    """Uniform (Floyd's k of the eligible edges, all of them when at most k, in canonical
    order) or most recent (the k latest eligible, latest first) per frontier row. Returns
    (pick bounds per frontier row, positions, target rows)."""
    n = len(fr)
    most = 1
    for f in range(n):
        most = max(most, degrees[fr[f]])
    elig = np.empty(most, np.int64)
    cap = 1024
    pos = np.empty(cap, np.int64)
    pick_bounds = np.empty(n + 1, np.int64)
    o = 0
    last = -1
    hs = np.uint64(0)
    for f in range(n):
        pick_bounds[f] = o
        s = fs[f]
        r = fr[f]
        st = starts[r]
        c = 0
        for e in range(st, st + degrees[r]):
            if _ok(e, s, times, lo, hi, targets, node_times, has_node_time):
                elig[c] = e
                c += 1
        m = c if c <= k else k
        if o + m > cap:
            while o + m > cap:
                cap *= 2
            grown = np.empty(cap, np.int64)
            grown[:o] = pos[:o]
            pos = grown
        if most_recent:
            held = 0  # pos[o : o + held]: the latest so far, latest first
            for q in range(c):
                e = elig[q]
                t = times[e]
                if held == m and not _later(t, e, times[pos[o + held - 1]], pos[o + held - 1]):
                    continue
                at = held if held < m else m - 1
                while at > 0 and _later(t, e, times[pos[o + at - 1]], pos[o + at - 1]):
                    pos[o + at] = pos[o + at - 1]
                    at -= 1
                pos[o + at] = e
                if held < m:
                    held += 1
        elif c <= k:
            for q in range(c):
                pos[o + q] = elig[q]
        else:
            if s != last:
                hs = mix(prefix ^ sample_keys[s])
                last = s
            floyd(mix(hs ^ fp[r]), c, k, pos, o)
            for q in range(o, o + k):
                pos[q] = elig[pos[q]]
        o += m
    pick_bounds[n] = o
    tr = np.empty(o, np.int64)
    for q in range(o):
        tr[q] = targets[pos[q]]
    return pick_bounds, pos[:o].copy(), tr


def warm() -> None:
    """Compiles each kernel for the argument types temporal_dense.py passes: the graph's
    arrays read-only, int64 times with int64 bounds and float32 times with float64 bounds."""

    def graph(a):
        a = a.copy()
        a.flags.writeable = False
        return a

    i64 = np.array([0, 1], np.int64)
    fs, fr = i64.copy(), i64.copy()
    starts, degrees, targets = graph(i64), graph(np.array([1, 1], np.int64)), graph(i64)
    keys, fp = np.array([1, 2], np.uint64), graph(np.array([1, 2], np.uint64))
    for times, bound in ((i64, np.int64), (np.array([0.5, 1.5], np.float32), np.float64)):
        t = graph(times)
        lo, hi = np.zeros(2, bound), np.full(2, 3, bound)
        for has in (False, True):
            bounds, pos = eligible(fs, fr, starts, degrees, targets, t, lo, hi, t, has)
            for recent in (False, True):
                pick(
                    *(fs, fr, starts, degrees, targets, t, lo, hi, t, has),
                    *(keys, fp, np.uint64(3), 1, recent),
                )
    draws_within(bounds, pos, fr, starts, keys)
