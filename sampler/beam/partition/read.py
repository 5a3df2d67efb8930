"""Read and number: the Unigraph's node and edge shards with original ids.

Elements are batches keyed by node shard (node type, fingerprint range): a shard holds a
contiguous block of original ids (sampler/partition/graph.py); the kernels are in
sampler/partition/numbering.py.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.typehints import KV

from sampler.batches import EdgeBatch, NodeBatch
from sampler.beam import join
from sampler.beam.join import Join
from sampler.beam.partition import combiners
from sampler.beam.partition.config import NAMESPACE
from sampler.beam.read import ReadEdgeSet, ReadNodeSet
from sampler.io.graph_tables import latent_ends
from sampler.partition import numbering
from sampler.partition.graph import (
    EdgeShard,
    GraphTypes,
    NodeShard,
    build_node_shard,
    range_shard,
    shard_starts,
)
from sampler.schema import GraphInfo


class NumberedGraph(NamedTuple):
    """What ReadPartitionGraph returns."""

    nodes: beam.PCollection  # NodeShard, `start` set
    edges: beam.PCollection  # EdgeShard, `start` set
    starts: beam.PCollection  # singleton [T, S + 1]: first original id of every node shard
    bad_records: beam.PCollection  # dead-letter lines of every table


class _SplitNodes(beam.DoFn):
    def __init__(self, ntype: int, num_shards: int):
        self._ntype = ntype
        self._shards = num_shards

    def process(self, batch: NodeBatch):
        shards = range_shard(batch.fp, self._shards)
        for s in np.unique(shards):
            yield (self._ntype, int(s)), batch.take(np.flatnonzero(shards == s))


class _BuildShard(beam.DoFn):
    """Duplicate ids of node sets with a table are counted (latent ids repeat by design)."""

    def __init__(self, types: GraphTypes, tabled: set[str]):
        self._types = types
        self._tabled = tabled
        self._duplicates = {
            name: Metrics.counter(NAMESPACE, f"duplicate_node_ids/{name}") for name in tabled
        }

    def process(self, keyed):
        (t, s), groups = keyed
        parts = groups["batches"]
        name = self._types.ntypes[t]
        parts = sorted(parts, key=lambda b: (len(b), int(b.fp[0]) if len(b) else 0))
        types = self._types
        shard = build_node_shard(
            t, s, parts, types.table_features(name), name, types.splits.get(name)
        )
        if name in self._tabled:
            self._duplicates[name].inc(sum(len(b) for b in parts) - len(shard))
        yield shard


class _SetStart(beam.DoFn):
    """A copy of a NodeShard or EdgeShard with its first original id set."""

    def __init__(self, key: str):
        self._key = key  # "ntype" or "etype"

    def process(self, shard, starts):
        yield dataclasses.replace(shard, start=int(starts[getattr(shard, self._key), shard.shard]))


class _KeyEdgesByTarget(beam.DoFn):
    def __init__(self, etype: int, dst_type: int, num_shards: int):
        self._etype = etype
        self._dst_type = dst_type
        self._shards = num_shards

    def process(self, batch: EdgeBatch):
        shards = range_shard(batch.dst, self._shards)
        for s in np.unique(shards):
            yield (
                (self._dst_type, int(s)),
                (self._etype, batch.take(np.flatnonzero(shards == s))),
            )


class _Dropped:
    """Edges whose source or target id is not in its node set are dropped and counted."""

    def __init__(self, types: GraphTypes):
        self._types = types
        self._counters = {}

    def inc(self, etype: int, count: int) -> None:
        name = self._types.etypes[etype][1]
        if name not in self._counters:
            self._counters[name] = Metrics.counter(NAMESPACE, f"edges_with_missing_endpoint/{name}")
        self._counters[name].inc(count)


def _index(indexes):
    return next(iter(indexes), None)


def _key_index(shard: NodeShard):
    """((node type, shard), NodeIndex): what the edge joins need of a node shard (not its
    ids and features)."""
    return (shard.ntype, shard.shard), shard.index()


class _ResolveTargets(beam.DoFn):
    """Target fingerprints -> original ids; re-keyed by the source's node shard, with the
    node index of the shard (every node shard passes here once), tagged for JoinSources."""

    def __init__(self, types: GraphTypes, num_shards: int):
        self._types = types
        self._shards = num_shards

    def setup(self):
        self._dropped = _Dropped(self._types)

    def process(self, keyed):
        (t, s), groups = keyed
        index = _index(groups["nodes"])
        if index is not None:
            yield join.tagged((t, s), 0, index)
        for etype, batch in groups["edges"]:
            dropped, pieces = numbering.resolve_targets(index, etype, batch, s, self._shards)
            if dropped:
                self._dropped.inc(etype, dropped)
            src_type = self._types.ntype_id(self._types.etypes[etype][0])
            for src_shard, piece in pieces:
                yield join.tagged((src_type, src_shard), 1, piece)


class _ResolveSources(beam.DoFn):
    """Source fingerprints -> original ids; one ranked EdgeShard per edge type."""

    def __init__(self, types: GraphTypes):
        self._types = types

    def setup(self):
        self._dropped = _Dropped(self._types)
        self._shape = {}

    def _count(self, key: str, count: int) -> None:
        if key not in self._shape:
            self._shape[key] = Metrics.counter(NAMESPACE, key)
        self._shape[key].inc(count)

    def process(self, keyed):
        (_, s), groups = keyed
        index = _index(groups["nodes"])
        by_type: dict[int, list] = {}
        for piece in groups["edges"]:
            by_type.setdefault(piece.etype, []).append(piece)
        for etype, pieces in sorted(by_type.items()):
            got = numbering.resolve_sources(index, self._types, etype, s, pieces)
            if got.dropped:
                self._dropped.inc(etype, got.dropped)
            if got.edges is None:
                continue
            name = self._types.etypes[etype][1]
            self._count(f"self_loops/{name}", got.self_loops)
            self._count(f"parallel_edges/{name}", got.parallel_edges)
            yield got.edges


def _starts(collection, label: str, key: str, num_types: int, num_shards: int):
    """The singleton [T, S + 1] table of first ids of the shards of `collection`."""
    return (
        collection
        | f"{label}Counts" >> beam.Map(lambda x: {(getattr(x, key), x.shard): len(x)})
        | f"Sum{label}Counts" >> combiners.CombineAll(combiners.MergeCounts())
        | f"{label}Starts" >> beam.Map(shard_starts, num_types, num_shards)
    )


class ReadPartitionGraph(beam.PTransform):
    """Reads the Unigraph: node shards and edge shards numbered with original ids."""

    def __init__(
        self, graph: GraphInfo, types: GraphTypes, num_shards: int, max_bad_records: int = 0
    ):
        super().__init__()
        self._graph = graph
        self._types = types
        self._shards = num_shards
        self._max_bad = max_bad_records

    def _read_tables(self, pbegin):
        """({node set: [NodeBatch PCollections]}, [keyed edge batches], [dead letters])."""
        graph, types, shards = self._graph, self._types, self._shards
        node_batches = {name: [] for name in types.ntypes}
        edge_batches = []
        bad = []
        for name in types.ntypes:
            info = graph.node_sets[name]
            if info.filename:
                read = pbegin | f"ReadNodes/{name}" >> ReadNodeSet(info, self._max_bad)
                node_batches[name].append(read.nodes)
                bad.append(read.bad_records)
        for etype, (_, name, dst_name) in enumerate(types.etypes):
            info = graph.edge_sets[name]
            read = pbegin | f"ReadEdges/{name}" >> ReadEdgeSet(graph, info, self._max_bad)
            bad.append(read.bad_records)
            for node_set in sorted(set(latent_ends(graph, info).values())):
                node_batches[node_set].append(read[node_set])
            edge_batches.append(
                read.edges
                | f"KeyByTarget/{name}"
                >> beam.ParDo(_KeyEdgesByTarget(etype, types.ntype_id(dst_name), shards))
            )
        return node_batches, edge_batches, bad

    def _split_nodes(self, node_batches):
        """Every node batch PCollection keyed by node shard (no Flatten per node set: the
        local runner makes a stage of each that copies every batch)."""
        return [
            batches | f"SplitNodes/{name}/{j}" >> beam.ParDo(_SplitNodes(t, self._shards))
            for t, name in enumerate(self._types.ntypes)
            for j, batches in enumerate(node_batches[name])
        ]

    def expand(self, pbegin) -> NumberedGraph:
        graph, types, shards = self._graph, self._types, self._shards
        tabled = {n for n in types.ntypes if graph.node_sets[n].filename}
        node_batches, edge_batches, bad = self._read_tables(pbegin)
        unnumbered = (
            join.many("batches", self._split_nodes(node_batches))
            | "GroupNodes" >> Join()
            | "BuildNodeShards"
            >> beam.ParDo(_BuildShard(types, tabled)).with_output_types(NodeShard)
        )
        starts = _starts(unnumbered, "Node", "ntype", len(types.ntypes), shards)
        nodes = unnumbered | "NumberNodes" >> beam.ParDo(
            _SetStart("ntype"), beam.pvalue.AsSingleton(starts)
        ).with_output_types(NodeShard)
        indexes = nodes | "KeyIndexes" >> beam.Map(_key_index)
        unnumbered_edges = (
            {"nodes": indexes, **join.many("edges", edge_batches)}
            | "JoinTargets" >> Join()
            | "ResolveTargets"
            >> beam.ParDo(_ResolveTargets(types, shards)).with_output_types(KV[Any, Any])
            | "JoinSources" >> join.Grouped(("nodes", "edges"))
            | "ResolveSources" >> beam.ParDo(_ResolveSources(types)).with_output_types(EdgeShard)
        )
        edge_starts = _starts(unnumbered_edges, "Edge", "etype", len(types.etypes), shards)
        edges = unnumbered_edges | "NumberEdges" >> beam.ParDo(
            _SetStart("etype"), beam.pvalue.AsSingleton(edge_starts)
        ).with_output_types(EdgeShard)
        bad_records = bad | "BadRecords" >> beam.Flatten()
        return NumberedGraph(nodes, edges, starts, bad_records)
