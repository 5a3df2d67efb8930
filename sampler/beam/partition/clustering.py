"""Beam stages of the clustered start of label propagation (sampler/partition/clustering.py).

`ClusterStart` takes the label propagation states (label_propagation.LPShard keyed by shard key,
type * num_shards + shard) and returns them with the parts label propagation starts from:
--lp_cluster_rounds rounds of size-capped clustering, one packing of the clusters into
parts and the rounds of rebalance. Global facts are small side inputs: the
big clusters (at most a few per part), counts per (group, part), histograms per
(group, from, to, gain level).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.typehints import KV

from sampler.beam.join import Join
from sampler.beam.partition.combiners import CombineAll, Fold, MergeCounts, add
from sampler.beam.partition.messages import Gather, split
from sampler.partition import clustering, label_propagation
from sampler.partition.compact import pack_arrays, unpack_arrays

NAMESPACE = "partition"


def _merge_draws(a: dict, b: dict) -> dict:
    out = dict(a)
    for k, v in b.items():
        out[k] = np.concatenate([out[k], v]) if k in out else v
    return out


def _concat_tables(a: tuple, b: tuple) -> tuple:
    return np.concatenate([a[0], b[0]]), np.concatenate([a[1], b[1]])


class ClusterStart(beam.PTransform):
    """(keyed LPShard states, class table) -> the states with the parts of the clustered
    start: cluster, pack, rebalance."""

    def __init__(self, config):
        super().__init__()
        self._config = config

    def expand(self, inputs):
        state, class_table = inputs
        num_nodes = (
            state
            | "Rows" >> beam.Map(lambda kv: len(kv[1].parts)).with_output_types(Any)
            | "Nodes" >> CombineAll(sum)
        )
        clusters = state | "Start" >> beam.MapTuple(
            lambda key, s: (key, clustering.start_clusters(s))
        ).with_output_types(KV[Any, Any])
        for r in range(self._config.lp_cluster_rounds):
            clusters = (clusters, num_nodes) | f"Cluster{r}" >> _ClusterRound(self._config, r)
        state = (clusters, num_nodes, class_table) | "Pack" >> _Pack(self._config)
        config = self._config
        rounds = clustering.rebalance_rounds(config.num_parts)
        for k in range(rounds):
            state = state | f"Rebalance{k}" >> _RebalanceRound(config, k, config.balance_edges)
        for k in range(clustering.CLASS_ROUNDS if config.balance_edges else 0):
            rebalance = _RebalanceRound(config, rounds + k, by_degree=False)
            state = state | f"RebalanceClasses{k}" >> rebalance
        return state


def _cap(config, num_nodes: int) -> float:
    return num_nodes / (clustering.CLUSTER_CAP_DIVISOR * config.num_parts)


def _sorted(table):
    """A (labels, values) table sorted by label; None (no rows) stays None."""
    if table is None:
        return None
    order = np.argsort(table[0], kind="stable")
    return table[0][order], table[1][order]


def _as_arrays(table):
    """(labels, values) of a table that may be None."""
    return (np.zeros(0, np.int64), np.zeros(0)) if table is None else table


def _unpacked(pieces) -> list:
    return [unpack_arrays(p) for p in pieces]


def _keyed_pieces(pieces):
    return [(bucket, pack_arrays((labels, sums))) for bucket, labels, sums in pieces]


class _BucketSums(beam.PTransform):
    """Keyed ClusterShards -> (bucket, (labels, sums)): columns(shard, side) (float64[rows,
    D]) summed per label, by hash bucket of the label (no worker sees all labels)."""

    def __init__(self, num_buckets: int, columns):
        super().__init__()
        self._buckets = num_buckets
        self._columns = columns

    def _pieces(self, keyed, side):
        shard = keyed[1]
        columns = self._columns(shard, side)
        return _keyed_pieces(clustering.label_pieces(shard.labels, columns, self._buckets))

    def expand(self, inputs):
        clusters, side = inputs
        return (
            clusters
            | "Pieces"
            >> beam.FlatMap(self._pieces, beam.pvalue.AsSingleton(side)).with_output_types(
                KV[Any, Any]
            )
            | "ByBucket" >> beam.GroupByKey()
            | "Sum"
            >> beam.MapTuple(
                lambda b, pieces: (b, clustering.sum_pieces(_unpacked(pieces)))
            ).with_output_types(KV[Any, Any])
        )


def _big_table(sums, label: str, big):
    """One sorted (labels, values) table of big(bucket sums) over all buckets, or None."""
    return (
        sums
        | f"{label}OfBucket" >> big.with_output_types(Any)
        | label >> CombineAll(Fold(_concat_tables))
        | f"Sort{label}" >> beam.Map(_sorted).with_output_types(Any)
    )


class _ClusterRound(beam.PTransform):
    """One round of size-capped clustering: cluster sizes, messages of labels, proposals,
    admission of the proposals into clusters they would fill, moves."""

    def __init__(self, config, round_: int):
        super().__init__()
        self._config = config
        self._round = round_

    class _Propose(beam.DoFn):
        def __init__(self, config, round_: int):
            self._config = config
            self._round = round_

        def process(self, keyed, full):
            key, groups = split(keyed)
            config = self._config
            for shard in groups["state"]:
                joiners = clustering.cluster_propose(
                    shard,
                    list(groups["messages"]),
                    _as_arrays(full)[0],
                    config.seed,
                    self._round,
                    config.num_shards,
                )
                yield key, shard
                for piece in _keyed_pieces(joiners):
                    yield beam.pvalue.TaggedOutput("joiners", piece)

    class _Apply(beam.DoFn):
        def __init__(self, config, round_: int):
            self._config = config
            self._round = round_
            self._moves = Metrics.counter(NAMESPACE, "lp_cluster_moves")

        def process(self, keyed, admission):
            key, shard = keyed
            limited, fraction = _as_arrays(admission)
            new = clustering.cluster_apply(shard, limited, fraction, self._config.seed, self._round)
            self._moves.inc(int(np.sum(new.labels != shard.labels)))
            yield key, new

    def _full(self, keyed, num_nodes):
        labels, sums = keyed[1]
        return clustering.big_labels_of(labels, sums, _cap(self._config, num_nodes), 1)

    def _admit(self, keyed, num_nodes):
        groups = keyed[1]
        (labels, sums), *_ = list(groups["sizes"]) or [(np.zeros(0, np.int64), np.zeros((0, 1)))]
        sizes = sums[:, 0]
        cap = _cap(self._config, num_nodes)
        return clustering.cluster_admission(labels, sizes, _unpacked(groups["joiners"]), cap)

    def expand(self, inputs):
        clusters, num_nodes = inputs
        config = self._config
        sizes = (clusters, num_nodes) | "Sizes" >> _BucketSums(
            config.num_shards, lambda shard, _: np.ones((len(shard.labels), 1))
        )
        full = _big_table(sizes, "Full", beam.Map(self._full, beam.pvalue.AsSingleton(num_nodes)))
        gathered = clusters | "Gather" >> Gather(clustering.cluster_messages)
        proposed = gathered | "Propose" >> beam.ParDo(
            self._Propose(config, self._round), beam.pvalue.AsSingleton(full)
        ).with_output_types(KV[Any, Any]).with_outputs("joiners", main="state")
        joined = {"sizes": sizes, "joiners": proposed.joiners} | "Join" >> Join()
        admission = _big_table(
            joined, "Admission", beam.Map(self._admit, beam.pvalue.AsSingleton(num_nodes))
        )
        return proposed.state | "Apply" >> beam.ParDo(
            self._Apply(config, self._round), beam.pvalue.AsSingleton(admission)
        ).with_output_types(KV[Any, Any])


class _Pack(beam.PTransform):
    """(keyed ClusterShards, number of nodes, class table) -> keyed LPShards whose parts
    are the packed clusters."""

    def __init__(self, config):
        super().__init__()
        self._config = config

    def _columns(self, shard, class_table):
        return clustering.cluster_columns(shard.lp, len(class_table), self._config.balance_edges)

    def _big(self, keyed, num_nodes, class_table):
        labels, sums = keyed[1]
        min_size = num_nodes / (clustering.PACK_MIN_DIVISOR * self._config.num_parts)
        return clustering.big_labels_of(labels, sums, min_size, len(class_table))

    def _pack(self, table, totals, class_table):
        if totals is None:  # no nodes at all
            return None
        if table is None:
            table = (np.zeros(0, np.int64), np.zeros((0, len(totals))))
        return clustering.pack_clusters(
            table[0], table[1], totals, self._config.num_parts, len(class_table)
        )

    def _assign(self, keyed, packing):
        key, shard = keyed
        parts = clustering.packed_parts(shard.labels, packing, self._config.seed)
        return key, dataclasses.replace(shard.lp, parts=parts)

    def expand(self, inputs):
        clusters, num_nodes, class_table = inputs
        config = self._config
        totals = (
            clusters
            | "Columns"
            >> beam.Map(
                lambda kv, t: self._columns(kv[1], t).sum(axis=0),
                beam.pvalue.AsSingleton(class_table),
            ).with_output_types(Any)
            | "Totals" >> CombineAll(Fold(add))
        )
        sums = (clusters, class_table) | "Sums" >> _BucketSums(config.num_shards, self._columns)
        table = _big_table(
            sums,
            "Big",
            beam.Map(
                self._big, beam.pvalue.AsSingleton(num_nodes), beam.pvalue.AsSingleton(class_table)
            ),
        )
        packing = table | "Pack" >> beam.Map(
            self._pack, beam.pvalue.AsSingleton(totals), beam.pvalue.AsSingleton(class_table)
        ).with_output_types(Any)
        return clusters | "Assign" >> beam.Map(
            self._assign, beam.pvalue.AsSingleton(packing)
        ).with_output_types(KV[Any, Any])


def _group(state, sizes, by_degree: bool) -> np.ndarray:
    """int64 index of each row's group into the group table `sizes` (keys, sizes)."""
    return np.searchsorted(sizes[0], clustering.group_keys(state, by_degree))


