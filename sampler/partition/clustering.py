"""Clustered start for label propagation: cluster, pack, rebalance (numpy kernels).

With --lp_cluster_rounds R > 0, `--part_method lp` does not start from random parts:

1. Clustering, R rounds of size-capped label propagation. Every node starts as its own
   cluster (its label is its homogeneous id) and adopts the label most of its neighbours
   have (ties by hash) if that beats its own, in a round with probability
   CLUSTER_MOVE_PROBABILITY (0.8) so that bipartite structure (paper/author) does not
   oscillate: two nodes that would swap labels merge in a round with probability 0.32.
   A cluster holds about at most `cap` = nodes / (CLUSTER_CAP_DIVISOR * parts) nodes: full
   clusters (a global table of at most CLUSTER_CAP_DIVISOR * parts labels) take no one, and
   the proposals into a cluster that would pass `cap` are admitted by a quota (a table of at
   most twice that).
2. Packing. Clusters of at least nodes / (PACK_MIN_DIVISOR * parts) nodes are packed one
   by one, largest first, into the part whose fullest class (and class load, with
   --balance_edges) stays lowest. The nodes of smaller clusters go to a part drawn by a
   hash of their cluster, weighted by the room the big ones left, so they stay together.
3. Rebalance, rebalance_rounds(parts) rounds: nodes of parts above their group's mean
   (group: the balance class, times the degree bucket with --balance_edges) propose the
   part below the mean where most of their neighbours are; the least costly moves are
   accepted until every group is within (1 +- REBALANCE_IMBALANCE) of its mean. With
   --balance_edges, CLASS_ROUNDS more rounds then balance the classes alone: a class split
   into small degree buckets could otherwise add up the rounding of every bucket.

Balanced label propagation (label_propagation.py) then refines the cut. Every step is per-shard
numpy work plus global tables of size ~ parts x classes or ~ parts (big clusters), and
everything random is a hash of (--seed, round, node), so results do not depend on workers.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.partition import assign, label_propagation
from sampler.partition.compact import narrow, widen
from sampler.partition.sparse import SparseCounts

CLUSTER_MOVE_PROBABILITY = 0.8  # a node may change cluster in a round with this probability
CLUSTER_CAP_DIVISOR = 2  # a cluster holds about at most nodes / (this * parts) nodes
PACK_MIN_DIVISOR = 64  # clusters of >= nodes / (this * parts) nodes are packed one by one
CLASS_ROUNDS = 2  # with --balance_edges: rebalance rounds by class alone, after those by group


def rebalance_rounds(num_parts: int) -> int:
    """Rebalance rounds: a node proposes one part, so more parts need more rounds."""
    return 2 + int(np.ceil(np.log2(max(num_parts, 2))))


REBALANCE_IMBALANCE = 0.01  # rebalance targets; label propagation may then use LP_IMBALANCE
REBALANCE_LEVELS = 64  # gain levels: 1 or more -> L - 1, 0 -> L - 2, then 4 per halving
REBALANCE_EXACT = 1024  # up to this many moves at a threshold level are picked exactly
# Rebalance rounds hash with rounds from here on, apart from label propagation's rounds.
REBALANCE_ROUND_BASE = 1 << 32

_SALT_TIE = np.uint64(0x434C54494553)  # "CLTIES"
_SALT_MOVE = np.uint64(0x434C4D4F5645)  # "CLMOVE"
_SALT_ADMIT = np.uint64(0x434C41444D54)  # "CLADMT"
_SALT_PACK = np.uint64(0x434C5041434B)  # "CLPACK"
_SALT_REBALANCE = np.uint64(0x52424C544945)  # "RBLTIE"
_SALT_DRAW = np.uint64(0x52424C445257)  # "RBLDRW"


# --------------------------------------------------------------------------- clustering


@dataclasses.dataclass
class ClusterShard:
    """A node shard during clustering: its label propagation state (adjacency, classes,
    in-degree; its `parts` are not used yet) and the cluster label of each row, which is
    the homogeneous id of some node (every node starts as its own cluster)."""

    lp: label_propagation.LPShard
    labels: np.ndarray  # int64
    target: np.ndarray | None = None  # int64 label proposed this round, or -1

    def __reduce__(self):
        # Pickled (between Beam stages) with its arrays narrowed: see compact.py.
        return _cluster_shard, (self.lp, narrow(self.labels), narrow(self.target))


def _cluster_shard(lp, labels, target):
    return ClusterShard(lp, widen(labels), widen(target))


def start_clusters(state: label_propagation.LPShard) -> ClusterShard:
    return ClusterShard(state, state.gids().astype(np.int64))


_INT64_END = int(np.iinfo(np.int64).max)


def cluster_messages(shard: ClusterShard) -> list[tuple[int, np.ndarray, np.ndarray, np.ndarray]]:
    """[(neighbour shard key, rows, labels, counts)]: the labels this shard's nodes show
    to each neighbour shard, counted per (neighbour row, label)."""
    state = shard.lp
    if len(state.nbr_key) == 0:
        return []
    # Labels by their rank among this shard's labels: a code (pair, rank) sorts like
    # (neighbour key, row, label) and mostly fits an int32, which sorts twice as fast.
    unique, rank = np.unique(shard.labels, return_inverse=True)
    source, group, pair_key, pair_row = label_propagation.by_target(state)
    if len(pair_key) * len(unique) < _INT64_END:
        small = np.int32 if len(pair_key) * len(unique) <= np.iinfo(np.int32).max else np.int64
        sender = rank.astype(small)[source]
        code = np.sort(group.astype(small) * small(len(unique)) + sender)
        first = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
        counts = np.diff(np.r_[first, len(code)]).astype(np.int64)
        pair, label = np.divmod(code[first].astype(np.int64), len(unique))
        return label_propagation.split_by_key(pair_key[pair], pair_row[pair], unique[label], counts)
    sender = np.repeat(shard.labels, np.diff(state.offsets)).astype(np.int64)
    order = np.argsort(state.nbr_key, kind="stable")
    bounds = np.flatnonzero(np.diff(state.nbr_key[order])) + 1
    out = []
    for chunk in np.split(order, bounds) if len(order) else []:
        rows = state.nbr_row[chunk].astype(np.int64)
        ones = np.ones(len(chunk), np.int64)
        counted = label_propagation.compiled().sum_row_labels(
            rows, sender[chunk], ones, int(rows.max()) + 1
        )
        out.append((int(state.nbr_key[chunk[0]]), *counted))
    return out


def _lookup(table: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into the sorted `table` of each value, whether it is there)."""
    if len(table) == 0:
        return np.zeros(len(values), np.int64), np.zeros(len(values), bool)
    index = np.searchsorted(table, values).clip(0, len(table) - 1)
    return index, table[index] == values


