"""HALO hops 2..--num_hops of the partition stage: backward walks over node shards.

See sampler/partition/halo.py for what each hop adds. Every hop is one join by node
shard of the frontier's (node, partition) pairs with the shard's in-edges and with the
pairs expanded at earlier hops.
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam.metrics import Metrics

from sampler.beam.join import Join
from sampler.partition import halo

NAMESPACE = "partition"


class HaloHops(beam.PTransform):
    """(in-edges by target shard, hop-1 HALO pairs by shard) -> (part, PartEdges) it gains.

    Both inputs are keyed by node shard (node type, shard). The output holds the outer
    edges of hops 2..num_hops only; hop 1 (in-edges of inner nodes and out-edges to
    other partitions) is written by WritePartitions itself.
    """

    def __init__(self, num_hops: int, num_parts: int):
        super().__init__()
        if num_hops < 2:
            raise ValueError(f"HaloHops needs num_hops >= 2, got {num_hops}")
        self._hops = num_hops
        self._parts = num_parts

    class _Expand(beam.DoFn):
        def __init__(self, num_parts: int, hop: int):
            self._parts = num_parts
            self._pairs = Metrics.counter(NAMESPACE, f"halo_hop{hop}_pairs")
            self._edges = Metrics.counter(NAMESPACE, f"halo_hop{hop}_edges")

        def process(self, keyed):
            _, groups = keyed
            if not groups["candidates"]:
                return
            result = halo.expand_hop(
                list(groups["candidates"]),
                list(groups.get("seen", [])),
                halo.InEdges.concat(list(groups["in_edges"])),
                self._parts,
            )
            self._pairs.inc(len(result.expanded.node))
            yield beam.pvalue.TaggedOutput("expanded", (keyed[0], result.expanded))
            for shard, pairs in result.frontier:
                yield beam.pvalue.TaggedOutput("frontier", (shard, pairs))
            for part, edges in result.edges:
                self._edges.inc(len(edges.new_id))
                yield part, edges

    def expand(self, inputs):
        in_edges, frontier = inputs
        seen, gained = [], []
        for hop in range(1, self._hops):
            groups = {"candidates": frontier, "in_edges": in_edges}
            if seen:
                groups["seen"] = seen | f"Hop{hop}/Seen" >> beam.Flatten()
            result = (
                groups
                | f"Hop{hop}/Join" >> Join()
                | f"Hop{hop}/Expand"
                >> beam.ParDo(self._Expand(self._parts, hop)).with_outputs(
                    "expanded", "frontier", main="edges"
                )
            )
            gained.append(result.edges)
            seen.append(result.expanded)
            frontier = result.frontier
        return gained | "HopEdges" >> beam.Flatten()
