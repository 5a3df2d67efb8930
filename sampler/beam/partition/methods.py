"""The three partition methods: ((node type, shard), parts) from NodeInfo and edges.

random (sampler/partition/random_deal.py), metis (one worker, sampler/partition/assign.py)
and balanced label propagation (sampler/partition/label_propagation.py, started from
clustering.py's clusters or from random's parts).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.typehints import KV

from sampler.beam.join import Join
from sampler.beam.partition import combiners
from sampler.beam.partition.classes import NodeInfo
from sampler.beam.partition.clustering import ClusterStart
from sampler.beam.partition.config import NAMESPACE, PartitionConfig, type_offsets
from sampler.beam.partition.messages import Gather, split
from sampler.partition import assign, label_propagation, random_deal
from sampler.partition.compact import CompactTuple
from sampler.partition.graph import EdgeShard, GraphTypes


class MethodInputs(NamedTuple):
    """What every method reads."""

    info: beam.PCollection  # NodeInfo per node shard
    edges: beam.PCollection  # EdgeShard
    starts: beam.PCollection  # singleton [T, S + 1] first original id of every node shard
    class_table: beam.PCollection  # singleton sorted list of (node type, value)


class LPInputs(NamedTuple):
    """What label propagation reads: MethodInputs and the parts it may start from."""

    info: beam.PCollection
    edges: beam.PCollection
    starts: beam.PCollection
    class_table: beam.PCollection
    initial: beam.PCollection  # ((node type, shard), parts), random's


class _GroupCounts(beam.DoFn):
    def __init__(self, balance_edges: bool):
        self._balance_edges = balance_edges

    def process(self, info: NodeInfo):
        groups = random_deal.deal_groups(info.classes, info.in_degree, self._balance_edges)
        yield random_deal.group_counts(groups, info.ntype, info.shard)


class _Deal(beam.DoFn):
    def __init__(self, config: PartitionConfig):
        self._config = config

    def process(self, info: NodeInfo, counts):
        config = self._config
        groups = random_deal.deal_groups(info.classes, info.in_degree, config.balance_edges)
        parts = random_deal.deal_parts(
            groups, info.classes, info.ntype, info.shard, counts, config.seed, config.num_parts
        )
        yield (info.ntype, info.shard), parts


class RandomParts(beam.PTransform):
    """NodeInfo -> ((type, shard), parts): every class dealt round-robin in a random order.

    With --balance_edges a class is dealt degree bucket by degree bucket, so heavy nodes
    are spread like light ones. Exact: each part gets floor or ceil(n / P) of every class.
    """

    def __init__(self, config: PartitionConfig):
        super().__init__()
        self._config = config

    def expand(self, info):
        counts = (
            info
            | "GroupCounts"
            >> beam.ParDo(_GroupCounts(self._config.balance_edges)).with_output_types(Any)
            | "SumGroupCounts" >> combiners.CombineAll(combiners.MergeCounts())
        )
        return info | "Deal" >> beam.ParDo(_Deal(self._config), beam.pvalue.AsSingleton(counts))


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
            offsets = type_offsets(starts)
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
            offsets = type_offsets(starts)
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

    def expand(self, inputs: MethodInputs):
        info, edges, starts, class_table = inputs
        gids = edges | "Gids" >> beam.ParDo(
            self._Gids(self._types), beam.pvalue.AsSingleton(starts)
        )
        return (
            {"nodes": info | "OneKey" >> beam.Map(lambda x: (0, x)), "edges": gids}
            | "Gather" >> Join()
            | "Metis"
            >> beam.ParDo(
                self._Partition(self._config),
                beam.pvalue.AsSingleton(starts),
                beam.pvalue.AsSingleton(class_table),
            )
        )


def _lp_messages(num_parts: int, state):
    return label_propagation.lp_messages(state, num_parts)


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
            yield int(src_key[0]), CompactTuple((src_row[keep], dst_key[keep], dst_row[keep]))
            for key in np.unique(dst_key[keep]):
                rows = keep & (dst_key == key)
                yield int(key), CompactTuple((dst_row[rows], src_key[rows], src_row[rows]))

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
            offsets, nbr_key, nbr_row = label_propagation.build_lp_adjacency(
                len(parts), local, nbr_key, nbr_row
            )
            gid_start = int(type_offsets(starts)[info.ntype] + info.start)
            yield (
                key,
                label_propagation.LPShard(
                    key, gid_start, parts, info.classes, info.in_degree, offsets, nbr_key, nbr_row
                ),
            )

    class _Propose(beam.DoFn):
        def __init__(self, config: PartitionConfig, round_: int):
            self._config = config
            self._round = round_

        def process(self, keyed, class_table):
            key, groups = split(keyed)
            messages = sorted(groups["messages"], key=lambda m: m[0].tobytes())
            for state in groups["state"]:
                summary = label_propagation.lp_propose(
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
            new = label_propagation.lp_apply(state, quotas, self._config.seed, self._round)
            self._moves.inc(int(np.sum(new.parts != state.parts)))
            yield key, new

    def _quotas(self, summary):
        if summary is None:  # no nodes at all
            return label_propagation.LPQuotas(np.zeros((0, 0, 0), np.int64), np.zeros((0, 0, 0)))
        hist, degree, sizes, loads = summary
        hist, degree = hist.dense(), degree.dense()
        return label_propagation.lp_quotas(
            hist, degree, sizes, loads, sizes.sum(axis=1), loads.sum(axis=1),
            self._config.balance_edges,
        )  # fmt: skip

    def expand(self, inputs: LPInputs):
        info, edges, starts, class_table, initial = inputs
        config, shards = self._config, self._config.num_shards
        adjacency = edges | "Adjacency" >> beam.ParDo(
            self._Adjacency(self._types, shards), beam.pvalue.AsSingleton(starts)
        ).with_output_types(KV[Any, Any])

        def shard_key(kv):
            (t, s), value = kv
            return t * shards + s, value

        state = (
            {
                "info": info
                | "KeyInfo"
                >> beam.Map(lambda x: (x.ntype * shards + x.shard, x)).with_output_types(
                    KV[Any, Any]
                ),
                "parts": initial
                | "KeyParts" >> beam.Map(shard_key).with_output_types(KV[Any, Any]),
                "adjacency": adjacency,
            }
            | "JoinState" >> Join()
            | "Init"
            >> beam.ParDo(self._Init(shards), beam.pvalue.AsSingleton(starts)).with_output_types(
                KV[Any, Any]
            )
        )
        if config.lp_cluster_rounds > 0 and config.num_parts > 1:
            state = (state, class_table) | "ClusterStart" >> ClusterStart(config)
        for r in range(config.lp_rounds):
            proposed = (
                state
                | f"Round{r}/Gather" >> Gather(functools.partial(_lp_messages, config.num_parts))
                | f"Round{r}/Propose"
                >> beam.ParDo(self._Propose(config, r), beam.pvalue.AsSingleton(class_table))
                .with_output_types(KV[Any, Any])
                .with_outputs("summary", main="state")
            )
            quotas = (
                proposed.summary
                | f"Round{r}/Summary" >> combiners.CombineAll(combiners.Fold(combiners.add_tuples))
                | f"Round{r}/Quotas" >> beam.Map(self._quotas).with_output_types(Any)
            )
            state = proposed.state | f"Round{r}/Apply" >> beam.ParDo(
                self._Apply(config, r), beam.pvalue.AsSingleton(quotas)
            ).with_output_types(KV[Any, Any])
        return state | "Parts" >> beam.Map(
            lambda kv: ((kv[0] // shards, kv[0] % shards), kv[1].parts)
        ).with_output_types(KV[Any, Any])