def _first_max(rows: np.ndarray, score: np.ndarray) -> np.ndarray:
    """Index of the first highest score of each run of equal `rows` (sorted, no NaN score):
    what the first entry per row of np.lexsort((-score, rows)) is, without a sort."""
    starts = np.flatnonzero(np.r_[True, rows[1:] != rows[:-1]])
    top = np.maximum.reduceat(score, starts)
    at_top = np.flatnonzero(score == np.repeat(top, np.diff(np.r_[starts, len(rows)])))
    return at_top[np.r_[True, rows[at_top][1:] != rows[at_top][:-1]]]


def cluster_propose(
    shard: ClusterShard,
    messages: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
    full_labels: np.ndarray,
    seed: int,
    round_: int,
    num_buckets: int,
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Sets shard.target; returns label_pieces of the proposals (their count per label).

    messages: [(rows, labels, counts)] from the neighbour shards; full_labels (sorted): the
    clusters that take no one. A node proposes the label most of its neighbours have (ties
    by hash) if it has more such neighbours than of its own label and a hash lets it move.
    """
    n = len(shard.labels)
    shard.target = np.full(n, -1, np.int64)
    pieces = [m for m in messages if len(m[0])]
    if not pieces:
        return []
    rows, labels, counts = (np.concatenate(x) for x in zip(*pieces, strict=True))
    # A counting sort by row, then each row's few labels: no sort over the whole type.
    k = label_propagation.compiled()
    rows, labels, counts = (a.astype(np.int64, copy=False) for a in (rows, labels, counts))
    rows, labels, counts = k.sum_row_labels(rows, labels, counts, n)
    own = labels == shard.labels[rows]
    own_count = np.zeros(n, np.int64)
    own_count[rows[own]] = counts[own]
    step = ids.combine(np.uint64(seed), np.uint64(round_))
    gids = shard.lp.gids()
    jitter = ids.uniform(ids.combine(step, _SALT_TIE, gids[rows], labels.astype(np.uint64)))
    score = np.where(_lookup(full_labels, labels)[1] & ~own, -1.0, counts + 0.5 * jitter)
    best = _first_max(rows, score)  # one per row
    row = rows[best]
    movable = ids.uniform(ids.combine(step, _SALT_MOVE, gids[row])) < CLUSTER_MOVE_PROBABILITY
    propose = (score[best] >= 0) & (counts[best] > own_count[row]) & ~own[best] & movable
    shard.target[row[propose]] = labels[best[propose]]
    target = labels[best[propose]]
    return label_pieces(target, np.ones((len(target), 1)), num_buckets)


def cluster_admission(
    labels: np.ndarray, sizes: np.ndarray, joiners: list[tuple[np.ndarray, np.ndarray]], cap: float
) -> tuple[np.ndarray, np.ndarray]:
    """(labels, fraction admitted) of the clusters of one bucket that more proposals would
    take past `cap` nodes (leavers are not counted), so that they end at `cap` on average
    (each proposal is admitted by a hash draw).

    labels (sorted), sizes: every cluster of the bucket; joiners: its proposal pieces.
    """
    if not joiners:
        return np.zeros(0, np.int64), np.zeros(0)
    wanted, count = sum_pieces(joiners)
    index, found = _lookup(labels, wanted)
    size = np.where(found, sizes[index] if len(labels) else 0, 0)
    over = size + count[:, 0] > np.floor(cap)
    room = np.maximum(np.floor(cap) - size[over], 0)
    return wanted[over], room / count[over, 0]


def cluster_apply(
    shard: ClusterShard, limited: np.ndarray, fraction: np.ndarray, seed: int, round_: int
) -> ClusterShard:
    """Moves the admitted proposals: all, but only `fraction` of those into the `limited`
    labels (sorted); clears the round's proposals."""
    p = np.flatnonzero(shard.target >= 0)
    index, found = _lookup(limited, shard.target[p])
    step = ids.combine(np.uint64(seed), np.uint64(round_), _SALT_ADMIT)
    draw = ids.uniform(ids.combine(step, shard.lp.gids()[p]))
    accept = ~found | (draw < (fraction[index] if len(limited) else 0.0))
    labels = shard.labels.copy()
    labels[p[accept]] = shard.target[p[accept]]
    return ClusterShard(shard.lp, labels)


# --------------------------------------------------------------------------- label tables


def cluster_columns(
    state: label_propagation.LPShard, num_classes: int, balance_edges: bool
) -> np.ndarray:
    """float64[rows, C] one-hot class of each row, then with balance_edges [rows, 2C]: its
    in-degree in its class's column (the loads packing balances)."""
    n = len(state.classes)
    columns = np.zeros((n, num_classes * (2 if balance_edges else 1)))
    columns[np.arange(n), state.classes] = 1
    if balance_edges:
        columns[np.arange(n), num_classes + state.classes] = state.in_degree
    return columns


def _column_sums(inverse: np.ndarray, columns: np.ndarray, rows: int) -> np.ndarray:
    """float64[rows, D]: the rows of `columns` summed by `inverse`, in row order per column
    (as np.add.at(out, inverse, columns) sums them)."""
    out = np.zeros((rows, columns.shape[1]))
    for d in range(columns.shape[1]):
        out[:, d] = np.bincount(inverse, columns[:, d], minlength=rows)
    return out


def label_pieces(
    labels: np.ndarray, columns: np.ndarray, num_buckets: int
) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(bucket, labels, sums)]: `columns` (float64[rows, D]) summed per label, split by
    a hash bucket of the label so that the labels can be summed by many workers."""
    if len(labels) == 0:
        return []
    unique, inverse = np.unique(labels, return_inverse=True)
    sums = _column_sums(inverse, columns, len(unique))
    bucket = (ids.mix(unique.astype(np.uint64)) % np.uint64(num_buckets)).astype(np.int64)
    return [(int(b), unique[bucket == b], sums[bucket == b]) for b in np.unique(bucket)]


def sum_pieces(pieces: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(labels sorted, sums float64[labels, D]) of the (labels, sums) pieces of a bucket."""
    labels = np.concatenate([p[0] for p in pieces])
    sums = np.concatenate([p[1] for p in pieces])
    unique, inverse = np.unique(labels, return_inverse=True)
    return unique, _column_sums(inverse, sums, len(unique))


