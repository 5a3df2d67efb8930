"""New ids the DGL way, per node shard and edge shard: kernels of the partition's new-ids step.

sampler/partition/layout.py's Layout turns count tables (nodes per (type, shard, part),
edges per (type, source shard, owner part)) into new ids. These kernels compute the counts
a shard contributes and, once the tables are known, the parts and new ids of its rows and
of both ends of its edges (an edge is owned by its target's part).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler.errors import UserError
from sampler.partition.compact import reduce_narrowed
from sampler.partition.graph import EdgeShard
from sampler.partition.layout import Layout


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """Part and new homogeneous id of each row of a node shard."""

    ntype: int
    shard: int
    parts: np.ndarray
    new_id: np.ndarray
    new_tid: np.ndarray

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


@dataclasses.dataclass(frozen=True)
class EdgeEnds:
    """Targets' parts and new ids of some rows of an edge shard."""

    etype: int
    shard: int
    rows: np.ndarray
    dst_part: np.ndarray
    dst_new: np.ndarray

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


@dataclasses.dataclass(frozen=True)
class EdgesWithEnds:
    """An edge shard with the part and new id of both ends of every edge."""

    edges: EdgeShard
    src_part: np.ndarray
    dst_part: np.ndarray
    src_new: np.ndarray
    dst_new: np.ndarray

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


def node_part_counts(ntype: int, shard: int, parts: np.ndarray, shape) -> np.ndarray:
    """[T, S, P] nodes per (type, shard, part), non-zero in this shard's row only."""
    counts = np.zeros(shape, dtype=np.int64)
    counts[ntype, shard] = np.bincount(parts, minlength=shape[2])
    return counts


def check_parts_have_nodes(node_counts: np.ndarray) -> None:
    """UserError when a partition got no node at all ([T, S, P] counts): more parts than the
    graph has nodes, or a method that left parts empty. Raised before anything is written."""
    per_part = node_counts.sum(axis=(0, 1))
    empty = np.flatnonzero(per_part == 0).tolist()
    if empty:
        num_parts = len(per_part)
        shown = ", ".join(map(str, empty[:3])) + (", ..." if len(empty) > 3 else "")
        raise UserError(
            f"--num_parts {num_parts}: partitions {shown} got no node ({len(empty)} of"
            f" {num_parts}; the graph has {int(per_part.sum()):,} nodes); use fewer parts"
        )


def node_layout(ntype: int, shard: int, parts: np.ndarray, node_counts: np.ndarray) -> NodeLayout:
    """New ids of one shard's nodes from the global node count table (every part must have a
    node: check_parts_have_nodes)."""
    check_parts_have_nodes(node_counts)
    lay = Layout(node_counts, np.zeros((0,) + node_counts.shape[1:], np.int64))
    new_id, new_tid = lay.node_ids(ntype, shard, parts)
    return NodeLayout(ntype, shard, parts, new_id, new_tid)


def target_ends(node: NodeLayout, start: int, etype: int, shard: int, rows, dst) -> EdgeEnds:
    """Parts and new ids of the targets `dst` (original ids in the shard of `node`, whose
    first id is `start`) of the rows `rows` of the edge shard (etype, shard)."""
    local = dst - start
    return EdgeEnds(etype, shard, rows, node.parts[local], node.new_id[local])


def edge_ends(
    edges: EdgeShard, targets: list[EdgeEnds], src_layout: NodeLayout, start: int, shape
) -> tuple[EdgesWithEnds, np.ndarray, np.ndarray]:
    """(edges with both ends, [E, S, P] edge counts by owner part, [E] cut edges) of one
    edge shard, given its source shard's layout (first id `start`) and its targets' ends."""
    n = len(edges)
    dst_part = np.empty(n, np.int64)
    dst_new = np.empty(n, np.int64)
    for piece in targets:
        dst_part[piece.rows] = piece.dst_part
        dst_new[piece.rows] = piece.dst_new
    local = edges.src - start
    src_part = src_layout.parts[local]
    src_new = src_layout.new_id[local]
    counts = np.zeros(shape, dtype=np.int64)
    counts[edges.etype, edges.shard] = np.bincount(dst_part, minlength=shape[2])
    cut = np.zeros(shape[0], dtype=np.int64)
    cut[edges.etype] = int(np.sum(src_part != dst_part))
    return EdgesWithEnds(edges, src_part, dst_part, src_new, dst_new), counts, cut
