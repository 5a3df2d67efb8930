"""PTransforms of the partition stage: read, number, assign parts, lay out, write DGL files.

Elements are batches keyed by node shard (node type, fingerprint range): a shard holds a
contiguous block of original ids (see sampler/partition/graph.py). Global facts travel
as small side inputs: counts per (type, shard), per (type, shard, part), per class.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from apache_beam.metrics import Metrics

from sampler import ids
from sampler.batches import EdgeBatch, NodeBatch
from sampler.beam import combiners
from sampler.beam.clustering import ClusterStart
from sampler.beam.halo import HaloHops
from sampler.beam.read import ReadEdgeSet, ReadNodeSet
from sampler.graph_checks import edge_shape_counts
from sampler.io.files import create_file
from sampler.io.graph_tables import latent_ends
from sampler.partition import assign, halo, layout
from sampler.partition.graph import (
    EdgeShard,
    GraphTypes,
    NodeShard,
    build_node_shard,
    range_shard,
    rank_edges,
    shard_starts,
)
from sampler.partition.report import REPORT_NAME, partition_report
from sampler.schema import GraphInfo

NAMESPACE = "partition"
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
    lp_cluster_rounds: int = 0  # > 0: lp starts from clusters (sampler/beam/clustering.py)


def _key_shard(element):
    return (element.ntype, element.shard), element


# --------------------------------------------------------------------------- reading


class ReadPartitionGraph(beam.PTransform):
    """Reads the Unigraph: node shards and edge shards numbered with original ids.

    Returns (node shards, edge shards, starts): NodeShard/EdgeShard elements with `start`
    set, and the singleton [T, S + 1] table of the first original id of every node shard.
    """

    def __init__(
        self, graph: GraphInfo, types: GraphTypes, num_shards: int, max_bad_records: int = 0
    ):
        super().__init__()
        self._graph = graph
        self._types = types
        self._shards = num_shards
        self._max_bad = max_bad_records
        self.bad_records = None  # set by expand: dead-letter lines of every table

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
            (t, s), parts = keyed
            name = self._types.ntypes[t]
            parts = sorted(parts, key=lambda b: (len(b), int(b.fp[0]) if len(b) else 0))
            shard = build_node_shard(t, s, parts, self._types.node_features[name], name)
            if name in self._tabled:
                self._duplicates[name].inc(sum(len(b) for b in parts) - len(shard))
            yield shard

    class _SetStart(beam.DoFn):
        def process(self, shard: NodeShard, starts):
            shard.start = int(starts[shard.ntype, shard.shard])
            yield shard

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

    class _ResolveTargets(beam.DoFn):
        """Target fingerprints -> original ids; re-keyed by the source's node shard."""

        def __init__(self, types: GraphTypes, num_shards: int):
            self._types = types
            self._shards = num_shards
            self._dropped = {}

        def process(self, keyed):
            (t, s), groups = keyed
            index = [x.index() for x in groups["nodes"]]
            for etype, batch in groups["edges"]:
                if index:
                    dst, found = index[0].lookup(batch.dst)
                else:
                    dst, found = np.zeros(len(batch), np.int64), np.zeros(len(batch), bool)
                if not found.all():
                    _count_dropped(self._dropped, self._types, etype, int((~found).sum()))
                    keep = np.flatnonzero(found)
                    batch, dst = batch.take(keep), dst[keep]
                src_type = self._types.ntype_id(self._types.etypes[etype][0])
                src_shards = range_shard(batch.src, self._shards)
                for src_shard in np.unique(src_shards):
                    rows = np.flatnonzero(src_shards == src_shard)
                    feats = {k: v[rows] for k, v in batch.features.items()}
                    yield (
                        (src_type, int(src_shard)),
                        (etype, batch.src[rows], dst[rows], np.full(len(rows), s), feats),
                    )

    class _ResolveSources(beam.DoFn):
        """Source fingerprints -> original ids; one EdgeShard per edge type, ranked.

        Self-loops and parallel edges are kept and counted (all out-edges of a source meet
        here).
        """

        def __init__(self, types: GraphTypes):
            self._types = types
            self._dropped = {}
            self._shape = {}

        def process(self, keyed):
            (_, s), groups = keyed
            index = [x.index() for x in groups["nodes"]]
            by_type: dict[int, list] = {}
            for etype, src_fp, dst, dst_shard, feats in groups["edges"]:
                by_type.setdefault(etype, []).append((src_fp, dst, dst_shard, feats))
            for etype, pieces in sorted(by_type.items()):
                src_fp = np.concatenate([p[0] for p in pieces])
                if index:
                    src, found = index[0].lookup(src_fp)
                else:
                    src, found = np.zeros(len(src_fp), np.int64), np.zeros(len(src_fp), bool)
                names = self._types.edge_features[self._types.etypes[etype][1]]
                feats = {k: np.concatenate([p[3][k] for p in pieces]) for k in names}
                dst = np.concatenate([p[1] for p in pieces])
                dst_shard = np.concatenate([p[2] for p in pieces])
                if not found.all():
                    _count_dropped(self._dropped, self._types, etype, int((~found).sum()))
                    keep = np.flatnonzero(found)
                    src, dst, dst_shard = src[keep], dst[keep], dst_shard[keep]
                    feats = {k: v[keep] for k, v in feats.items()}
                    if not len(keep):  # a shard with no nodes of this type has no edges
                        continue
                src_set, name, dst_set = self._types.etypes[etype]
                for kind, count in zip(
                    ("self_loops", "parallel_edges"),
                    edge_shape_counts(src, dst, src_set == dst_set),
                    strict=True,
                ):
                    key = f"{kind}/{name}"
                    if key not in self._shape:
                        self._shape[key] = Metrics.counter(NAMESPACE, key)
                    self._shape[key].inc(count)
                yield rank_edges(etype, s, src, dst, dst_shard, feats)

    class _SetEdgeStart(beam.DoFn):
        def process(self, shard: EdgeShard, starts):
            shard.start = int(starts[shard.etype, shard.shard])
            yield shard

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
                >> beam.ParDo(self._KeyEdgesByTarget(etype, types.ntype_id(dst_name), shards))
            )
        return node_batches, edge_batches, bad

    def expand(self, pbegin):
        graph, types, shards = self._graph, self._types, self._shards
        node_batches, edge_batches, bad = self._read_tables(pbegin)
        split = []
        for t, name in enumerate(types.ntypes):
            if not node_batches[name]:
                continue
            split.append(
                node_batches[name]
                | f"AllNodes/{name}" >> beam.Flatten()
                | f"SplitNodes/{name}" >> beam.ParDo(self._SplitNodes(t, shards))
            )
        unnumbered = (
            split
            | "FlattenNodes" >> beam.Flatten()
            | "GroupNodes" >> beam.GroupByKey()
            | "BuildNodeShards"
            >> beam.ParDo(
                self._BuildShard(types, {n for n in types.ntypes if graph.node_sets[n].filename})
            )
        )
        starts = (
            unnumbered
            | "NodeCounts" >> beam.Map(lambda x: {(x.ntype, x.shard): len(x)})
            | "SumNodeCounts" >> beam.CombineGlobally(combiners.MergeCounts())
            | "NodeStarts" >> beam.Map(shard_starts, len(types.ntypes), shards)
        )
        nodes = unnumbered | "NumberNodes" >> beam.ParDo(
            self._SetStart(), beam.pvalue.AsSingleton(starts)
        )
        keyed_nodes = nodes | "KeyNodes" >> beam.Map(_key_shard)
        targets = (
            {"nodes": keyed_nodes, "edges": edge_batches | "FlattenEdges" >> beam.Flatten()}
            | "JoinTargets" >> beam.CoGroupByKey()
            | "ResolveTargets" >> beam.ParDo(self._ResolveTargets(types, shards))
        )
        unnumbered_edges = (
            {"nodes": keyed_nodes, "edges": targets}
            | "JoinSources" >> beam.CoGroupByKey()
            | "ResolveSources" >> beam.ParDo(self._ResolveSources(types))
        )
        edge_starts = (
            unnumbered_edges
            | "EdgeCounts" >> beam.Map(lambda x: {(x.etype, x.shard): len(x)})
            | "SumEdgeCounts" >> beam.CombineGlobally(combiners.MergeCounts())
            | "EdgeStarts" >> beam.Map(shard_starts, len(types.etypes), shards)
        )
        edges = unnumbered_edges | "NumberEdges" >> beam.ParDo(
            self._SetEdgeStart(), beam.pvalue.AsSingleton(edge_starts)
        )
        self.bad_records = bad | "BadRecords" >> beam.Flatten()
        return nodes, edges, starts