def big_labels_of(
    labels: np.ndarray, sums: np.ndarray, min_size: float, size_columns: int
) -> tuple[np.ndarray, np.ndarray]:
    """(labels, sums) of the labels whose first `size_columns` columns (the node counts)
    add up to at least min_size."""
    keep = sums[:, :size_columns].sum(axis=1) >= min_size
    return labels[keep], sums[keep]


# --------------------------------------------------------------------------- packing


@dataclasses.dataclass
class ClusterPacking:
    """Where clusters go: `parts[k]` for the big cluster `labels[k]` (sorted); the nodes of
    any other cluster go to part p with probability share[p] (the room left, normalized)."""

    labels: np.ndarray  # int64
    parts: np.ndarray  # int64
    share: np.ndarray  # float64[P]


def pack_clusters(
    labels: np.ndarray, sums: np.ndarray, totals: np.ndarray, num_parts: int, size_columns: int
) -> ClusterPacking:
    """Greedy packing of big clusters (labels int64[K], sums float64[K, D]: per class node
    counts, then optionally loads) given the column totals over all nodes (float64[D]).

    Largest first (ties by label), each into the part whose fullest column relative to its
    per-part mean would stay lowest (ties: the lowest part).
    """
    order = np.lexsort((labels, -sums[:, :size_columns].sum(axis=1)))
    mean = np.maximum(totals / num_parts, 1e-9)
    fill = np.zeros((num_parts, sums.shape[1]))
    parts = np.zeros(len(labels), np.int64)
    for k in order:
        p = int(np.argmin(((fill + sums[k]) / mean).max(axis=1)))
        fill[p] += sums[k]
        parts[k] = p
    room = np.maximum(mean[:size_columns].sum() - fill[:, :size_columns].sum(axis=1), 0)
    share = room / room.sum() if room.sum() > 0 else np.full(num_parts, 1 / num_parts)
    by_label = np.argsort(labels, kind="stable")
    return ClusterPacking(labels[by_label].astype(np.int64), parts[by_label], share)


