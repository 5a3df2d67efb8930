"""The sampling kernel: choose out-edges for a frontier of (sample, node) pairs.

Every random choice is a pure function of (seed, op, sample, node, draw
index); streams and draws come from `sampler.sample.randomness`. The work per
frontier row is O(sample_size) for RANDOM_UNIFORM (Floyd's algorithm,
vectorized over rows), so a hub reached by many samples costs what is sampled,
not copies of its adjacency list. TOP_K and RANDOM_WEIGHTED must look at every
weight of the row: O(degree).
"""

from __future__ import annotations

import numpy as np

from sampler.arrays import expand_ranges
from sampler.batches import SampledEdges, SampleNodes, take_features
from sampler.sample.adjacency import Adjacency
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K
from sampler.sample.randomness import Randomness, draw


def _floyd(stream: np.ndarray, degree: np.ndarray, k: int) -> np.ndarray:
    """Uniform k-subsets of range(degree) per row, without replacement: (rows, k)."""
    chosen = np.empty((len(degree), k), dtype=np.int64)
    for i in range(k):
        j = degree - k + i
        t = np.minimum((draw(stream, i) * (j + 1)).astype(np.int64), j)
        if i:
            taken = (chosen[:, :i] == t[:, None]).any(axis=1)
            t = np.where(taken, j, t)
        chosen[:, i] = t
    return chosen


def _top_by_score(rows: np.ndarray, positions: np.ndarray, score: np.ndarray, k: int):
    """Per row, the k positions with the highest score (ties: lower position first)."""
    order = np.lexsort((positions, -score, rows))
    rows_s = rows[order]
    first = np.ones(len(rows_s), dtype=bool)
    first[1:] = rows_s[1:] != rows_s[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(rows_s)), 0))
    keep = (np.arange(len(rows_s)) - group_start) < k
    return rows_s[keep], positions[order][keep]


def choose(
    start: np.ndarray,
    degree: np.ndarray,
    stream: np.ndarray,
    *,
    sample_size: int,
    strategy: str,
    weights: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Picks out-edges for rows with out-edges [start, start + degree): (row index, position).

    `stream` holds each row's random stream key. Rows must have degree > 0.
    """
    k = sample_size
    if strategy == RANDOM_UNIFORM:
        small = degree <= k
        rows_a, pos_a = expand_ranges(start[small], degree[small])
        rows_a = np.flatnonzero(small)[rows_a]
        big = np.flatnonzero(~small)
        if not len(big):  # sample_size at or above every degree: no draws, whatever k is
            return rows_a, pos_a
        # Rows in `big` have degree > k, so Floyd's k steps cost what is sampled.
        picks = _floyd(stream[big], degree[big], k) + start[big][:, None]
        return np.concatenate([rows_a, np.repeat(big, k)]), np.concatenate([pos_a, picks.ravel()])
    rows, positions = expand_ranges(start, degree)
    weight = weights[positions]
    if strategy == TOP_K:
        score = weight
    elif strategy == RANDOM_WEIGHTED:
        # Efraimidis-Spirakis: the k largest log(u)/w; weight <= 0 is never sampled.
        within = positions - start[rows]
        u = draw(stream[rows], within)
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(weight > 0, np.log(np.maximum(u, 2.0**-60)) / weight, -np.inf)
        ok = np.isfinite(score)
        rows, positions, score = rows[ok], positions[ok], score[ok]
    else:
        raise ValueError(f"unsupported strategy {strategy}")
    return _top_by_score(rows, positions, score, k)


def sample_frontier(
    adjacency: Adjacency,
    frontier: SampleNodes,
    *,
    sample_size: int,
    strategy: str,
    op_key: np.uint64,
    randomness: Randomness,
) -> SampledEdges:
    """Samples up to `sample_size` out-edges of each (sample, node) in the frontier.

    The frontier must be free of duplicates (see SampleNodes.unique). The order of
    the result is not canonical: assembly sorts edges.
    """
    start, degree = adjacency.lookup(frontier.node)
    live = np.flatnonzero(degree > 0)
    sample, node = frontier.sample[live], frontier.node[live]
    stream = randomness.stream(op_key, sample, node)
    rows, positions = choose(
        start[live],
        degree[live],
        stream,
        sample_size=sample_size,
        strategy=strategy,
        weights=adjacency.weights,
    )
    return SampledEdges(
        sample=sample[rows],
        src=node[rows],
        dst=adjacency.targets[positions],
        edge_key=adjacency.edge_keys[positions],
        features=take_features(adjacency.features, positions),
    )


def all_out_edges(adjacency: Adjacency, frontier: SampleNodes) -> SampledEdges:
    """Every out-edge of every (sample, node): the candidates of node aggregation."""
    start, degree = adjacency.lookup(frontier.node)
    rows, positions = expand_ranges(start, degree)
    return SampledEdges(
        sample=frontier.sample[rows],
        src=frontier.node[rows],
        dst=adjacency.targets[positions],
        edge_key=adjacency.edge_keys[positions],
        features=take_features(adjacency.features, positions),
    )