class _RebalanceRound(beam.PTransform):
    """keyed LPShards -> the same with the parts of one round of rebalance: group sizes,
    messages of parts, proposals, quotas, the exact cutoffs of small quotas, moves."""

    def __init__(self, config, index: int, by_degree: bool):
        super().__init__()
        self._config = config
        self._round = clustering.REBALANCE_ROUND_BASE + index
        self._by_degree = by_degree  # groups: class x degree bucket, or class alone

    def _counts(self, keyed):
        state = keyed[1]
        return clustering.group_counts(clustering.group_keys(state, self._by_degree), state.parts)

    def _propose(self, keyed, sizes):
        key, groups = split(keyed)
        messages = [(rows, part_count) for rows, part_count in groups["messages"]]
        for state in groups["state"]:
            group = _group(state, sizes, self._by_degree)
            hist = clustering.rebalance_propose(
                state, messages, group, sizes[1], self._config.seed, self._round
            )
            yield key, state
            yield beam.pvalue.TaggedOutput("hist", hist)

    def _quotas(self, hist, sizes):
        if hist is None:
            shape = sizes[1].shape + (sizes[1].shape[1], clustering.REBALANCE_LEVELS)
            return clustering.rebalance_quotas(np.zeros(shape, np.int64), sizes[1])
        return clustering.rebalance_quotas(hist.dense(), sizes[1])

    def _draws(self, keyed, sizes, quotas):
        state = keyed[1]
        group = _group(state, sizes, self._by_degree)
        return clustering.rebalance_draws(state, group, quotas, self._config.seed, self._round)

    class _Apply(beam.DoFn):
        def __init__(self, config, round_: int, by_degree: bool):
            self._config = config
            self._round = round_
            self._by_degree = by_degree
            self._moves = Metrics.counter(NAMESPACE, "lp_rebalance_moves")

        def process(self, keyed, sizes, quotas):
            key, state = keyed
            group = _group(state, sizes, self._by_degree)
            new = clustering.rebalance_apply(state, group, quotas, self._config.seed, self._round)
            self._moves.inc(int(np.sum(new.parts != state.parts)))
            yield key, new

    def expand(self, state):
        num_parts = self._config.num_parts
        sizes = (
            state
            | "GroupCounts" >> beam.Map(self._counts).with_output_types(Any)
            | "SumGroups" >> CombineAll(MergeCounts())
            | "Sizes"
            >> beam.Map(lambda c: clustering.group_table(c or {}, num_parts)).with_output_types(Any)
        )
        gathered = state | "Gather" >> Gather(lambda s: label_propagation.lp_messages(s, num_parts))
        proposed = gathered | "Propose" >> beam.FlatMap(
            self._propose, beam.pvalue.AsSingleton(sizes)
        ).with_output_types(KV[Any, Any]).with_outputs("hist", main="state")
        quotas = (
            proposed.hist
            | "SumHist" >> CombineAll(Fold(add))
            | "Quotas"
            >> beam.Map(self._quotas, beam.pvalue.AsSingleton(sizes)).with_output_types(Any)
        )
        draws = (
            proposed.state
            | "Draws"
            >> beam.Map(
                self._draws, beam.pvalue.AsSingleton(sizes), beam.pvalue.AsSingleton(quotas)
            ).with_output_types(Any)
            | "AllDraws" >> CombineAll(Fold(_merge_draws))
        )
        exact = quotas | "Cutoffs" >> beam.Map(
            lambda q, d: clustering.rebalance_cutoffs(q, d or {}), beam.pvalue.AsSingleton(draws)
        ).with_output_types(Any)
        return proposed.state | "Apply" >> beam.ParDo(
            self._Apply(self._config, self._round, self._by_degree),
            beam.pvalue.AsSingleton(sizes),
            beam.pvalue.AsSingleton(exact),
        ).with_output_types(KV[Any, Any])
