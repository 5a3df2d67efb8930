"""New ids: the DGL numbering of nodes and edges from count tables (sampler/partition/new_ids.py).

Nodes per (type, shard, part), then the parts and new ids of both ends of every edge (two
joins by node shard), then edges per (type, source shard, owner part).
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
import numpy as np

from sampler.beam import join
from sampler.beam.join import Join
from sampler.beam.partition import (
    combiners,
    sized,  # noqa: F401 (registers ArraysCoder)
)
from sampler.beam.partition.config import PartitionConfig
from sampler.partition import layout, new_ids
from sampler.partition.graph import EdgeShard, GraphTypes


class NewIdsInputs(NamedTuple):
    edges: beam.PCollection  # EdgeShard
    starts: beam.PCollection  # singleton [T, S + 1]
    parts: beam.PCollection  # ((node type, shard), parts)


class NewIds(NamedTuple):
    """What NumberNodesAndEdges returns."""

    node_layout: beam.PCollection  # ((node type, shard), new_ids.NodeLayout)
    edges: beam.PCollection  # new_ids.EdgesWithEnds
    layout: beam.PCollection  # singleton layout.Layout
    cut: beam.PCollection  # singleton [E] cut edges per edge type


class _NodeCounts(beam.DoFn):
    def __init__(self, shape):
        self._shape = shape  # (T, S, P)

    def process(self, keyed):
        (t, s), parts = keyed
        yield new_ids.node_part_counts(t, s, parts, self._shape)


class _NodeLayout(beam.DoFn):
    def process(self, keyed, node_counts):
        (t, s), parts = keyed
        yield (t, s), new_ids.node_layout(t, s, parts, node_counts)


class _SplitByTarget(beam.DoFn):
    def __init__(self, types: GraphTypes):
        self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]
        self._src_type = [types.ntype_id(e[0]) for e in types.etypes]

    def process(self, edges: EdgeShard):
        t = self._dst_type[edges.etype]
        for s in np.unique(edges.dst_shard):
            rows = np.flatnonzero(edges.dst_shard == s)
            yield join.tagged((t, int(s)), 0, (edges.etype, edges.shard, rows, edges.dst[rows]))
        yield beam.pvalue.TaggedOutput(
            "by_source", ((self._src_type[edges.etype], edges.shard), edges)
        )


class _TargetEnds(beam.DoFn):
    """Parts and new ids of the targets of edge pieces; re-keyed by the source shard. The
    layout of the target shard is a side input by shard (a second input of the group would
    be a Flatten, which the local runner makes a stage that copies every piece)."""

    def __init__(self, types: GraphTypes):
        self._src_type = [types.ntype_id(e[0]) for e in types.etypes]

    def process(self, keyed, starts, layouts):
        (t, s), groups = keyed
        (node,) = layouts[(t, s)]
        for etype, shard, rows, dst in groups["edges"]:
            ends = new_ids.target_ends(node, starts[t, s], etype, shard, rows, dst)
            yield (self._src_type[etype], shard), ends


class _Ends(beam.DoFn):
    """Both ends' parts and new ids of every edge of a source shard."""

    def __init__(self, shape):
        self._shape = shape  # (E, S, P)

    def process(self, keyed, starts):
        (t, s), groups = keyed
        (src_layout,) = groups["layout"]
        pieces = {}
        for piece in groups["targets"]:
            pieces.setdefault(piece.etype, []).append(piece)
        for edges in groups["edges"]:
            targets = pieces.get(edges.etype, [])
            ends, counts, cut = new_ids.edge_ends(
                edges, targets, src_layout, starts[t, s], self._shape
            )
            yield ends
            yield beam.pvalue.TaggedOutput("counts", (counts, cut))


class NumberNodesAndEdges(beam.PTransform):
    """NewIdsInputs -> NewIds, the DGL way (sampler/partition/layout.py)."""

    def __init__(self, config: PartitionConfig, types: GraphTypes):
        super().__init__()
        self._config = config
        self._types = types

    def expand(self, inputs: NewIdsInputs) -> NewIds:
        edges, starts, parts = inputs
        config, types = self._config, self._types
        shape_n = (len(types.ntypes), config.num_shards, config.num_parts)
        shape_e = (len(types.etypes), config.num_shards, config.num_parts)
        node_counts = (
            parts
            | "NodeCounts" >> beam.ParDo(_NodeCounts(shape_n))
            | "SumNodeCounts" >> combiners.CombineAll(combiners.SumArrays(shape_n))
        )
        node_layout = parts | "NodeLayout" >> beam.ParDo(
            _NodeLayout(), beam.pvalue.AsSingleton(node_counts)
        )
        split = edges | "SplitByTarget" >> beam.ParDo(_SplitByTarget(types)).with_outputs(
            "by_source", main="by_target"
        )
        targets = (
            split.by_target
            | "JoinTargets" >> join.Grouped(("edges",))
            | "TargetEnds"
            >> beam.ParDo(
                _TargetEnds(types),
                beam.pvalue.AsSingleton(starts),
                beam.pvalue.AsMultiMap(node_layout),
            )
        )
        ends = (
            {"layout": node_layout, "targets": targets, "edges": split.by_source}
            | "JoinSources" >> Join()
            | "Ends"
            >> beam.ParDo(_Ends(shape_e), beam.pvalue.AsSingleton(starts))
            .with_output_types(new_ids.EdgesWithEnds)
            .with_outputs("counts", main="edges")
        )
        edge_counts = (
            ends.counts
            | "EdgeCountsOnly" >> beam.Map(lambda x: x[0])
            | "SumEdgeCounts" >> combiners.CombineAll(combiners.SumArrays(shape_e))
        )
        cut = (
            ends.counts
            | "CutOnly" >> beam.Map(lambda x: x[1])
            | "SumCut" >> combiners.CombineAll(combiners.SumArrays((len(types.etypes),)))
        )
        lay = node_counts | "Layout" >> beam.Map(
            layout.Layout, beam.pvalue.AsSingleton(edge_counts)
        )
        return NewIds(node_layout, ends.edges, lay, cut)
