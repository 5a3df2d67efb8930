"""Original ids of edge ends: the kernels of the partition stage's read-and-number step.

A node shard knows the fingerprints of its nodes and the original id of its first row
(sampler/partition/graph.py). Edges arrive with the fingerprints of their ends; these
kernels turn those into original ids, drop the edges whose end is not in its node set,
and group what is left by the node shard the next join needs.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler.batches import EdgeBatch
from sampler.graph_checks import edge_shape_counts
from sampler.partition.graph import EdgeShard, GraphTypes, NodeIndex, range_shard, rank_edges


def lookup(index: NodeIndex | None, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(original id, found) of each fingerprint; nothing is found in a shard without nodes."""
    if index is None:
        return np.zeros(len(fps), np.int64), np.zeros(len(fps), bool)
    return index.lookup(fps)


@dataclasses.dataclass(frozen=True)
class TargetPiece:
    """Edges of one type whose targets are resolved, bound for one source node shard."""

    etype: int
    src_fp: np.ndarray  # uint64 source fingerprints
    dst: np.ndarray  # int64 original ids of the targets
    dst_shard: np.ndarray  # int64 node shard of each target
    features: dict[str, np.ndarray]


def resolve_targets(
    index: NodeIndex | None, etype: int, batch: EdgeBatch, dst_shard: int, num_shards: int
) -> tuple[int, list[tuple[int, TargetPiece]]]:
    """(dropped, [(source shard, piece)]): the target ids of edges whose targets lie in the
    shard `dst_shard` that `index` describes, the edges split by the shard of their source.
    """
    dst, found = lookup(index, batch.dst)
    dropped = int((~found).sum())
    if dropped:
        keep = np.flatnonzero(found)
        batch, dst = batch.take(keep), dst[keep]
    src_shards = range_shard(batch.src, num_shards)
    pieces = []
    for src_shard in np.unique(src_shards):
        rows = np.flatnonzero(src_shards == src_shard)
        feats = {k: v[rows] for k, v in batch.features.items()}
        piece = TargetPiece(etype, batch.src[rows], dst[rows], np.full(len(rows), dst_shard), feats)
        pieces.append((int(src_shard), piece))
    return dropped, pieces


@dataclasses.dataclass(frozen=True)
class SourceResult:
    """The ranked edges of one type of a source shard, and what was counted on the way."""

    edges: EdgeShard | None  # None when no edge is left
    dropped: int  # edges whose source is not in its node set
    self_loops: int
    parallel_edges: int


def resolve_sources(
    index: NodeIndex | None,
    types: GraphTypes,
    etype: int,
    shard: int,
    pieces: list[TargetPiece],
) -> SourceResult:
    """Source fingerprints -> original ids for the pieces of one edge type of one source
    shard, ranked into an EdgeShard. Self-loops and parallel edges are kept and counted
    (all out-edges of a source meet here)."""
    src_fp = np.concatenate([p.src_fp for p in pieces])
    src, found = lookup(index, src_fp)
    names = types.edge_features[types.etypes[etype][1]]
    feats = {k: np.concatenate([p.features[k] for p in pieces]) for k in names}
    dst = np.concatenate([p.dst for p in pieces])
    dst_shard = np.concatenate([p.dst_shard for p in pieces])
    dropped = int((~found).sum())
    if dropped:
        keep = np.flatnonzero(found)
        src, dst, dst_shard = src[keep], dst[keep], dst_shard[keep]
        feats = {k: v[keep] for k, v in feats.items()}
        if not len(keep):  # a shard with no nodes of this type has no edges
            return SourceResult(None, dropped, 0, 0)
    src_set, _, dst_set = types.etypes[etype]
    ranked = rank_edges(etype, shard, src, dst, dst_shard, feats)
    # Counted on the ranked edges: in (source, target) order, no sort of their own.
    loops, parallel = edge_shape_counts(ranked.src, ranked.dst, src_set == dst_set)
    return SourceResult(ranked, dropped, loops, parallel)
