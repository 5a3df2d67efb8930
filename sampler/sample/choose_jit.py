"""`choose`: the out-edges each frontier row picks, for every placement, in one pass per row.

The draws are those of `sampler.sample.randomness` (`ids_jit.draw` is `ids.draws`, bit for
bit). RANDOM_WEIGHTED's logarithm stays numpy's `np.log` (a compiled log may round
differently in the last bit and so reorder near-ties); only the draws, the gathers and the
per-row top-k selection are compiled. tests/test_kernel_digests.py pins the records.
"""

from __future__ import annotations

import numpy as np

from sampler.ids_jit import draw
from sampler.jit import njit
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K
from sampler.sample.sample_jit import floyd


@njit
def _uniform(start, degree, stream, k):
    """Rows with degree <= k: every edge, in row order; then the other rows: Floyd's k
    picks each, in draw order (sampling._floyd)."""
    n = len(degree)
    total = 0
    for i in range(n):
        total += degree[i] if degree[i] <= k else k
    rows = np.empty(total, np.int64)
    pos = np.empty(total, np.int64)
    o = 0
    for i in range(n):
        if degree[i] <= k:
            for e in range(degree[i]):
                rows[o] = i
                pos[o] = start[i] + e
                o += 1
    for i in range(n):
        d = degree[i]
        if d <= k:
            continue
        floyd(stream[i], d, k, pos, o)
        for q in range(o, o + k):
            rows[q] = i
            pos[q] += start[i]
        o += k
    return rows, pos


@njit
def _draws_and_weights(start, degree, stream, weights):
    """Per edge of each row, in row order: its draw (index = position within the row) and
    its weight."""
    total = 0
    for i in range(len(degree)):
        total += degree[i]
    u = np.empty(total, np.float64)
    w = np.empty(total, weights.dtype)
    o = 0
    for i in range(len(degree)):
        for e in range(degree[i]):
            u[o] = draw(stream[i], e)
            w[o] = weights[start[i] + e]
            o += 1
    return u, w


@njit
def _before(ka, pa, kb, pb):
    """lexsort's order of (-score, position): NaN after every number, ties by position."""
    na = np.isnan(ka)
    nb = np.isnan(kb)
    if na != nb:
        return nb
    if not na and ka != kb:
        return ka < kb
    return pa < pb


@njit
def _top(start, degree, offset, score, k, finite_only):
    """Per row, the k edges of highest score (ties: lower position first), best first;
    row i's scores are score[offset[i] : offset[i] + degree[i]]."""
    n = len(degree)
    total = 0
    for i in range(n):
        total += min(degree[i], k)
    rows = np.empty(total, np.int64)
    pos = np.empty(total, np.int64)
    key = np.empty(max(min(k, total), 1), np.float64)  # (a huge k holds no more than total)
    o = 0
    for i in range(n):
        m = 0  # entries held, sorted best first in key/pos[o : o + m]
        for e in range(degree[i]):
            s = np.float64(score[offset[i] + e])
            if finite_only and not np.isfinite(s):
                continue
            ks = -s
            p = start[i] + e
            if m == k and not _before(ks, p, key[m - 1], pos[o + m - 1]):
                continue
            at = m if m < k else k - 1
            while at > 0 and _before(ks, p, key[at - 1], pos[o + at - 1]):
                key[at] = key[at - 1]
                pos[o + at] = pos[o + at - 1]
                at -= 1
            key[at] = ks
            pos[o + at] = p
            if m < k:
                m += 1
        for q in range(m):
            rows[o + q] = i
        o += m
    return rows[:o], pos[:o]


def choose(
    start: np.ndarray,
    degree: np.ndarray,
    stream: np.ndarray,
    *,
    sample_size: int,
    strategy: str,
    weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Picks out-edges for rows with out-edges [start, start + degree): (row index, position),
    per row in draw order (RANDOM_UNIFORM: rows at or below sample_size first, every edge,
    then Floyd's picks of the others), or best first (TOP_K, RANDOM_WEIGHTED: the highest
    weight, or log(u)/weight; ties by position). `stream` holds each row's stream key."""
    if weights is not None:  # read-only, as a mapped graph's are: one compiled signature
        weights = weights.view()
        weights.flags.writeable = False
    start = np.ascontiguousarray(start, dtype=np.int64)
    degree = np.ascontiguousarray(degree, dtype=np.int64)
    stream = np.ascontiguousarray(stream, dtype=np.uint64)
    k = int(sample_size)
    if k <= 0 and strategy in (TOP_K, RANDOM_WEIGHTED):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    if strategy == RANDOM_UNIFORM:
        return _uniform(start, degree, stream, k)
    if strategy == TOP_K:
        return _top(start, degree, start, weights, k, False)
    if strategy == RANDOM_WEIGHTED:
        # Efraimidis-Spirakis: the k largest log(u)/w; weight <= 0 is never sampled.
        u, w = _draws_and_weights(start, degree, stream, weights)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(w > 0, np.log(np.maximum(u, 2.0**-60)) / w, -np.inf)
        score.flags.writeable = False
        offset = np.cumsum(degree) - degree
        return _top(start, degree, offset, score, k, True)
    raise ValueError(f"unsupported strategy {strategy}")


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py)."""
    start, degree = np.array([0, 2], np.int64), np.array([2, 3], np.int64)
    stream, weights = np.array([1, 2], np.uint64), np.array([1.0, 2, 3, 4, 5])
    for strategy in (RANDOM_UNIFORM, TOP_K, RANDOM_WEIGHTED):
        choose(start, degree, stream, sample_size=1, strategy=strategy, weights=weights)
