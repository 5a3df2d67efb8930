"""Classes: the balance class and in-degree of every node (sampler/partition/classes.py)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import apache_beam as beam
import numpy as np

from sampler.beam.join import Join
from sampler.beam.partition import combiners
from sampler.partition import classes
from sampler.partition.graph import EdgeShard, GraphTypes, NodeShard


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What the partition methods know of a node shard's rows: class and in-degree."""

    ntype: int
    shard: int
    start: int
    classes: np.ndarray  # int64 balance class index
    in_degree: np.ndarray  # int64


class NodeClasses(NamedTuple):
    """What ClassifyNodes returns."""

    info: beam.PCollection  # NodeInfo per node shard
    class_table: beam.PCollection  # singleton sorted list of (node type, value)


class _Values(beam.DoFn):
    def __init__(self, types: GraphTypes, feature: str | None):
        self._types = types
        self._feature = feature

    def process(self, shard: NodeShard):
        features = self._types.node_features[self._types.ntypes[shard.ntype]]
        feature = self._feature if self._feature in features else None
        values = classes.class_values(shard.rows.features, feature, len(shard))
        yield (shard.ntype, shard.shard), (shard.start, values)


class _InDegree(beam.DoFn):
    """Local target rows of an edge shard's edges, keyed by the target's node shard."""

    def __init__(self, types: GraphTypes):
        self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]

    def process(self, edges: EdgeShard, starts):
        t = self._dst_type[edges.etype]
        for s in np.unique(edges.dst_shard):
            yield (t, int(s)), edges.dst[edges.dst_shard == s] - starts[t, s]


class _Info(beam.DoFn):
    def process(self, keyed, class_table):
        (t, s), groups = keyed
        ((start, values),) = groups["values"]
        degree = classes.in_degree(list(groups["degree"]), len(values))
        yield NodeInfo(t, s, start, classes.class_indices(t, values, class_table), degree)


def _class_keys(keyed) -> dict:
    (t, _), (_, values) = keyed
    return dict.fromkeys(classes.class_keys(t, values), 1)


class ClassifyNodes(beam.PTransform):
    """(node shards, edge shards, starts) -> NodeClasses.

    A class is (node type, value of the --balance_ntypes feature), or the type alone.
    """

    def __init__(self, types: GraphTypes, feature: str | None):
        super().__init__()
        self._types = types
        self._feature = feature

    def expand(self, inputs) -> NodeClasses:
        nodes, edges, starts = inputs
        values = nodes | "Values" >> beam.ParDo(_Values(self._types, self._feature))
        table = (
            values
            | "ClassKeys" >> beam.Map(_class_keys)
            | "AllClasses" >> combiners.CombineAll(combiners.MergeCounts())
            | "ClassTable" >> beam.Map(sorted)
        )
        degree = edges | "InDegree" >> beam.ParDo(
            _InDegree(self._types), beam.pvalue.AsSingleton(starts)
        )
        info = (
            {"values": values, "degree": degree}
            | "JoinDegree" >> Join()
            | "Info" >> beam.ParDo(_Info(), beam.pvalue.AsSingleton(table))
        )
        return NodeClasses(info, table)
