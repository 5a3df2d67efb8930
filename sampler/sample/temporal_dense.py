"""Temporal ops on the dense graph (sampler/sample/dense.py calls `sample_op` for an op with a
temporal rule; the untimed ops never come here): the frontier as an untimed op's, then the
picks among each row's edges eligible at its seed's time (sampler/sample/temporal_jit.py).

RANDOM_UNIFORM and `most_recent` pick in one compiled pass per frontier row; TOP_K and
RANDOM_WEIGHTED list the eligible edges and rank them as `choose_jit` ranks a row's edges
(RANDOM_WEIGHTED's draw of an edge is its row stream's draw at the edge's index in the row,
and its logarithm numpy's, as in `choose`).
"""

from __future__ import annotations

import numpy as np

from sampler.arrays import read_only
from sampler.jit_loader import kernels
from sampler.sample import temporal
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K


def _graph(a: np.ndarray) -> np.ndarray:
    return read_only(np.ascontiguousarray(a))


def seed_times(dg, plan, seed_rows: np.ndarray, seeds=None) -> np.ndarray | None:
    """Each seed's time: from the seeds table (`seeds.time`) when it has them, else the seed
    node's time feature; None for an untimed spec."""
    if plan.seed_time is None:
        return None
    if seeds is not None and seeds.time is not None:
        return np.asarray(seeds.time)
    column = dg.nodes[plan.seed_set].rows.features[plan.seed_time.feature]
    return np.asarray(column)[seed_rows]


def sample_op(dg, op, frontier, sample_keys, randomness, seed_time, kind):
    """(pick bounds per frontier row, positions, target rows) of a temporal op over the
    frontier (fs, fr) of the untimed op; `seed_time`: one per sample of the chunk."""
    adj = dg.adjacency[op.edge_set]
    node_times = None
    if op.temporal.node_time is not None:
        node_times = dg.nodes[op.target].rows.features[op.temporal.node_time]
    graph = (adj.starts, adj.degrees, adj.targets, dg.nodes[op.source].rows.fp)
    return picks(op, frontier, graph, adj, node_times, sample_keys, randomness, seed_time, kind)


def picks(op, frontier, graph, adj, node_times, sample_keys, randomness, seed_time, kind):
    """`sample_op` on any adjacency: frontier row f is (sample fs[f], row fr[f]); `graph`:
    (starts, degrees, int64 targets, source fingerprints) indexed by row; `adj` holds the
    edges' features and weights; `seed_time` and `sample_keys` are indexed by sample."""
    fs, fr = frontier
    jit = kernels("sampler.sample.temporal_jit")
    rule = op.temporal
    lo, hi = temporal.bounds(seed_time, rule, kind)
    times = _graph(adj.features[rule.edge_time])
    has_node_time = node_times is not None
    node_times = _graph(node_times) if has_node_time else times
    starts, degrees, targets, fp = (_graph(a) for a in graph)
    prefix = randomness.stream_prefix(op.key)
    keys = np.ascontiguousarray(sample_keys, dtype=np.uint64)
    ends = (fs, fr, starts, degrees, targets, times, lo, hi, node_times, has_node_time)
    if rule.most_recent or op.strategy == RANDOM_UNIFORM:
        return jit.pick(*ends, keys, fp, prefix, int(op.sample_size), bool(rule.most_recent))
    bounds, elig = jit.eligible(*ends)
    start = bounds[:-1].copy()
    degree = np.diff(bounds)
    if op.strategy == TOP_K:
        score = np.asarray(adj.weights)[elig]
        finite = False
    elif op.strategy == RANDOM_WEIGHTED:
        stream = kernels("sampler.sample.sample_jit").streams(fs, fr, keys, fp, prefix)
        u = jit.draws_within(bounds, elig, fr, starts, stream)
        w = np.asarray(adj.weights)[elig]
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(w > 0, np.log(np.maximum(u, 2.0**-60)) / w, -np.inf)
        finite = True
    else:
        raise ValueError(f"unsupported strategy {op.strategy}")
    score = read_only(np.ascontiguousarray(score))
    rows, at = kernels("sampler.sample.choose_jit")._top(
        start, degree, start, score, int(op.sample_size), finite
    )
    pos = elig[at]
    return kernels("sampler.sample.sample_jit").picks_by_row(rows, pos, len(fs), targets)
