"""The `sharded` placement's sampling of a frontier of (sample, node fingerprint) pairs: each
row's out-edges are looked up in the shard's fingerprint-keyed adjacency and chosen by the
compiled `choose` of every placement (sampler/sample/choose_jit.py).

Every random choice is a pure function of (seed, op, sample, node, draw index); streams and
draws come from `sampler.sample.randomness`. The work per frontier row is O(sample_size) for
RANDOM_UNIFORM (Floyd's algorithm), so a hub reached by many samples costs what is sampled,
not copies of its adjacency list. TOP_K and RANDOM_WEIGHTED look at every weight of the row.
"""

from __future__ import annotations

import numpy as np

from sampler.arrays import expand_ranges
from sampler.batches import SampledEdges, SampleNodes, take_features
from sampler.jit_loader import kernels
from sampler.sample import temporal_dense
from sampler.sample.adjacency import Adjacency
from sampler.sample.randomness import Randomness


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
    rows, positions = kernels("sampler.sample.choose_jit").choose(
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


def sample_frontier_temporal(
    adjacency: Adjacency,
    frontier: SampleNodes,
    seed_time: np.ndarray,
    *,
    op,
    kind: str,
    randomness: Randomness,
    edge_node_times: np.ndarray | None = None,
) -> SampledEdges:
    """`sample_frontier` of a temporal op: each frontier row picks among its out-edges
    eligible at `seed_time` (one per row), as the dense sampler does
    (sampler.sample.temporal_dense), with the same streams. An op with a node time reads its
    targets' times from `edge_node_times` (one per adjacency edge: the `estimate` probe's),
    else from `adjacency.target_times` (the `sharded` placement's adjacency shards)."""
    start, degree = adjacency.lookup(frontier.node)
    live = np.flatnonzero(degree > 0)
    sample, node = frontier.sample[live], frontier.node[live]
    rows = np.arange(len(live), dtype=np.int64)
    targets, node_times = adjacency.targets.view(np.int64), edge_node_times
    if node_times is None and op.temporal.node_time is not None:
        node_times = adjacency.target_times[op.temporal.node_time]
    if node_times is not None:  # each edge its own target row: the kernels read node_times[e]
        targets = np.arange(len(adjacency.targets), dtype=np.int64)
    graph = (start[live], degree[live], targets, node)
    frontier_rows = (rows, rows.copy())
    bounds, positions, _ = temporal_dense.picks(
        op, frontier_rows, graph, adjacency, node_times, sample, randomness, seed_time[live], kind
    )
    rows = np.repeat(rows, np.diff(bounds))
    return SampledEdges(
        sample=sample[rows],
        src=node[rows],
        dst=adjacency.targets[positions],
        edge_key=adjacency.edge_keys[positions],
        features=take_features(adjacency.features, positions),
        time=seed_time[live][rows],
    )


def sample_op(adjacency: Adjacency, frontier: SampleNodes, op, kind, randomness) -> SampledEdges:
    """One op of the `sharded` placement over a frontier (unique, as SampleNodes.unique leaves
    it; `frontier.time`: a temporal spec's seed times, `kind` their kind): a temporal op picks
    among the eligible edges, an untimed one among all and passes the seed times on."""
    if op.temporal is not None:
        return sample_frontier_temporal(
            adjacency, frontier, frontier.time, op=op, kind=kind, randomness=randomness
        )
    edges = sample_frontier(
        adjacency,
        frontier,
        sample_size=op.sample_size,
        strategy=op.strategy,
        op_key=op.key,
        randomness=randomness,
    )
    return edges if frontier.time is None else with_seed_times(edges, frontier)


def with_seed_times(edges: SampledEdges, frontier: SampleNodes) -> SampledEdges:
    """`edges` sampled from `frontier` (sorted by sample, as `unique` leaves it), each with
    the seed time of its sample: how an untimed op of a temporal spec passes it on."""
    at = np.searchsorted(frontier.sample, edges.sample)
    edges.time = frontier.time[at]
    return edges


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
