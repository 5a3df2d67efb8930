"""The HALO hop kernel (sampler/partition/halo.py) on a hand-made graph.

The whole stage with --num_hops 2 and 3 is compared with DGL's own
partition_graph_with_halo in tests/test_partition_dgl.py; this pins the kernel's rules.
"""

from __future__ import annotations

import numpy as np

from sampler.partition.halo import HaloPairs, InEdges, expand_hop


def path_graph() -> InEdges:
    """Nodes 0..5 of one type in one shard: edges i -> i+1 (edge id i) and 5 -> 4 (id 5).

    Node 5 is in partition 1, every other node in partition 0. New ids equal old ids.
    """
    src = np.array([0, 1, 2, 3, 4, 5])
    dst = np.array([1, 2, 3, 4, 5, 4])
    part = (np.arange(6) == 5).astype(np.int64)
    zeros = np.zeros(6, np.int64)
    return InEdges(
        dst=dst, etype=zeros, src=src, src_type=zeros, src_shard=zeros, new_id=np.arange(6),
        src_new=src, dst_new=dst, src_part=part[src], dst_part=part[dst],
    )  # fmt: skip


def test_a_hop_adds_in_edges_from_outside_and_walks_to_their_sources():
    # Partition 1 owns node 5; its hop-1 HALO is node 4 (source of 4 -> 5).
    result = expand_hop([HaloPairs(np.array([4]), np.array([1]))], [], path_graph(), 2)
    assert result.expanded.node.tolist() == [4] and result.expanded.part.tolist() == [1]
    # In-edges of 4: 3 -> 4 (kept) and 5 -> 4 (source inner to partition 1: dropped, it
    # is already there as an out-edge of an inner node).
    assert len(result.edges) == 1
    part, edges = result.edges[0]
    assert part == 1 and not edges.inner
    assert edges.new_id.tolist() == [3] and edges.src.tolist() == [3] and edges.dst.tolist() == [4]
    assert [(shard, p.node.tolist(), p.part.tolist()) for shard, p in result.frontier] == [
        ((0, 0), [3], [1])
    ]


def test_pairs_seen_at_earlier_hops_and_duplicates_are_expanded_once():
    candidates = [HaloPairs(np.array([3, 4, 3]), np.array([1, 1, 1]))]
    seen = [HaloPairs(np.array([4]), np.array([1]))]
    result = expand_hop(candidates, seen, path_graph(), 2)
    assert result.expanded.node.tolist() == [3]
    ((part, edges),) = result.edges
    assert part == 1 and edges.new_id.tolist() == [2]


def test_the_same_node_expands_separately_for_each_partition():
    graph = path_graph()
    graph.src_part = np.zeros(6, np.int64)  # pretend every source is in partition 0
    result = expand_hop([HaloPairs(np.array([2, 2]), np.array([1, 2]))], [], graph, 3)
    assert sorted(p for p, _ in result.edges) == [1, 2]
    assert all(e.new_id.tolist() == [1] for _, e in result.edges)
    # Partition 0 owns every source: nothing to add for it.
    none = expand_hop([HaloPairs(np.array([2]), np.array([0]))], [], graph, 3)
    assert none.edges == [] and none.frontier == []
