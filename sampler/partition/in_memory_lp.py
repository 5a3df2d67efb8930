"""--part_method lp in one process (sampler/partition/in_memory.py): the rounds of
sampler/beam/partition/methods.py's LabelPropagation and clustering.py's ClusterStart, with
one shard per node type (shard key = node type) and every message handed over in memory.

Every global step here is the Beam stage's combine of the same values (integer counts and
sums, merged in any order to the same result), so the parts are the same as on Beam.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from sampler.partition import adjacency_cache, clustering, label_propagation


def _gather(states: dict, messages) -> dict[int, list]:
    """{shard key: [message arrays]}: what every state's `messages(state)` sends to each key
    (sampler/beam/partition/messages.py's Gather, without the Beam shuffle)."""
    inbox = defaultdict(list)
    for state in states.values():
        for target, *message in messages(state):
            inbox[target].append(tuple(message))
    return inbox


def initial_states(g, parts: dict[int, np.ndarray]) -> dict[int, label_propagation.LPShard]:
    """{node type: LPShard} with the adjacency of both directions of every edge (no
    self-loops), as methods.py's _Adjacency and _Init build it."""
    types, starts = g.types, g.starts
    pieces = defaultdict(list)
    for edges in g.edges.values():
        src_t, dst_t = (types.ntype_id(types.etypes[edges.etype][i]) for i in (0, 2))
        src_row = edges.src - starts[src_t, 0]
        dst_row = edges.dst - starts[dst_t, 0]
        keep = ~((src_t == dst_t) & (src_row == dst_row))
        if not keep.any():
            continue
        src_row, dst_row = src_row[keep], dst_row[keep]
        pieces[src_t].append((src_row, np.full(len(dst_row), dst_t, np.int64), dst_row))
        pieces[dst_t].append((dst_row, np.full(len(src_row), src_t, np.int64), src_row))
    totals = starts[:, -1]
    type_offsets = totals.cumsum() - totals
    states = {}
    for t, info in g.info.items():
        got = pieces.pop(t, [])
        local, nbr_key, nbr_row = (
            np.concatenate([p[k] for p in got]) if got else np.zeros(0, np.int64) for k in range(3)
        )
        offsets, nbr_key, nbr_row = label_propagation.build_lp_adjacency(
            len(parts[t]), local, nbr_key, nbr_row
        )
        state = label_propagation.LPShard(
            t, int(type_offsets[t] + info.start), parts[t], info.classes, info.in_degree,
            offsets, nbr_key, nbr_row,
        )  # fmt: skip
        state.adjacency_token = adjacency_cache.hold(state.adjacency())
        states[t] = state
    return states


def label_propagation_parts(g, config, parts: dict[int, np.ndarray], counters) -> dict:
    """{node type: parts} of lp, from random's `parts` (methods.py's LabelPropagation)."""
    states = initial_states(g, parts)
    try:
        num_parts, num_classes = config.num_parts, len(g.class_table)
        if config.lp_cluster_rounds > 0 and num_parts > 1:
            states = cluster_start(states, config, num_classes, counters)
        for r in range(config.lp_rounds):
            inbox = _gather(states, lambda s: label_propagation.lp_messages(s, num_parts))
            summary = None
            for key, state in states.items():
                got = label_propagation.lp_propose(
                    state, inbox.pop(key, []), num_parts, num_classes, config.seed, r
                )
                summary = (
                    got
                    if summary is None
                    else tuple(a + b for a, b in zip(summary, got, strict=True))
                )
            quotas = _lp_quotas(summary, config.balance_edges)
            for key, state in states.items():
                new = label_propagation.lp_apply(state, quotas, config.seed, r)
                counters.inc("lp_moves", int(np.sum(new.parts != state.parts)))
                states[key] = new
        return {key: state.parts for key, state in states.items()}
    finally:
        adjacency_cache.clear()


def _lp_quotas(summary, balance_edges: bool) -> label_propagation.LPQuotas:
    if summary is None:  # no nodes at all
        return label_propagation.LPQuotas(np.zeros((0, 0, 0), np.int64), np.zeros((0, 0, 0)))
    hist, degree, sizes, loads = summary
    return label_propagation.lp_quotas(
        hist.dense(), degree.dense(), sizes, loads, sizes.sum(axis=1), loads.sum(axis=1),
        balance_edges,
    )  # fmt: skip


# --------------------------------------------------------------------------- clustered start


def _label_sums(shards: dict, columns) -> tuple[np.ndarray, np.ndarray] | None:
    """(labels sorted, sums) of columns(shard) summed per label over every shard (clustering.py's
    _BucketSums with one bucket), None without shards."""
    pieces = []
    for shard in shards.values():
        for _, labels, sums in clustering.label_pieces(shard.labels, columns(shard), 1):
            pieces.append((labels, sums))
    if not pieces:
        return None
    return clustering.sum_pieces(pieces)


def _sorted(table):
    if table is None:
        return None
    order = np.argsort(table[0], kind="stable")
    return table[0][order], table[1][order]


def _as_arrays(table):
    return (np.zeros(0, np.int64), np.zeros(0)) if table is None else table


def cluster_start(states: dict, config, num_classes: int, counters) -> dict:
    """The states with the parts of the clustered start: cluster, pack, rebalance
    (sampler/beam/partition/clustering.py's ClusterStart)."""
    num_nodes = sum(len(s.parts) for s in states.values())
    shards = {key: clustering.start_clusters(s) for key, s in states.items()}
    cap = num_nodes / (clustering.CLUSTER_CAP_DIVISOR * config.num_parts)
    for r in range(config.lp_cluster_rounds):
        shards = _cluster_round(shards, config, r, cap, counters)
    states = _pack(shards, config, num_nodes, num_classes)
    rounds = clustering.rebalance_rounds(config.num_parts)
    for k in range(rounds):
        states = _rebalance_round(states, config, k, config.balance_edges, counters)
    for k in range(clustering.CLASS_ROUNDS if config.balance_edges else 0):
        states = _rebalance_round(states, config, rounds + k, False, counters)
    return states


def _cluster_round(shards: dict, config, r: int, cap: float, counters) -> dict:
    sizes = _label_sums(shards, lambda s: np.ones((len(s.labels), 1)))
    full = None
    if sizes is not None:
        full = _sorted(clustering.big_labels_of(sizes[0], sizes[1], cap, 1))
    inbox = _gather(shards, clustering.cluster_messages)
    joiners = []
    for key, shard in shards.items():
        for _, labels, sums in clustering.cluster_propose(
            shard, inbox.pop(key, []), _as_arrays(full)[0], config.seed, r, 1
        ):
            joiners.append((labels, sums))
    admission = None
    if sizes is not None or joiners:
        labels, sums = sizes if sizes is not None else (np.zeros(0, np.int64), np.zeros((0, 1)))
        admission = _sorted(clustering.cluster_admission(labels, sums[:, 0], joiners, cap))
    limited, fraction = _as_arrays(admission)
    out = {}
    for key, shard in shards.items():
        new = clustering.cluster_apply(shard, limited, fraction, config.seed, r)
        counters.inc("lp_cluster_moves", int(np.sum(new.labels != shard.labels)))
        out[key] = new
    return out


def _pack(shards: dict, config, num_nodes: int, num_classes: int) -> dict:
    def columns(shard):
        return clustering.cluster_columns(shard.lp, num_classes, config.balance_edges)

    totals = None
    for shard in shards.values():
        column_sums = columns(shard).sum(axis=0)
        totals = column_sums if totals is None else totals + column_sums
    sums = _label_sums(shards, columns)
    table = None
    if sums is not None:
        min_size = num_nodes / (clustering.PACK_MIN_DIVISOR * config.num_parts)
        table = _sorted(clustering.big_labels_of(sums[0], sums[1], min_size, num_classes))
    if totals is None:  # no nodes at all
        return {key: shard.lp for key, shard in shards.items()}
    if table is None:
        table = (np.zeros(0, np.int64), np.zeros((0, len(totals))))
    packing = clustering.pack_clusters(table[0], table[1], totals, config.num_parts, num_classes)
    return {
        key: dataclasses.replace(
            shard.lp, parts=clustering.packed_parts(shard.labels, packing, config.seed)
        )
        for key, shard in shards.items()
    }


def _rebalance_round(states: dict, config, index: int, by_degree: bool, counters) -> dict:
    round_ = clustering.REBALANCE_ROUND_BASE + index
    num_parts = config.num_parts
    counts = {}
    keys = {}
    for key, state in states.items():
        keys[key] = clustering.group_keys(state, by_degree)
        for k, n in clustering.group_counts(keys[key], state.parts).items():
            counts[k] = counts.get(k, 0) + n
    sizes = clustering.group_table(dict(sorted(counts.items())), num_parts)
    groups = {key: np.searchsorted(sizes[0], keys[key]) for key in states}
    inbox = _gather(states, lambda s: label_propagation.lp_messages(s, num_parts))
    hist = None
    for key, state in states.items():
        got = clustering.rebalance_propose(
            state, inbox.pop(key, []), groups[key], sizes[1], config.seed, round_
        )
        hist = got if hist is None else hist + got
    if hist is None:
        shape = sizes[1].shape + (sizes[1].shape[1], clustering.REBALANCE_LEVELS)
        quotas = clustering.rebalance_quotas(np.zeros(shape, np.int64), sizes[1])
    else:
        quotas = clustering.rebalance_quotas(hist.dense(), sizes[1])
    draws = {}
    for key, state in states.items():
        for cell, values in clustering.rebalance_draws(
            state, groups[key], quotas, config.seed, round_
        ).items():
            draws[cell] = np.concatenate([draws[cell], values]) if cell in draws else values
    exact = clustering.rebalance_cutoffs(quotas, draws)
    out = {}
    for key, state in states.items():
        new = clustering.rebalance_apply(state, groups[key], exact, config.seed, round_)
        counters.inc("lp_rebalance_moves", int(np.sum(new.parts != state.parts)))
        out[key] = new
    return out