def packed_parts(labels: np.ndarray, packing: ClusterPacking, seed: int) -> np.ndarray:
    """int64 part of each node, given its cluster label."""
    draw = ids.uniform(ids.combine(np.uint64(seed), _SALT_PACK, labels.astype(np.uint64)))
    cumulative = np.cumsum(packing.share)
    parts = np.searchsorted(cumulative / cumulative[-1], draw, side="right")
    parts = parts.clip(0, len(packing.share) - 1).astype(np.int64)
    index, big = _lookup(packing.labels, labels)
    parts[big] = packing.parts[index[big]]
    return parts


# --------------------------------------------------------------------------- rebalance


def group_keys(state: label_propagation.LPShard, balance_edges: bool) -> np.ndarray:
    """int64 group of each row: its class, times its degree bucket with balance_edges."""
    keys = state.classes * (assign.MAX_DEGREE_BUCKET + 1)
    return keys + assign.degree_bucket(state.in_degree) if balance_edges else keys


def group_counts(keys: np.ndarray, parts: np.ndarray) -> dict[tuple[int, int], int]:
    """{(group key, part): nodes} of a shard."""
    pairs, counts = np.unique(np.stack([keys, parts]), axis=1, return_counts=True)
    return {(int(k), int(p)): int(c) for (k, p), c in zip(pairs.T, counts, strict=True)}


