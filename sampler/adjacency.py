"""CSR adjacency and node lookup tables for one shard of a graph (numpy only).

Out-edges of a node are kept in a canonical order, (target fp, content hash),
so that a sampled position means the same edge whatever the input sharding.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.arrays import sorted_unique_index
from sampler.batches import (
    EdgeBatch,
    NodeBatch,
    Seeds,
    bytes_array,
    concat_features,
    take_features,
)


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
    """Sorts edges by (source, target, content) and builds the CSR."""
    n = len(edges)
    content = ids.row_fingerprint(edges.features, n)
    order = np.lexsort((content, edges.dst, edges.src))
    src, dst, content = edges.src[order], edges.dst[order], content[order]
    # Rank among parallel edges (same source and target) so each edge has a key.
    new_pair = np.ones(n, dtype=bool)
    new_pair[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    pair_start = (
        np.maximum.accumulate(np.where(new_pair, np.arange(n), 0)) if n else np.zeros(0, int)
    )
    rank = (np.arange(n) - pair_start).astype(np.uint64)
    edge_keys = ids.combine(src, dst, rank)
    nodes, starts = sorted_unique_index(src)
    degrees = np.diff(np.append(starts, n)).astype(np.int64)
    features = take_features(edges.features, order)
    weights = None
    if weight_feature is not None:
        weights = np.asarray(features[weight_feature], dtype=np.float64).reshape(n)
    return Adjacency(nodes, starts.astype(np.int64), degrees, dst, edge_keys, features, weights)


def merge_adjacency(shards: list[Adjacency], specs) -> Adjacency:
    """One Adjacency from shards that hold disjoint source nodes (no edge is copied twice)."""
    if not shards:
        empty = EdgeBatch(np.zeros(0, np.uint64), np.zeros(0, np.uint64), {})
        shard = build_adjacency(empty)
        shard.features = concat_features([], specs)
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
    )


@dataclasses.dataclass
class NodeTable:
    """Node rows sorted by fingerprint, for feature lookup."""

    rows: NodeBatch
    duplicates: int  # rows dropped because their id was already present

    def lookup(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row index, found) per fingerprint."""
        pos = np.searchsorted(self.rows.fp, fps)
        if len(self.rows.fp) == 0:
            return np.zeros(len(fps), np.int64), np.zeros(len(fps), bool)
        pos_c = np.minimum(pos, len(self.rows.fp) - 1)
        found = (pos < len(self.rows.fp)) & (self.rows.fp[pos_c] == fps)
        return pos_c, found


class FingerprintCollision(ValueError):
    pass


def build_node_table(rows: NodeBatch) -> NodeTable:
    """Sorts by fingerprint; a duplicate id keeps its row with the smallest content hash."""
    n = len(rows)
    content = ids.row_fingerprint(rows.features, n)
    order = np.lexsort((content, rows.fp))
    fp = rows.fp[order]
    keep = np.ones(n, dtype=bool)
    keep[1:] = fp[1:] != fp[:-1]
    dropped = order[~keep]
    if len(dropped):
        kept_for = order[np.maximum.accumulate(np.where(keep, np.arange(n), 0))][~keep]
        clash = rows.ids[dropped] != rows.ids[kept_for]
        if np.any(clash):
            i = int(np.flatnonzero(clash)[0])
            raise FingerprintCollision(
                f"ids {rows.ids[dropped][i]!r} and {rows.ids[kept_for][i]!r} share a 64-bit fingerprint"
            )
    return NodeTable(rows.take(order[keep]), int(n - keep.sum()))


def make_seeds(seed_ids: np.ndarray) -> Seeds:
    """One seed per occurrence: the k-th repeat of id X gets sample id `X:k` (as TF-GNN does)."""
    fp = ids.fingerprint(seed_ids.tolist()) if len(seed_ids) else np.zeros(0, np.uint64)
    order = np.lexsort((fp,))
    fp, seed_ids = fp[order], seed_ids[order]
    n = len(fp)
    first = np.ones(n, dtype=bool)
    first[1:] = fp[1:] != fp[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, int)
    occurrence = np.arange(n) - group_start
    sample_ids = [
        sid if k == 0 else sid + b":" + str(k).encode()
        for sid, k in zip(seed_ids.tolist(), occurrence.tolist(), strict=True)
    ]
    sample_ids = bytes_array(sample_ids)
    keys = ids.fingerprint(sample_ids.tolist()) if n else np.zeros(0, np.uint64)
    return Seeds(keys, sample_ids, bytes_array(seed_ids.tolist()), fp)


def merge_node_tables(shards: list[NodeTable], specs) -> NodeTable:
    """One NodeTable from shards that hold disjoint nodes."""
    rows = NodeBatch.concat([t.rows for t in shards], specs)
    return NodeTable(rows.take(np.argsort(rows.fp)), sum(t.duplicates for t in shards))


def edge_shape_counts(src: np.ndarray, dst: np.ndarray, same_set: bool) -> tuple[int, int]:
    """(self-loops, parallel edges) among edges given by source/target ids or fingerprints.

    A self-loop joins a node to itself (only possible when both ends are one node set); an
    edge is parallel when an earlier edge has the same source and target (so k edges between
    one pair count k - 1).
    """
    n = len(src)
    if n == 0:
        return 0, 0
    loops = int(np.count_nonzero(src == dst)) if same_set else 0
    order = np.lexsort((dst, src))
    s, d = src[order], dst[order]
    repeat = (s[1:] == s[:-1]) & (d[1:] == d[:-1])
    return loops, int(np.count_nonzero(repeat))
