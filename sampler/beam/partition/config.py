"""What every job of the partition stage shares: its settings and Beam helpers."""

from __future__ import annotations

import dataclasses

from sampler.partition import output_format
from sampler.partition.graph import GraphTypes
from sampler.partition.output_format import Split

NAMESPACE = "partition"  # Beam metrics namespace of the stage
METHODS = ("random", "metis", "lp")


@dataclasses.dataclass(frozen=True)
class PartitionConfig:
    """Everything the stage needs, validated once on the driver."""

    graph_name: str
    num_parts: int
    part_method: str
    seed: int
    num_shards: int
    balance_ntypes: str | None
    balance_edges: bool
    num_hops: int
    lp_rounds: int
    metis_max_adjacency: int
    lp_cluster_rounds: int = 0  # > 0: lp starts from clusters (clustering.py)
    layout: str = "dgl"  # output_format.LAYOUTS
    split: tuple[tuple[str, Split], ...] = ()  # (node type, Split) of --split
    labels: tuple[str, ...] = output_format.DEFAULT_LABELS  # kept as they are by graphstorm

    def graph_types(self, graph) -> GraphTypes:
        """The graph's types as the files hold them: with the --split masks and the layout."""
        return GraphTypes.from_graph(
            graph, splits=dict(self.split), layout=self.layout, labels=self.labels
        )


def key_shard(element):
    """((node type, shard), element) of a NodeShard or NodeInfo."""
    return (element.ntype, element.shard), element


def type_offsets(starts):
    """First homogeneous original id of every node type, from the [T, S + 1] starts table."""
    totals = starts[:, -1]
    return totals.cumsum() - totals