def _count_dropped(counters: dict, types: GraphTypes, etype: int, count: int) -> None:
    """Edges whose source or target id is not in its node set are dropped and counted."""
    name = types.etypes[etype][1]
    if name not in counters:
        counters[name] = Metrics.counter(NAMESPACE, f"edges_with_missing_endpoint/{name}")
    counters[name].inc(count)


# --------------------------------------------------------------------------- node facts


@dataclasses.dataclass
class NodeInfo:
    """What the partition methods know of a node shard's rows: class and in-degree."""

    ntype: int
    shard: int
    start: int
    classes: np.ndarray  # int64 balance class index
    in_degree: np.ndarray  # int64


class NodeClasses(beam.PTransform):
    """Node shards + edge shards -> (NodeInfo per shard, class names).

    A class is (node type, value of the --balance_ntypes feature), or the type alone.
    """

    def __init__(self, types: GraphTypes, feature: str | None, num_shards: int):
        super().__init__()
        self._types = types
        self._feature = feature
        self._shards = num_shards

    class _Values(beam.DoFn):
        def __init__(self, types: GraphTypes, feature: str | None):
            self._types = types
            self._feature = feature

        def process(self, shard: NodeShard):
            name = self._types.ntypes[shard.ntype]
            if self._feature and self._feature in self._types.node_features[name]:
                values = np.asarray(shard.rows.features[self._feature], dtype=np.int64)
            else:
                values = np.zeros(len(shard), dtype=np.int64)
            yield (shard.ntype, shard.shard), (shard.start, values.reshape(-1))

    class _InDegree(beam.DoFn):
        def __init__(self, types: GraphTypes):
            self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]

        def process(self, edges: EdgeShard, starts):
            t = self._dst_type[edges.etype]
            for s in np.unique(edges.dst_shard):
                rows = edges.dst[edges.dst_shard == s] - starts[t, s]
                yield (t, int(s)), rows

    class _Info(beam.DoFn):
        def process(self, keyed, class_table):
            (t, s), groups = keyed
            ((start, values),) = groups["values"]
            degree = np.zeros(len(values), dtype=np.int64)
            for rows in groups["degree"]:
                degree += np.bincount(rows, minlength=len(values))
            index = {key: i for i, key in enumerate(class_table)}
            classes = np.array([index[(t, int(v))] for v in values], dtype=np.int64)
            yield NodeInfo(t, s, start, classes, degree)

    def expand(self, inputs):
        nodes, edges, starts = inputs
        values = nodes | "Values" >> beam.ParDo(self._Values(self._types, self._feature))
        table = (
            values
            | "ClassKeys"
            >> beam.Map(lambda kv: {(kv[0][0], int(v)): 1 for v in np.unique(kv[1][1])})
            | "AllClasses" >> beam.CombineGlobally(combiners.MergeCounts())
            | "ClassTable" >> beam.Map(lambda d: sorted(d))
        )
        degree = edges | "InDegree" >> beam.ParDo(
            self._InDegree(self._types), beam.pvalue.AsSingleton(starts)
        )
        info = (
            {"values": values, "degree": degree}
            | "JoinDegree" >> beam.CoGroupByKey()
            | "Info" >> beam.ParDo(self._Info(), beam.pvalue.AsSingleton(table))
        )
        return info, table


