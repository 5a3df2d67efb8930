"""HALO hops past the first, as DGL 2.1.0's GetSubgraphWithHalo expands them (numpy only).

With --num_hops k, partition p holds its inner nodes, every in-edge of them, and HALO
nodes found by walking in-edges backwards k times: H1 are the sources of in-edges of
inner nodes that p does not own; H(j+1) are the sources of in-edges of Hj nodes that are
neither inner nor in H1..Hj. For j < k the in-edges of Hj nodes whose source is not
inner are kept too (as outer edges); those whose source is inner are already there as
out-edges of inner nodes. Nodes of Hk are not expanded.

The walk runs on node shards: a shard holds the in-edges of its nodes (`InEdges`) and
receives the (node, partition) pairs of the frontier that fall in it; `expand_hop`
returns the edges each partition gains and the next frontier, addressed to the shards
of the sources. A pair is expanded once: pairs seen at earlier hops are dropped.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler.partition.compact import reduce_narrowed
from sampler.partition.layout import PartEdges


@dataclasses.dataclass
class InEdges:
    """In-edges of nodes of one node shard: one row per edge, targets in that shard."""

    dst: np.ndarray  # int64 original type-wise id of the target
    etype: np.ndarray  # int64
    src: np.ndarray  # int64 original type-wise id of the source
    src_type: np.ndarray  # int64 node type id of the source
    src_shard: np.ndarray  # int64 node shard of the source
    new_id: np.ndarray  # int64 new homogeneous edge id
    src_new: np.ndarray  # int64 new homogeneous id of the source
    dst_new: np.ndarray
    src_part: np.ndarray  # int64
    dst_part: np.ndarray

    @classmethod
    def concat(cls, pieces: list[InEdges]) -> InEdges:
        names = [f.name for f in dataclasses.fields(cls)]
        if not pieces:
            return cls(*(np.zeros(0, np.int64) for _ in names))
        return cls(*(np.concatenate([getattr(p, n) for p in pieces]) for n in names))

    def take(self, rows: np.ndarray) -> InEdges:
        return InEdges(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


@dataclasses.dataclass
class HaloPairs:
    """(node, partition) pairs of one node shard: nodes that are HALO of that partition."""

    node: np.ndarray  # int64 original type-wise id
    part: np.ndarray  # int64

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


def pair_codes(pieces: list[HaloPairs], num_parts: int) -> np.ndarray:
    """Sorted unique node * num_parts + part codes of some pairs."""
    if not pieces:
        return np.zeros(0, np.int64)
    node = np.concatenate([p.node for p in pieces]).astype(np.int64)
    part = np.concatenate([p.part for p in pieces]).astype(np.int64)
    return np.unique(node * num_parts + part)


@dataclasses.dataclass
class HopResult:
    expanded: HaloPairs  # the pairs expanded at this hop (new ones only)
    edges: list[tuple[int, PartEdges]]  # (partition, outer edges it gains)
    frontier: list[tuple[tuple[int, int], HaloPairs]]  # ((type, shard), next candidates)


def expand_hop(
    candidates: list[HaloPairs],
    seen: list[HaloPairs],
    in_edges: InEdges,
    num_parts: int,
) -> HopResult:
    """One backward hop from the candidate pairs of a node shard that were not seen yet.

    For every new pair (u, p): the in-edges of u whose source p does not own go to p as
    outer edges, and (source, p) becomes a candidate of the next hop, addressed to the
    source's shard. Edges are grouped per (partition, edge type) in new-id order.
    """
    code = pair_codes(candidates, num_parts)
    code = code[~np.isin(code, pair_codes(seen, num_parts))]
    node, part = code // num_parts, code % num_parts
    expanded = HaloPairs(node, part)
    order = np.argsort(in_edges.dst, kind="stable")
    by_dst = in_edges.dst[order]
    lo = np.searchsorted(by_dst, node, side="left")
    count = np.searchsorted(by_dst, node, side="right") - lo
    pair = np.repeat(np.arange(len(node)), count)
    within = np.arange(len(pair)) - np.repeat(np.cumsum(count) - count, count)
    rows = order[np.repeat(lo, count) + within]
    to_part = part[pair]
    keep = in_edges.src_part[rows] != to_part
    found = in_edges.take(rows[keep])
    to_part = to_part[keep]

    edges = []
    key = to_part * (int(found.etype.max(initial=0)) + 1) + found.etype
    for k in np.unique(key):
        sel = np.flatnonzero(key == k)
        sel = sel[np.argsort(found.new_id[sel], kind="stable")]
        p = int(to_part[sel[0]])
        edges.append(
            (
                p,
                PartEdges(
                    int(found.etype[sel[0]]),
                    False,
                    found.new_id[sel],
                    found.src_new[sel],
                    found.dst_new[sel],
                    found.src_part[sel],
                    found.dst_part[sel],
                ),
            )
        )
    frontier = []
    shard_code = found.src_type * (int(found.src_shard.max(initial=0)) + 1) + found.src_shard
    for c in np.unique(shard_code):
        sel = shard_code == c
        first = int(np.argmax(sel))
        shard = (int(found.src_type[first]), int(found.src_shard[first]))
        frontier.append((shard, HaloPairs(found.src[sel], to_part[sel])))
    return HopResult(expanded, edges, frontier)
