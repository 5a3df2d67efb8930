"""Rows routed to the partitions that hold them: kernels of the partition's write step.

An edge is inner in its target's part; an edge between parts is also an outer edge of its
source's part (hop 1 of HALO). A node is inner in its own part. Each partition gathers its
PartEdges and InnerNodes before sampler/partition/layout.py assembles its files.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sampler.partition import halo, layout
from sampler.partition.graph import NodeShard
from sampler.partition.new_ids import EdgesWithEnds, NodeLayout


def edges_to_parts(ends: EdgesWithEnds, new_id: np.ndarray) -> list[tuple[int, layout.PartEdges]]:
    """(part, PartEdges) of hop 1: inner edges by target part, then the edges into other
    parts as outer edges of their source's part (their targets are its HALO nodes)."""
    edges, src_part, dst_part = ends.edges, ends.src_part, ends.dst_part
    src_new, dst_new = ends.src_new, ends.dst_new
    orig = edges.start + np.arange(len(edges), dtype=np.int64)
    out = []
    for p in np.unique(dst_part):
        rows = np.flatnonzero(dst_part == p)
        features = {k: v[rows] for k, v in edges.features.items()}
        piece = layout.PartEdges(
            edges.etype, True, new_id[rows], src_new[rows], dst_new[rows],
            src_part[rows], dst_part[rows], orig[rows], features,
        )  # fmt: skip
        out.append((int(p), piece))
    cross = src_part != dst_part
    for p in np.unique(src_part[cross]):
        rows = np.flatnonzero(cross & (src_part == p))
        piece = layout.PartEdges(
            edges.etype, False, new_id[rows], src_new[rows], dst_new[rows],
            src_part[rows], dst_part[rows],
        )  # fmt: skip
        out.append((int(p), piece))
    return out


def halo_in_edges(
    ends: EdgesWithEnds, new_id: np.ndarray, src_type: int
) -> list[tuple[int, halo.InEdges]]:
    """(target shard, InEdges) of an edge shard: the input of HALO hops 2 and up."""
    edges = ends.edges
    out = []
    for s in np.unique(edges.dst_shard):
        rows = np.flatnonzero(edges.dst_shard == s)
        n = len(rows)
        in_edges = halo.InEdges(
            edges.dst[rows],
            np.full(n, edges.etype, np.int64),
            edges.src[rows],
            np.full(n, src_type, np.int64),
            np.full(n, edges.shard, np.int64),
            new_id[rows],
            ends.src_new[rows],
            ends.dst_new[rows],
            ends.src_part[rows],
            ends.dst_part[rows],
        )
        out.append((int(s), in_edges))
    return out


def halo_pairs(ends: EdgesWithEnds) -> halo.HaloPairs | None:
    """The hop-1 (source node, part) HALO pairs of an edge shard, None without cut edges."""
    cross = ends.src_part != ends.dst_part
    if not cross.any():
        return None
    return halo.HaloPairs(ends.edges.src[cross], ends.dst_part[cross])


def nodes_to_parts(shard: NodeShard, node: NodeLayout) -> list[tuple[int, layout.InnerNodes]]:
    """(part, InnerNodes) of one node shard."""
    orig = shard.start + np.arange(len(shard), dtype=np.int64)
    out = []
    for p in np.unique(node.parts):
        rows = np.flatnonzero(node.parts == p)
        features = {k: v[rows] for k, v in shard.rows.features.items()}
        out.append((int(p), layout.InnerNodes(node.ntype, node.new_id[rows], orig[rows], features)))
    return out


def node_id_table(shard: NodeShard, node: NodeLayout) -> pa.Table:
    """The Unigraph string id -> type-wise ids table of one node shard."""
    return pa.table(
        {
            "#id": pa.array(shard.rows.ids.tolist(), type=pa.binary()),
            "orig_id": pa.array(shard.start + np.arange(len(shard), dtype=np.int64)),
            "new_id": pa.array(node.new_tid),
            "part_id": pa.array(node.parts.astype(np.int64)),
        }
    )