def class_names(types: GraphTypes, feature: str | None, table) -> list[str]:
    names = []
    for t, v in table:
        name = types.ntypes[t]
        has = feature and feature in types.node_features[name]
        names.append(f"{name}/{feature}={v}" if has else name)
    return names


# --------------------------------------------------------------------------- methods


class RandomParts(beam.PTransform):
    """NodeInfo -> ((type, shard), parts): every class dealt round-robin in a random order.

    With --balance_edges a class is dealt degree bucket by degree bucket, so heavy nodes
    are spread like light ones. Exact: each part gets floor or ceil(n / P) of every class.
    """

    def __init__(self, config: PartitionConfig):
        super().__init__()
        self._config = config

    def _groups(self, info: NodeInfo) -> np.ndarray:
        if self._config.balance_edges:
            return info.classes * (assign.MAX_DEGREE_BUCKET + 1) + assign.degree_bucket(
                info.in_degree
            )
        return info.classes * (assign.MAX_DEGREE_BUCKET + 1)

    class _Count(beam.DoFn):
        def __init__(self, groups):
            self._groups = groups

        def process(self, info: NodeInfo):
            g, n = np.unique(self._groups(info), return_counts=True)
            yield {(int(k), info.ntype, info.shard): int(c) for k, c in zip(g, n, strict=True)}

    class _Deal(beam.DoFn):
        def __init__(self, groups, config: PartitionConfig):
            self._groups = groups
            self._config = config

        def process(self, info: NodeInfo, counts):
            config = self._config
            groups = self._groups(info)
            buckets = assign.MAX_DEGREE_BUCKET + 1
            before = {}  # (group, type, shard) -> nodes of the group in earlier shards
            size = {}  # group -> nodes
            for (g, t, s), n in counts.items():
                size[g] = size.get(g, 0) + n
                if t == info.ntype and s < info.shard:
                    before[g] = before.get(g, 0) + n
            offset = {}  # group -> position of its first node within its class
            for g in sorted(size):
                first = (g // buckets) * buckets
                offset[g] = sum(size[h] for h in size if first <= h < g)
            rank = layout.rank_within(np.unique(groups, return_inverse=True)[1], len(groups) + 1)
            g_list = groups.tolist()
            rank = rank + np.array([before.get(g, 0) for g in g_list], dtype=np.int64)
            rotation = (
                ids.combine(np.uint64(config.seed), info.classes.astype(np.uint64))
                % np.uint64(config.num_parts)
            ).astype(np.int64)
            parts = assign.random_parts(
                config.seed,
                groups.astype(np.uint64),
                rank,
                np.array([size[g] for g in g_list], dtype=np.int64),
                np.array([offset[g] for g in g_list], dtype=np.int64),
                rotation,
                config.num_parts,
            )
            yield (info.ntype, info.shard), parts

    def expand(self, info):
        counts = (
            info
            | "GroupCounts" >> beam.ParDo(self._Count(self._groups))
            | "SumGroupCounts" >> beam.CombineGlobally(combiners.MergeCounts())
        )
        return info | "Deal" >> beam.ParDo(
            self._Deal(self._groups, self._config), beam.pvalue.AsSingleton(counts)
        )


def _type_offsets(starts: np.ndarray) -> np.ndarray:
    totals = starts[:, -1]
    return np.cumsum(totals) - totals


class MetisParts(beam.PTransform):
    """(NodeInfo, EdgeShards) -> ((type, shard), parts) by pymetis on one worker."""

    def __init__(self, config: PartitionConfig, types: GraphTypes):
        super().__init__()
        self._config = config
        self._types = types

    class _Gids(beam.DoFn):
        def __init__(self, types: GraphTypes):
            self._ends = [(types.ntype_id(e[0]), types.ntype_id(e[2])) for e in types.etypes]

        def process(self, edges: EdgeShard, starts):
            offsets = _type_offsets(starts)
            src_t, dst_t = self._ends[edges.etype]
            yield (
                0,
                (edges.etype, edges.shard, edges.src + offsets[src_t], edges.dst + offsets[dst_t]),
            )

    class _Partition(beam.DoFn):
        def __init__(self, config: PartitionConfig):
            self._config = config

        def process(self, keyed, starts, class_table):
            _, groups = keyed
            offsets = _type_offsets(starts)
            num_nodes = int(starts[:, -1].sum())
            infos = sorted(groups["nodes"], key=lambda x: (x.ntype, x.shard))
            edges = sorted(groups["edges"], key=lambda x: (x[0], x[1]))
            classes = np.zeros(num_nodes, dtype=np.int64)
            for info in infos:
                first = offsets[info.ntype] + info.start
                classes[first : first + len(info.classes)] = info.classes
            src = np.concatenate([e[2] for e in edges]) if edges else np.zeros(0, np.int64)
            dst = np.concatenate([e[3] for e in edges]) if edges else np.zeros(0, np.int64)
            parts = assign.metis_parts(
                num_nodes,
                src,
                dst,
                classes,
                len(class_table),
                self._config.num_parts,
                self._config.seed,
                self._config.balance_edges,
                self._config.metis_max_adjacency,
            )
            for info in infos:
                first = offsets[info.ntype] + info.start
                yield (info.ntype, info.shard), parts[first : first + len(info.classes)]

    def expand(self, inputs):
        info, edges, starts, class_table = inputs
        gids = edges | "Gids" >> beam.ParDo(
            self._Gids(self._types), beam.pvalue.AsSingleton(starts)
        )
        return (
            {"nodes": info | "OneKey" >> beam.Map(lambda x: (0, x)), "edges": gids}
            | "Gather" >> beam.CoGroupByKey()
            | "Metis"
            >> beam.ParDo(
                self._Partition(self._config),
                beam.pvalue.AsSingleton(starts),
                beam.pvalue.AsSingleton(class_table),
            )
        )


class LabelPropagation(beam.PTransform):
    """Balanced label propagation, --lp_rounds rounds of Beam stages, from `initial` parts.

    Per round: every shard sends its nodes' parts to its neighbours' shards (messages
    summed per (node, part)); each shard proposes moves to the part most of a node's
    neighbours are in; the proposals are summed into a small histogram per
    (class, from, to, gain), from which one global step decides how many moves each pair of
    parts may accept without breaking the balance bounds; the shards apply them.
    With --lp_cluster_rounds > 0 (and 2 or more parts), the start is not `initial` but
    ClusterStart's: clusters of the graph packed into parts, then rebalanced.
    """

    def __init__(self, config: PartitionConfig, types: GraphTypes):
        super().__init__()
        self._config = config
        self._types = types

    class _Adjacency(beam.DoFn):
        """Both directions of every edge, keyed by the shard of the node that lists them."""

        def __init__(self, types: GraphTypes, num_shards: int):
            self._ends = [(types.ntype_id(e[0]), types.ntype_id(e[2])) for e in types.etypes]
            self._shards = num_shards

        def process(self, edges: EdgeShard, starts):
            src_t, dst_t = self._ends[edges.etype]
            src_key = np.full(len(edges), src_t * self._shards + edges.shard, dtype=np.int64)
            src_row = edges.src - starts[src_t, edges.shard]
            dst_key = dst_t * self._shards + edges.dst_shard
            dst_row = edges.dst - starts[dst_t, edges.dst_shard]
            keep = ~((src_key == dst_key) & (src_row == dst_row))
            if not keep.any():
                return
            yield (
                int(src_key[0]),
                (
                    src_row[keep],
                    dst_key[keep],
                    dst_row[keep],
                ),
            )
            for key in np.unique(dst_key[keep]):
                rows = keep & (dst_key == key)
                yield int(key), (dst_row[rows], src_key[rows], src_row[rows])

    class _Init(beam.DoFn):
        def __init__(self, num_shards: int):
            self._shards = num_shards

        def process(self, keyed, starts):
            key, groups = keyed
            if not groups["info"]:
                return
            ((info,),) = (groups["info"],)
            ((parts,),) = (groups["parts"],)
            pieces = sorted(groups["adjacency"], key=lambda p: (len(p[0]), p[0].tobytes()[:64]))
            local = np.concatenate([p[0] for p in pieces]) if pieces else np.zeros(0, np.int64)
            nbr_key = np.concatenate([p[1] for p in pieces]) if pieces else np.zeros(0, np.int64)
            nbr_row = np.concatenate([p[2] for p in pieces]) if pieces else np.zeros(0, np.int64)
            offsets, nbr_key, nbr_row = assign.build_lp_adjacency(
                len(parts), local, nbr_key, nbr_row
            )
            gid_start = int(_type_offsets(starts)[info.ntype] + info.start)
            yield (
                key,
                assign.LPShard(
                    key, gid_start, parts, info.classes, info.in_degree, offsets, nbr_key, nbr_row
                ),
            )

    class _Send(beam.DoFn):
        def __init__(self, num_parts: int):
            self._parts = num_parts

        def process(self, keyed):
            key, state = keyed
            yield beam.pvalue.TaggedOutput("state", (key, state))
            for target, rows, part_count in assign.lp_messages(state, self._parts):
                yield target, (rows, part_count)

    class _Propose(beam.DoFn):
        def __init__(self, config: PartitionConfig, round_: int):
            self._config = config
            self._round = round_

        def process(self, keyed, class_table):
            key, groups = keyed
            messages = sorted(groups["messages"], key=lambda m: m[0].tobytes())
            for state in groups["state"]:
                summary = assign.lp_propose(
                    state,
                    messages,
                    self._config.num_parts,
                    len(class_table),
                    self._config.seed,
                    self._round,
                )
                yield key, state
                yield beam.pvalue.TaggedOutput("summary", summary)

    class _Apply(beam.DoFn):
        def __init__(self, config: PartitionConfig, round_: int):
            self._config = config
            self._round = round_
            self._moves = Metrics.counter(NAMESPACE, "lp_moves")

        def process(self, keyed, quotas):
            key, state = keyed
            new = assign.lp_apply(state, quotas, self._config.seed, self._round)
            self._moves.inc(int(np.sum(new.parts != state.parts)))
            yield key, new

    def _quotas(self, summary):
        if summary is None:  # no nodes at all
            return assign.LPQuotas(np.zeros((0, 0, 0), np.int64), np.zeros((0, 0, 0)))
        hist, degree, sizes, loads = summary
        hist, degree = hist.dense(), degree.dense()
        return assign.lp_quotas(
            hist, degree, sizes, loads, sizes.sum(axis=1), loads.sum(axis=1),
            self._config.balance_edges,
        )  # fmt: skip

    def expand(self, inputs):
        info, edges, starts, initial, class_table = inputs
        config, shards = self._config, self._config.num_shards
        adjacency = edges | "Adjacency" >> beam.ParDo(
            self._Adjacency(self._types, shards), beam.pvalue.AsSingleton(starts)
        )

        def shard_key(kv):
            (t, s), value = kv
            return t * shards + s, value

        state = (
            {
                "info": info | "KeyInfo" >> beam.Map(lambda x: (x.ntype * shards + x.shard, x)),
                "parts": initial | "KeyParts" >> beam.Map(shard_key),
                "adjacency": adjacency,
            }
            | "JoinState" >> beam.CoGroupByKey()
            | "Init" >> beam.ParDo(self._Init(shards), beam.pvalue.AsSingleton(starts))
        )
        if config.lp_cluster_rounds > 0 and config.num_parts > 1:
            state = (state, class_table) | "ClusterStart" >> ClusterStart(config)
        for r in range(config.lp_rounds):
            sent = state | f"Round{r}/Send" >> beam.ParDo(
                self._Send(config.num_parts)
            ).with_outputs("state", main="messages")
            proposed = (
                {"state": sent.state, "messages": sent.messages}
                | f"Round{r}/Gather" >> beam.CoGroupByKey()
                | f"Round{r}/Propose"
                >> beam.ParDo(
                    self._Propose(config, r), beam.pvalue.AsSingleton(class_table)
                ).with_outputs("summary", main="state")
            )
            quotas = (
                proposed.summary
                | f"Round{r}/Summary" >> beam.CombineGlobally(combiners.Fold(combiners.add_tuples))
                | f"Round{r}/Quotas" >> beam.Map(self._quotas)
            )
            state = proposed.state | f"Round{r}/Apply" >> beam.ParDo(
                self._Apply(config, r), beam.pvalue.AsSingleton(quotas)
            )
        return state | "Parts" >> beam.Map(
            lambda kv: ((kv[0] // shards, kv[0] % shards), kv[1].parts)
        )


# --------------------------------------------------------------------------- layout and files


@dataclasses.dataclass
class NodeLayout:
    """Part and new homogeneous id of each row of a node shard."""

    ntype: int
    shard: int
    parts: np.ndarray
    new_id: np.ndarray
    new_tid: np.ndarray


@dataclasses.dataclass
class EdgeEnds:
    """Targets' parts and new ids of some rows of an edge shard."""

    etype: int
    shard: int
    rows: np.ndarray
    dst_part: np.ndarray
    dst_new: np.ndarray


class NumberNodesAndEdges(beam.PTransform):
    """(edges, starts, parts) -> (node layouts, edges with both ends, Layout, cut per type).

    New ids the DGL way (sampler/partition/layout.py) from count tables: nodes per
    (type, shard, part), then the parts and new ids of both ends of every edge (two joins
    by node shard), then edges per (type, source shard, owner part).
    """

    def __init__(self, config: PartitionConfig, types: GraphTypes):
        super().__init__()
        self._config = config
        self._types = types

    class _NodeCounts(beam.DoFn):
        def __init__(self, types: GraphTypes, config: PartitionConfig):
            self._shape = (len(types.ntypes), config.num_shards, config.num_parts)

        def process(self, keyed):
            (t, s), parts = keyed
            counts = np.zeros(self._shape, dtype=np.int64)
            counts[t, s] = np.bincount(parts, minlength=self._shape[2])
            yield counts

    class _NodeLayout(beam.DoFn):
        def process(self, keyed, node_counts):
            (t, s), parts = keyed
            lay = layout.Layout(node_counts, np.zeros((0,) + node_counts.shape[1:], np.int64))
            new_id, new_tid = lay.node_ids(t, s, parts)
            yield (t, s), NodeLayout(t, s, parts, new_id, new_tid)

    class _SplitByTarget(beam.DoFn):
        def __init__(self, types: GraphTypes):
            self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]
            self._src_type = [types.ntype_id(e[0]) for e in types.etypes]

        def process(self, edges: EdgeShard):
            t = self._dst_type[edges.etype]
            for s in np.unique(edges.dst_shard):
                rows = np.flatnonzero(edges.dst_shard == s)
                yield (t, int(s)), (edges.etype, edges.shard, rows, edges.dst[rows])
            yield beam.pvalue.TaggedOutput(
                "by_source", ((self._src_type[edges.etype], edges.shard), edges)
            )

    class _TargetEnds(beam.DoFn):
        """Parts and new ids of the targets of edge pieces; re-keyed by the source shard."""

        def __init__(self, types: GraphTypes):
            self._src_type = [types.ntype_id(e[0]) for e in types.etypes]

        def process(self, keyed, starts):
            (t, s), groups = keyed
            (node,) = groups["layout"]
            for etype, shard, rows, dst in groups["edges"]:
                local = dst - starts[t, s]
                yield (
                    (self._src_type[etype], shard),
                    EdgeEnds(etype, shard, rows, node.parts[local], node.new_id[local]),
                )

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
                n = len(edges)
                dst_part = np.empty(n, np.int64)
                dst_new = np.empty(n, np.int64)
                for piece in pieces.get(edges.etype, []):
                    dst_part[piece.rows] = piece.dst_part
                    dst_new[piece.rows] = piece.dst_new
                local = edges.src - starts[t, s]
                src_part = src_layout.parts[local]
                src_new = src_layout.new_id[local]
                counts = np.zeros(self._shape, dtype=np.int64)
                counts[edges.etype, edges.shard] = np.bincount(dst_part, minlength=self._shape[2])
                cut = np.zeros(self._shape[0], dtype=np.int64)
                cut[edges.etype] = int(np.sum(src_part != dst_part))
                yield (edges, src_part, dst_part, src_new, dst_new)
                yield beam.pvalue.TaggedOutput("counts", (counts, cut))

    def expand(self, inputs):
        edges, starts, parts = inputs
        config, types = self._config, self._types
        shape_n = (len(types.ntypes), config.num_shards, config.num_parts)
        shape_e = (len(types.etypes), config.num_shards, config.num_parts)
        node_counts = (
            parts
            | "NodeCounts" >> beam.ParDo(self._NodeCounts(types, config))
            | "SumNodeCounts" >> beam.CombineGlobally(combiners.SumArrays(shape_n))
        )
        node_layout = parts | "NodeLayout" >> beam.ParDo(
            self._NodeLayout(), beam.pvalue.AsSingleton(node_counts)
        )
        split = edges | "SplitByTarget" >> beam.ParDo(self._SplitByTarget(types)).with_outputs(
            "by_source", main="by_target"
        )
        targets = (
            {"layout": node_layout, "edges": split.by_target}
            | "JoinTargets" >> beam.CoGroupByKey()
            | "TargetEnds" >> beam.ParDo(self._TargetEnds(types), beam.pvalue.AsSingleton(starts))
        )
        ends = (
            {"layout": node_layout, "targets": targets, "edges": split.by_source}
            | "JoinSources" >> beam.CoGroupByKey()
            | "Ends"
            >> beam.ParDo(self._Ends(shape_e), beam.pvalue.AsSingleton(starts)).with_outputs(
                "counts", main="edges"
            )
        )
        edge_counts = (
            ends.counts
            | "EdgeCountsOnly" >> beam.Map(lambda x: x[0])
            | "SumEdgeCounts" >> beam.CombineGlobally(combiners.SumArrays(shape_e))
        )
        cut = (
            ends.counts
            | "CutOnly" >> beam.Map(lambda x: x[1])
            | "SumCut" >> beam.CombineGlobally(combiners.SumArrays((len(types.etypes),)))
        )
        lay = node_counts | "Layout" >> beam.Map(
            layout.Layout, beam.pvalue.AsSingleton(edge_counts)
        )
        return node_layout, ends.edges, lay, cut


class WritePartitions(beam.PTransform):
    """Parts -> DGL partition folder: new ids, the files of every part, JSON, report."""

    def __init__(self, config: PartitionConfig, types: GraphTypes, output_dir: str):
        super().__init__()
        self._config = config
        self._types = types
        self._out = output_dir.rstrip("/")

    class _EdgesToParts(beam.DoFn):
        """Edges -> (part, PartEdges) of hop 1; with --num_hops > 1 also the inputs of
        HaloHops: in-edges by target shard and hop-1 HALO pairs by source shard."""

        def __init__(self, types: GraphTypes, num_hops: int):
            self._src_type = [types.ntype_id(e[0]) for e in types.etypes]
            self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]
            self._hops = num_hops

        def process(self, element, lay):
            edges, src_part, dst_part, src_new, dst_new = element
            new_id, _ = lay.edge_ids(edges.etype, edges.shard, dst_part)
            if self._hops > 1:
                yield from self._halo_inputs(edges, src_part, dst_part, src_new, dst_new, new_id)
            orig = edges.start + np.arange(len(edges), dtype=np.int64)
            for p in np.unique(dst_part):
                rows = np.flatnonzero(dst_part == p)
                yield (
                    int(p),
                    layout.PartEdges(
                        edges.etype,
                        True,
                        new_id[rows],
                        src_new[rows],
                        dst_new[rows],
                        src_part[rows],
                        dst_part[rows],
                        orig[rows],
                        {k: v[rows] for k, v in edges.features.items()},
                    ),
                )
            # Out-edges of inner nodes into other parts: the partition of their source
            # keeps them as outer edges, with their targets as HALO nodes (hop 1).
            cross = src_part != dst_part
            for p in np.unique(src_part[cross]):
                rows = np.flatnonzero(cross & (src_part == p))
                yield (
                    int(p),
                    layout.PartEdges(
                        edges.etype,
                        False,
                        new_id[rows],
                        src_new[rows],
                        dst_new[rows],
                        src_part[rows],
                        dst_part[rows],
                    ),
                )

        def _halo_inputs(self, edges, src_part, dst_part, src_new, dst_new, new_id):
            src_t, dst_t = self._src_type[edges.etype], self._dst_type[edges.etype]
            for s in np.unique(edges.dst_shard):
                rows = np.flatnonzero(edges.dst_shard == s)
                n = len(rows)
                in_edges = halo.InEdges(
                    edges.dst[rows],
                    np.full(n, edges.etype, np.int64),
                    edges.src[rows],
                    np.full(n, src_t, np.int64),
                    np.full(n, edges.shard, np.int64),
                    new_id[rows],
                    src_new[rows],
                    dst_new[rows],
                    src_part[rows],
                    dst_part[rows],
                )
                yield beam.pvalue.TaggedOutput("in_edges", ((dst_t, int(s)), in_edges))
            cross = src_part != dst_part
            if cross.any():
                pairs = halo.HaloPairs(edges.src[cross], dst_part[cross])
                yield beam.pvalue.TaggedOutput("halo", ((src_t, edges.shard), pairs))

    class _NodesToParts(beam.DoFn):
        def __init__(self, types: GraphTypes, out: str, num_shards: int):
            self._types = types
            self._out = out
            self._shards = num_shards

        def process(self, keyed):
            (t, s), groups = keyed
            (shard,) = groups["nodes"]
            (node,) = groups["layout"]
            orig = shard.start + np.arange(len(shard), dtype=np.int64)
            for p in np.unique(node.parts):
                rows = np.flatnonzero(node.parts == p)
                yield (
                    int(p),
                    layout.InnerNodes(
                        t,
                        node.new_id[rows],
                        orig[rows],
                        {k: v[rows] for k, v in shard.rows.features.items()},
                    ),
                )
            # The Unigraph string id -> type-wise ids table of this shard.
            name = self._types.ntypes[t]
            table = pa.table(
                {
                    "#id": pa.array(shard.rows.ids.tolist(), type=pa.binary()),
                    "orig_id": pa.array(orig),
                    "new_id": pa.array(node.new_tid),
                    "part_id": pa.array(node.parts.astype(np.int64)),
                }
            )
            path = f"{self._out}/node_ids/{name}/{name}-{s:05d}-of-{self._shards:05d}.parquet"
            with create_file(path) as f:
                pq.write_table(table, f)

    class _Write(beam.DoFn):
        def __init__(self, types: GraphTypes, out: str):
            self._types = types
            self._out = out

        def process(self, keyed, lay):
            p, groups = keyed
            data = layout.assemble_partition(
                p, self._types, lay, list(groups["nodes"]), list(groups["edges"])
            )
            layout.write_partition(self._out, p, data)
            yield p

    class _Finish(beam.DoFn):
        def __init__(self, config: PartitionConfig, types: GraphTypes, out: str, settings: dict):
            self._config = config
            self._types = types
            self._out = out
            self._settings = settings

        def process(self, _, lay, cut, class_counts, class_table, written):
            config, types = self._config, self._types
            if sorted(written) != list(range(config.num_parts)):
                missing = sorted(set(range(config.num_parts)) - set(written))
                raise AssertionError(f"partitions {missing} were not written")
            layout.write_json(
                f"{self._out}/{config.graph_name}.json",
                layout.dgl_config(
                    config.graph_name, types, lay, config.part_method, config.num_hops
                ),
            )
            counts = np.zeros((len(class_table), config.num_parts), dtype=np.int64)
            for (c, p), n in class_counts.items():
                counts[c, p] += n
            names = class_names(types, config.balance_ntypes, class_table)
            report = partition_report(types, lay, cut, names, counts, self._settings)
            layout.write_json(f"{self._out}/{REPORT_NAME}", report)
            yield report

    def _settings(self) -> dict:
        """The run's settings, as the report records them."""
        config = self._config
        return {
            "graph_name": config.graph_name,
            "part_method": config.part_method,
            "num_parts": config.num_parts,
            "seed": config.seed,
            "balance_ntypes": config.balance_ntypes,
            "balance_edges": config.balance_edges,
            "num_hops": config.num_hops,
            "lp_rounds": config.lp_rounds if config.part_method == "lp" else 0,
            "lp_cluster_rounds": config.lp_cluster_rounds if config.part_method == "lp" else 0,
            "skipped_features": list(self._types.skipped_features),
        }

    @staticmethod
    def _class_counts(keyed):
        _, groups = keyed
        (info,) = groups["info"]
        (parts,) = groups["parts"]
        code, n = np.unique(info.classes * 1_000_003 + parts, return_counts=True)
        return {
            (int(k // 1_000_003), int(k % 1_000_003)): int(c) for k, c in zip(code, n, strict=True)
        }

    def expand(self, inputs):
        nodes, edges, starts, parts, info, class_table = inputs
        config, types = self._config, self._types
        node_layout, ends, lay, cut = (edges, starts, parts) | "NewIds" >> NumberNodesAndEdges(
            config, types
        )
        routed = ends | "EdgesToParts" >> beam.ParDo(
            self._EdgesToParts(types, config.num_hops), beam.pvalue.AsSingleton(lay)
        ).with_outputs("in_edges", "halo", main="edges")
        part_edges = routed.edges
        if config.num_hops > 1:
            hops = (routed.in_edges, routed.halo) | "HaloHops" >> HaloHops(
                config.num_hops, config.num_parts
            )
            part_edges = (part_edges, hops) | "AllPartEdges" >> beam.Flatten()
        part_nodes = (
            {"nodes": nodes | "KeyNodes" >> beam.Map(_key_shard), "layout": node_layout}
            | "JoinNodes" >> beam.CoGroupByKey()
            | "NodesToParts" >> beam.ParDo(self._NodesToParts(types, self._out, config.num_shards))
        )
        written = (
            {"nodes": part_nodes, "edges": part_edges}
            | "GroupByPart" >> beam.CoGroupByKey()
            | "WriteParts"
            >> beam.ParDo(self._Write(types, self._out), beam.pvalue.AsSingleton(lay))
        )
        class_counts = (
            {"info": info | "KeyInfo" >> beam.Map(_key_shard), "parts": parts}
            | "JoinClasses" >> beam.CoGroupByKey()
            | "ClassParts" >> beam.Map(self._class_counts)
            | "SumClassParts" >> beam.CombineGlobally(combiners.MergeCounts())
        )
        return (
            written.pipeline
            | "Once" >> beam.Create([None])
            | "Finish"
            >> beam.ParDo(
                self._Finish(config, types, self._out, self._settings()),
                beam.pvalue.AsSingleton(lay),
                beam.pvalue.AsSingleton(cut),
                beam.pvalue.AsSingleton(class_counts),
                beam.pvalue.AsSingleton(class_table),
                beam.pvalue.AsList(written),
            )
        )


class PartitionGraph(beam.PTransform):
    """The whole stage: read, classes, parts by --part_method, write the DGL folder."""

    def __init__(
        self, graph: GraphInfo, config: PartitionConfig, output_dir: str, max_bad_records: int = 0
    ):
        super().__init__()
        self._graph = graph
        self._config = config
        self._types = GraphTypes.from_graph(graph)
        self._out = output_dir
        self._max_bad = max_bad_records
        self.bad_records = None  # set by expand: dead-letter lines of every table

    def expand(self, pbegin):
        config, types = self._config, self._types
        read = ReadPartitionGraph(self._graph, types, config.num_shards, self._max_bad)
        nodes, edges, starts = pbegin | "Read" >> read
        self.bad_records = read.bad_records
        info, class_table = (nodes, edges, starts) | "Classes" >> NodeClasses(
            types, config.balance_ntypes, config.num_shards
        )
        if config.part_method == "metis":
            parts = (info, edges, starts, class_table) | "Metis" >> MetisParts(config, types)
        else:
            parts = info | "Random" >> RandomParts(config)
            if config.part_method == "lp":
                parts = (
                    info,
                    edges,
                    starts,
                    parts,
                    class_table,
                ) | "LabelPropagation" >> LabelPropagation(config, types)
        return (nodes, edges, starts, parts, info, class_table) | "Write" >> WritePartitions(
            config, types, self._out
        )
