"""CSR adjacency and node lookup tables for one shard of a graph.

Out-edges of a node are kept in a canonical order, (target fp, content hash),
so that a sampled position means the same edge whatever the input sharding.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.batches import (
    EdgeBatch,
    Seeds,
    bytes_array,
    concat_features,
    take_features,
)
from sampler.jit_loader import kernels


@dataclasses.dataclass
class Adjacency:
    """Out-edges grouped by source node fingerprint."""

    nodes: np.ndarray  # uint64, sorted unique source fps
    starts: np.ndarray  # int64: where each node's out-edges start in `targets`
    degrees: np.ndarray  # int64: how many out-edges each node has
    targets: np.ndarray  # uint64 target fps, canonical order within each source
    edge_keys: np.ndarray  # uint64 hash of (source, target, rank among parallel edges)
    features: dict[str, np.ndarray]  # in the same order as targets
    weights: np.ndarray | None  # float64 'weight' feature, when a strategy needs it
    # node time feature -> each edge's target's time (EdgeBatch.target_times), same order
    target_times: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    @property
    def num_edges(self) -> int:
        return len(self.targets)

    def lookup(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(start, degree) of each node's out-edges; degree 0 for unknown nodes."""
        if len(self.nodes) == 0:
            zeros = np.zeros(len(nodes), np.int64)
            return zeros, zeros.copy()
        pos = np.minimum(np.searchsorted(self.nodes, nodes), len(self.nodes) - 1)
        found = self.nodes[pos] == nodes
        return np.where(found, self.starts[pos], 0), np.where(found, self.degrees[pos], 0)


def build_adjacency(edges: EdgeBatch, weight_feature: str | None = None) -> Adjacency:
    """Sorts edges by (source, target, content) and builds the CSR (sampler/sample/adjacency_jit.py).
    Edges without features or target times sort by (source, target) alone: nothing of theirs
    follows the order, and two edges equal in both are alike."""
    n = len(edges)
    jit = kernels("sampler.sample.adjacency_jit")
    src, dst = np.ascontiguousarray(edges.src), np.ascontiguousarray(edges.dst)
    if not edges.features and not edges.target_times:
        src, targets = jit.csr_sort_pairs(src, dst)
        order = None
    else:
        content = ids.row_fingerprint(edges.features, n)
        order, src, targets = jit.csr_sort(src, dst, content)
    edge_keys, nodes, starts = jit.csr_rows(src, targets, np.empty(n, np.uint64))
    return _adjacency(edges, order, weight_feature, nodes, starts, targets, edge_keys)


def _adjacency(edges, order, weight_feature, nodes, starts, targets, edge_keys) -> Adjacency:
    n = len(edges)
    degrees = np.diff(np.append(starts, n)).astype(np.int64)
    features = {} if order is None else take_features(edges.features, order)
    weights = None
    if weight_feature is not None:
        weights = np.asarray(features[weight_feature], dtype=np.float64).reshape(n)
    times = {} if order is None else take_features(edges.target_times or {}, order)
    starts = starts.astype(np.int64)
    return Adjacency(nodes, starts, degrees, targets, edge_keys, features, weights, times)


def merge_adjacency(shards: list[Adjacency], specs) -> Adjacency:
    """One Adjacency from shards that hold disjoint source nodes (no edge is copied twice)."""
    if not shards:
        empty = EdgeBatch(np.zeros(0, np.uint64), np.zeros(0, np.uint64), {})
        shard = build_adjacency(empty)
        shard.features = concat_features([], specs)
        shard.weights = np.zeros(0, np.float64)  # no edge, no weight: fits any strategy
        return shard
    bases = np.cumsum([0] + [a.num_edges for a in shards[:-1]])
    nodes = np.concatenate([a.nodes for a in shards])
    order = np.argsort(nodes)
    starts = np.concatenate([a.starts + b for a, b in zip(shards, bases, strict=True)])
    weights = None
    if shards[0].weights is not None:
        weights = np.concatenate([a.weights for a in shards])
    return Adjacency(
        nodes[order],
        starts[order],
        np.concatenate([a.degrees for a in shards])[order],
        np.concatenate([a.targets for a in shards]),
        np.concatenate([a.edge_keys for a in shards]),
        concat_features([a.features for a in shards], specs),
        weights,
        {
            name: np.concatenate([a.target_times[name] for a in shards])
            for name in shards[0].target_times
        },
    )


def escape_seed_id(node_id: bytes) -> bytes:
    """A seed id as it appears in sample ids: `%` and `:` percent-escaped (`%25`, `%3A`;
    `urllib.parse.unquote` undoes it), so that `:<k>` can only be the repeat suffix and no two
    seeds share a sample id (`p5:1` seeded once, `p5` twice would). Ids without `%` or `:`
    appear unchanged."""
    if b"%" in node_id:
        node_id = node_id.replace(b"%", b"%25")
    if b":" in node_id:
        node_id = node_id.replace(b":", b"%3A")
    return node_id


def make_seeds(seed_ids: np.ndarray, times: np.ndarray | None = None) -> Seeds:
    """One seed per occurrence: the k-th repeat of id X gets sample id `X:k` (as TF-GNN does),
    X escaped (escape_seed_id): every sample id is unique. With `times` (a time per seed, from
    the seeds table), the repeats of X are numbered in the order of their times, so that
    each `X:k` has the same time whatever order the table's rows arrive in."""
    fp = ids.fingerprint(seed_ids.tolist()) if len(seed_ids) else np.zeros(0, np.uint64)
    if times is None:
        order = np.lexsort((fp,))
    else:
        times = np.asarray(times)
        times = times + times.dtype.type(0)  # -0.0 becomes 0.0: one order of the two
        order = np.lexsort((times, fp))
        times = times[order]
    fp, seed_ids = fp[order], seed_ids[order]
    n = len(fp)
    first = np.ones(n, dtype=bool)
    first[1:] = fp[1:] != fp[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, int)
    occurrence = np.arange(n) - group_start
    sample_ids = [
        escape_seed_id(sid) + (b":" + str(k).encode() if k else b"")
        for sid, k in zip(seed_ids.tolist(), occurrence.tolist(), strict=True)
    ]
    sample_ids = bytes_array(sample_ids)
    keys = ids.fingerprint(sample_ids.tolist()) if n else np.zeros(0, np.uint64)
    return Seeds(keys, sample_ids, bytes_array(seed_ids.tolist()), fp, times)