def group_table(counts: dict, num_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """(sorted group keys int64[G], sizes int64[G, P]) from the summed group_counts."""
    keys = np.array(sorted({k for k, _ in counts}), dtype=np.int64)
    sizes = np.zeros((len(keys), num_parts), np.int64)
    for (k, p), n in counts.items():
        sizes[np.searchsorted(keys, k), p] += n
    return keys, sizes


def _bounds(sizes: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per group: (mean, lower, upper) targets; within +-1 of the mean for tiny groups."""
    mean = sizes.sum(axis=1, keepdims=True) / sizes.shape[1]
    upper = np.maximum(np.floor(mean * (1 + REBALANCE_IMBALANCE)), np.ceil(mean))
    lower = np.minimum(np.ceil(mean * (1 - REBALANCE_IMBALANCE)), np.floor(mean))
    return mean, lower, upper


def gain_level(gain: np.ndarray) -> np.ndarray:
    """int64 level in [0, REBALANCE_LEVELS) of a gain, higher = better: L - 1 for gains of
    1 or more, L - 2 for 0, then 4 levels per doubling of the loss (-1, -2, -3, -5, ...)."""
    top = REBALANCE_LEVELS - 2
    loss = np.maximum(-np.asarray(gain, dtype=np.float64), 0)
    level = top - np.minimum(np.rint(4 * np.log2(1 + loss)), top)
    return np.where(gain >= 1, top + 1, level).astype(np.int64)


def rebalance_propose(
    state: label_propagation.LPShard,
    messages: list[tuple[np.ndarray, np.ndarray]],
    group: np.ndarray,
    sizes: np.ndarray,
    seed: int,
    round_: int,
) -> SparseCounts:
    """Sets state.target / state.gain; returns the proposals' hist [G, P, P, levels].

    messages: lp_messages' (rows, [part, count]) for this shard; group: int64 index of each
    row into sizes (int64[G, P]). Nodes of groups that are out of bounds somewhere, in
    parts above the group's mean, propose the part below the mean with the most of their
    neighbours (ties by hash); gain = neighbours there - neighbours at home, as a level.
    """
    n, num_parts = len(state.parts), sizes.shape[1]
    counts = label_propagation.message_counts(messages, n, num_parts)
    mean, lower, upper = _bounds(sizes)
    unbalanced = ((sizes < lower) | (sizes > upper)).any(axis=1)
    receiver = sizes < mean
    step = ids.combine(np.uint64(seed), np.uint64(round_), _SALT_REBALANCE)
    jitter = ids.uniform(ids.combine(step, state.gids()[:, None], np.arange(num_parts)))
    score = np.where(receiver[group], counts + 0.5 * jitter, -np.inf)
    rows = np.arange(n)
    best = np.argmax(score, axis=1)
    propose = unbalanced[group] & (sizes[group, state.parts] > mean[group, 0])
    propose &= np.isfinite(score[rows, best])
    level = gain_level(counts[rows, best] - counts[rows, state.parts])
    state.target = np.where(propose, best, -1)
    state.gain = np.where(propose, level, 0)
    p = np.flatnonzero(propose)
    shape = (len(sizes), num_parts, num_parts, REBALANCE_LEVELS)
    return SparseCounts.of(shape, (group[p], state.parts[p], best[p], level[p]))


@dataclasses.dataclass
class RebalanceQuotas:
    """Per (group, from, to): accept the proposals above `level`, and those at `level` whose
    draw is below `cutoff` (NaN: to be found by rebalance_cutoffs, which takes the `take`
    smallest draws)."""

    level: np.ndarray  # int64 [G, P, P]; REBALANCE_LEVELS means accept nothing
    take: np.ndarray  # int64 [G, P, P] proposals to accept at `level`
    cutoff: np.ndarray  # float64 [G, P, P]


def rebalance_quotas(hist: np.ndarray, sizes: np.ndarray) -> RebalanceQuotas:
    """How many proposals each (group, from, to) accepts, best levels first: a move is
    taken while it brings its source down from over the upper bound, or its target up
    from under the lower bound, without passing the mean (rounded) on either side."""
    mean, lower, upper = _bounds(sizes)
    quota = np.zeros(hist.shape[:3], np.int64)
    for g in np.flatnonzero(hist.any(axis=(1, 2, 3))):
        size = sizes[g].astype(np.float64)
        i, j, lev = np.nonzero(hist[g])
        for k in np.lexsort((j, i, -lev)):
            a, b = i[k], j[k]
            need = max(size[a] - upper[g, 0], lower[g, 0] - size[b])
            room = min(size[a] - np.floor(mean[g, 0]), np.ceil(mean[g, 0]) - size[b])
            take = int(min(hist[g, a, b, lev[k]], need, room))
            if take > 0:
                quota[g, a, b] += take
                size[a] -= take
                size[b] += take
    return _thresholds(hist, quota)


def _thresholds(hist: np.ndarray, quota: np.ndarray) -> RebalanceQuotas:
    """The best `quota` proposals of each (group, from, to): a level, and how many to take
    at it. All of the level: cutoff 1; up to REBALANCE_EXACT: the smallest draws (cutoff
    NaN until rebalance_cutoffs); more: each with probability take / proposals there."""
    level, take = label_propagation.quota_levels(hist, quota)
    cutoff = np.zeros(quota.shape, dtype=np.float64)
    for g, i, j in zip(*np.nonzero(quota), strict=True):
        there = hist[g, i, j, level[g, i, j]]
        if take[g, i, j] >= there:
            cutoff[g, i, j] = 1.0
        elif take[g, i, j] <= REBALANCE_EXACT:
            cutoff[g, i, j] = np.nan
        else:
            cutoff[g, i, j] = take[g, i, j] / there
    return RebalanceQuotas(level, take, cutoff)


def _draws(
    state: label_propagation.LPShard, rows: np.ndarray, seed: int, round_: int
) -> np.ndarray:
    step = ids.combine(np.uint64(seed), np.uint64(round_), _SALT_DRAW)
    return ids.uniform(ids.combine(step, state.gids()[rows]))


def rebalance_draws(
    state: label_propagation.LPShard,
    group: np.ndarray,
    quotas: RebalanceQuotas,
    seed: int,
    round_: int,
) -> dict[tuple[int, int, int], np.ndarray]:
    """{(group, from, to): sorted draws} of this shard's proposals at the level of the
    cells whose cutoff is still to be found, at most `take` per cell (the smallest)."""
    p = np.flatnonzero(state.target >= 0)
    cell = (group[p], state.parts[p], state.target[p])
    open_ = np.isnan(quotas.cutoff[cell]) & (state.gain[p] == quotas.level[cell])
    p, draw = p[open_], _draws(state, p[open_], seed, round_)
    out = {}
    for g, i, j in set(
        zip(group[p].tolist(), state.parts[p].tolist(), state.target[p].tolist(), strict=True)
    ):
        mine = (group[p] == g) & (state.parts[p] == i) & (state.target[p] == j)
        out[(g, i, j)] = np.sort(draw[mine])[: quotas.take[g, i, j]]
    return out


def rebalance_cutoffs(quotas: RebalanceQuotas, draws: dict) -> RebalanceQuotas:
    """Fills the open cutoffs from the merged rebalance_draws ({cell: draws} of all shards):
    just above the take-th smallest draw, so exactly `take` proposals pass."""
    cutoff = quotas.cutoff.copy()
    for cell, values in draws.items():
        k = quotas.take[cell]
        cutoff[cell] = np.nextafter(np.sort(values)[k - 1], 2.0)
    return RebalanceQuotas(quotas.level, quotas.take, np.nan_to_num(cutoff, nan=1.0))


def rebalance_apply(
    state: label_propagation.LPShard,
    group: np.ndarray,
    quotas: RebalanceQuotas,
    seed: int,
    round_: int,
) -> label_propagation.LPShard:
    """Moves the accepted proposals; clears the round's proposal arrays."""
    p = np.flatnonzero(state.target >= 0)
    cell = (group[p], state.parts[p], state.target[p])
    level = quotas.level[cell]
    draw = _draws(state, p, seed, round_)
    accept = (state.gain[p] > level) | ((state.gain[p] == level) & (draw < quotas.cutoff[cell]))
    parts = state.parts.copy()
    parts[p[accept]] = state.target[p[accept]]
    return dataclasses.replace(state, parts=parts, target=None, gain=None)
