"""Balanced label propagation (--part_method lp) as numpy kernels over node shards.

Per round every shard sends its nodes' parts to its neighbours' shards (lp_messages); each
shard proposes moves to the part most of a node's neighbours are in and sums them into a
histogram per (class, from, to, gain level) (lp_propose); one global step turns the summed
histograms into how many moves each pair of parts may accept within the balance bounds
(lp_quotas); the shards apply them (lp_apply). Randomness is a counter-based hash of
(--seed, round, node), as in assign.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.jit_loader import kernels
from sampler.partition import adjacency_cache
from sampler.partition.compact import narrow, widen
from sampler.partition.sparse import SparseCounts

_SALT_MOVE = np.uint64(0x4C504D4F5645)  # "LPMOVE"
_SALT_TIE = np.uint64(0x4C5054494553)  # "LPTIES"
_SALT_ACCEPT = np.uint64(0x4C5041434350)  # "LPACCP"

LP_GAIN_LEVELS = 64  # gains are counted in a histogram of levels 1..63 (63 = 63 or more)
LP_MOVE_PROBABILITY = 0.5  # a node may move in a round with this probability
LP_IMBALANCE = 0.03  # part sizes are kept within (1 +- this) of the class mean


@dataclasses.dataclass
class LPShard:
    """Label propagation state of one node shard: parts, classes and adjacency.

    Row i is the node with original id `start + i` of type `ntype`; its neighbours
    (both directions, parallel edges repeated, no self-loops) are
    `nbr_key[offsets[i]:offsets[i+1]]` (the neighbour's shard key) and `nbr_row` (its row).
    """

    key: int  # ntype * num_shards + shard
    gid_start: int  # homogeneous original id of row 0 (for hashing)
    parts: np.ndarray  # int64
    classes: np.ndarray  # int64 balance class of each row
    in_degree: np.ndarray  # int64 (edges each node owns)
    offsets: np.ndarray  # int64, rows + 1
    nbr_key: np.ndarray  # int64
    nbr_row: np.ndarray  # int64
    # Set by `lp_propose` for the current round:
    target: np.ndarray | None = None  # int64 proposed part, or -1
    gain: np.ndarray | None = None  # int64 level of the proposal's gain
    # Names the adjacency in this process's adjacency cache (set when pickled).
    adjacency_token: bytes | None = dataclasses.field(default=None, compare=False, repr=False)

    def gids(self) -> np.ndarray:
        return (self.gid_start + np.arange(len(self.parts))).astype(np.uint64)

    def adjacency(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.offsets, self.nbr_key, self.nbr_row

    def __reduce__(self):
        # Pickled (between Beam stages) with its arrays narrowed: see compact.py; the
        # adjacency's narrowed arrays once per process, with a token: see adjacency_cache.py.
        token, narrowed = adjacency_cache.pickled(self.adjacency_token, self.adjacency())
        self.adjacency_token = token
        arrays = (self.parts, self.classes, self.in_degree)
        return _lp_shard, (
            self.key,
            self.gid_start,
            *(narrow(a) for a in arrays),
            token,
            narrowed,
            narrow(self.target),
            narrow(self.gain),
        )


def _lp_shard(key, gid_start, parts, classes, in_degree, token, narrowed, target, gain):
    offsets, nbr_key, nbr_row = adjacency_cache.unpickled(token, narrowed)
    return LPShard(
        key, gid_start, widen(parts), widen(classes), widen(in_degree), offsets, nbr_key,
        nbr_row, widen(target), widen(gain), token,
    )  # fmt: skip


def compiled():
    """lp_jit's kernels: counting sorts on bounded codes, and per-segment passes over them."""
    return kernels("sampler.partition.lp_jit")


def _code(columns, spans) -> np.ndarray:
    code = np.zeros(len(columns[0]), np.int64)
    for column, span in zip(columns, spans, strict=True):
        code = code * span + column
    return code


def stable_order(*columns: np.ndarray) -> np.ndarray:
    """np.lexsort(columns[::-1]): the order by the first column, then the next, ties in
    input order. Compiled: a counting sort by the code of the leading columns whose range
    stays within ~2x the entries, then the short runs of equal code sorted by the rest; else
    one stable argsort of one int64 code when the columns fit in it (a few times faster than
    lexsort), else lexsort."""
    if len(columns[0]) == 0 or min(int(c.min()) for c in columns) < 0:
        return np.lexsort(columns[::-1])
    spans = [int(c.max()) + 1 for c in columns]
    if int(np.prod(spans, dtype=object)) >= np.iinfo(np.int64).max:
        return np.lexsort(columns[::-1])
    bins, lead = 1, 0
    while lead < len(spans) and bins * spans[lead] <= max(2 * len(columns[0]), 1 << 16):
        bins *= spans[lead]
        lead += 1
    if lead:
        major = _code(columns[:lead], spans[:lead])
        rest = lead < len(columns)
        minor = _code(columns[lead:], spans[lead:]) if rest else major
        return compiled().grouped_order(major, minor, bins, rest)
    return np.argsort(_code(columns, spans), kind="stable")


def build_lp_adjacency(
    rows: int, local: np.ndarray, nbr_key: np.ndarray, nbr_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (offsets, nbr_key, nbr_row) of a shard from (local row, neighbour) pairs."""
    order = stable_order(local, nbr_key, nbr_row)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(local, minlength=rows), out=offsets[1:])
    return offsets, nbr_key[order].astype(np.int64), nbr_row[order].astype(np.int64)


def split_by_key(key: np.ndarray, *arrays: np.ndarray) -> list[tuple]:
    """[(key, *arrays' rows of that key)] of rows sorted by `key`, by key ascending."""
    bounds = np.flatnonzero(key[1:] != key[:-1]) + 1
    starts, ends = np.r_[0, bounds], np.r_[bounds, len(key)]
    return [
        (int(key[a]), *(x[a:b] for x in arrays))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True)
    ]


def by_target(state: LPShard) -> tuple[np.ndarray, ...]:
    """(source, group, key, row): the adjacency entries in (nbr_key, nbr_row) order as the
    row of the node that sends each (so a per-node value in this order is `value[source]`,
    a gather from a table of the shard's nodes, which stays in the CPU caches far longer
    than one from a table of its entries), the index of the distinct (nbr_key, nbr_row)
    pair of each, and the pairs. Static: kept in the adjacency cache."""

    def build():
        order = stable_order(state.nbr_key, state.nbr_row)
        key, row = state.nbr_key[order], state.nbr_row[order]
        new = np.r_[True, (key[1:] != key[:-1]) | (row[1:] != row[:-1])]
        small = np.int32 if len(order) < np.iinfo(np.int32).max else np.int64
        group = (np.cumsum(new) - 1).astype(small)
        rows = np.arange(len(state.parts), dtype=small)
        source = np.repeat(rows, np.diff(state.offsets))[order]
        return source, group, key[new], row[new]

    return adjacency_cache.derived(state.adjacency_token, state.adjacency(), "by_target", build)


# `_counts_by_target` counts into pairs x parts bins: only while that stays within this many
# times the shard's adjacency entries (many parts, few entries per pair: the sort instead).
DENSE_COUNTS, DENSE_SLACK = 4, 1 << 20


def _counts_by_target(state: LPShard, parts: np.ndarray, num_parts: int) -> list | None:
    """lp_messages by counting (pair, part) codes of the static pairs (no sort), `parts`
    the shard's nodes' parts; None when the bins would outgrow the shard (DENSE_COUNTS)."""
    source, group, pair_key, pair_row = by_target(state)
    if len(pair_key) * num_parts > DENSE_COUNTS * len(source) + DENSE_SLACK:
        return None
    # one pass over the entries, a count per part of each pair
    pair, part, count = compiled().segment_part_counts(group, source, parts, num_parts)
    part_count = np.stack([part, count], axis=1)
    return split_by_key(pair_key[pair], pair_row[pair], part_count)


def lp_messages(state: LPShard, num_parts: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(neighbour shard key, rows, counts[rows, part])]: the labels this shard's nodes
    show to each neighbour shard, summed per (neighbour row, part)."""
    parts = state.parts
    if len(state.nbr_key) and 0 <= parts.min() and parts.max() < num_parts:
        counted = _counts_by_target(state, parts, num_parts)
        if counted is not None:
            return counted
    sender_part = np.repeat(parts, np.diff(state.offsets))
    out = []
    order = np.argsort(state.nbr_key, kind="stable")
    keys = state.nbr_key[order]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    for chunk in np.split(order, bounds) if len(order) else []:
        key = int(state.nbr_key[chunk[0]])
        code = state.nbr_row[chunk] * num_parts + sender_part[chunk]
        code, count = np.unique(code, return_counts=True)
        out.append((key, code // num_parts, np.stack([code % num_parts, count], axis=1)))
    return out


def message_counts(messages: list[tuple[np.ndarray, np.ndarray]], n: int, num_parts: int):
    """float64[n, num_parts]: the (rows, [part, count]) messages summed per (row, part), in
    message order (np.bincount adds its weights in order, as np.add.at would)."""
    if not messages:
        return np.zeros((n, num_parts))
    index = np.concatenate([rows * num_parts + pc[:, 0] for rows, pc in messages])
    weights = np.concatenate([pc[:, 1] for _, pc in messages]).astype(np.float64)
    return np.bincount(index, weights, minlength=n * num_parts).reshape(n, num_parts)


def lp_propose(
    state: LPShard,
    messages: list[tuple[np.ndarray, np.ndarray]],
    num_parts: int,
    num_classes: int,
    seed: int,
    round_: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sets state.target / state.gain; returns this shard's summary.

    A node proposes the part where most of its neighbours are (ties broken by a hash),
    if that beats its own part and a hash lets it move this round. Summary:
    hist[class, from, to, gain level] of proposals and degree[class, from, to] (their total
    in-degree), both SparseCounts; sizes[class, part] and loads[class, part] (in-degree)
    of the shard, dense.
    """
    n = len(state.parts)
    counts = message_counts(messages, n, num_parts)
    gids = state.gids()
    step = ids.combine(np.uint64(seed), np.uint64(round_))
    jitter = ids.uniform(ids.combine(step, _SALT_TIE, gids[:, None], np.arange(num_parts)))
    rows = np.arange(n)
    best = np.argmax(counts + 0.5 * jitter, axis=1)
    gain = counts[rows, best] - counts[rows, state.parts]
    movable = ids.uniform(ids.combine(step, _SALT_MOVE, gids)) < LP_MOVE_PROBABILITY
    propose = (gain > 0) & movable & (best != state.parts)
    level = np.minimum(gain, LP_GAIN_LEVELS - 1).astype(np.int64)
    state.target = np.where(propose, best, -1)
    state.gain = np.where(propose, level, 0)
    p = np.flatnonzero(propose)
    c, i, j = state.classes[p], state.parts[p], best[p]
    cells = (num_classes, num_parts, num_parts)
    hist = SparseCounts.of(cells + (LP_GAIN_LEVELS,), (c, i, j, level[p]))
    degree = SparseCounts.of(cells, (c, i, j), state.in_degree[p])
    sizes = np.zeros((num_classes, num_parts), dtype=np.int64)
    loads = np.zeros((num_classes, num_parts), dtype=np.int64)
    np.add.at(sizes, (state.classes, state.parts), 1)
    np.add.at(loads, (state.classes, state.parts), state.in_degree)
    return hist, degree, sizes, loads


@dataclasses.dataclass
class LPQuotas:
    """Per (class, from, to): accept proposals above `level`, and at `level` a fraction."""

    level: np.ndarray  # int64 [C, P, P]; LP_GAIN_LEVELS means accept nothing
    fraction: np.ndarray  # float64 [C, P, P]


def lp_quotas(
    hist: np.ndarray,
    degree: np.ndarray,
    sizes: np.ndarray,
    loads: np.ndarray,
    class_totals: np.ndarray,
    load_totals: np.ndarray,
    balance_edges: bool,
) -> LPQuotas:
    """How many proposals each (class, from, to) may accept, under the balance bounds.

    Moves i->j and j->i cancel out, so the smaller of the two counts is accepted both
    ways (a swap). The rest may move one way as long as the target stays under
    (1 + LP_IMBALANCE) times the class mean and the source over (1 - LP_IMBALANCE) times it;
    with balance_edges the same holds for the in-degree load, estimated from the mean
    in-degree of the proposals. The best gains are taken first: the quota becomes a gain
    threshold plus the fraction of proposals to accept at the threshold level.
    """
    num_classes, num_parts = sizes.shape
    wanted = hist.sum(axis=3)
    quota = np.minimum(wanted, wanted.transpose(0, 2, 1))
    mean = class_totals[:, None] / num_parts
    upper = np.floor(mean * (1 + LP_IMBALANCE))
    lower = np.ceil(mean * (1 - LP_IMBALANCE))
    load_mean = load_totals[:, None] / num_parts
    load_upper = load_mean * (1 + LP_IMBALANCE)
    load_lower = load_mean * (1 - LP_IMBALANCE)
    avg = np.where(wanted > 0, degree / np.maximum(wanted, 1), 0.0)
    for c in range(num_classes):
        size = sizes[c].astype(np.float64)
        load = loads[c].astype(np.float64)
        if balance_edges:
            for i in range(num_parts):
                for j in range(i + 1, num_parts):
                    s = quota[c, i, j]
                    if s == 0:
                        continue
                    delta = avg[c, i, j] - avg[c, j, i]  # load moving i -> j per swap
                    room = (
                        (load_upper[c, 0] - load[j]) if delta > 0 else (load[i] - load_lower[c, 0])
                    )
                    if delta != 0 and s * abs(delta) > max(room, 0):
                        s = int(max(room, 0) // abs(delta))
                    quota[c, i, j] = quota[c, j, i] = s
                    load[j] += s * delta
                    load[i] -= s * delta
        rest = wanted[c] - np.minimum(wanted[c], wanted[c].T)
        for flat in np.argsort(-rest, axis=None, kind="stable"):
            i, j = divmod(int(flat), num_parts)
            if rest[i, j] <= 0:
                break
            a = min(rest[i, j], upper[c, 0] - size[j], size[i] - lower[c, 0])
            if balance_edges and avg[c, i, j] > 0:
                a = min(
                    a,
                    (load_upper[c, 0] - load[j]) // avg[c, i, j],
                    (load[i] - load_lower[c, 0]) // avg[c, i, j],
                )
            a = int(max(a, 0))
            quota[c, i, j] += a
            size[j] += a
            size[i] -= a
            load[j] += a * avg[c, i, j]
            load[i] -= a * avg[c, i, j]
    level, take = quota_levels(hist, quota)
    there = np.take_along_axis(hist, np.minimum(level, LP_GAIN_LEVELS - 1)[..., None], axis=3)
    fraction = np.where(quota > 0, take / np.maximum(there[..., 0], 1), 0.0)
    return LPQuotas(level, fraction)


def quota_levels(hist: np.ndarray, quota: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gain thresholds that admit the best `quota` proposals of each cell.

    hist int64[..., L]: proposals per cell and gain level (higher is better); quota
    int64[...]. Returns (level, take), int64[...]: admit every proposal above `level` and
    `take` of those at it. Cells with no quota get level L (admit nothing) and take 0.
    """
    levels = hist.shape[-1]
    above = np.cumsum(hist[..., ::-1], axis=-1)[..., ::-1]  # proposals with level >= l
    level = np.full(quota.shape, levels, dtype=np.int64)
    take = np.zeros(quota.shape, dtype=np.int64)
    for cell in zip(*np.nonzero(quota), strict=True):
        q = quota[cell]
        lev = int(np.flatnonzero(above[cell] >= q)[-1])
        level[cell] = lev
        take[cell] = q - (above[cell][lev + 1] if lev + 1 < levels else 0)
    return level, take


def lp_apply(state: LPShard, quotas: LPQuotas, seed: int, round_: int) -> LPShard:
    """Moves the accepted proposals; clears the round's proposal arrays."""
    p = np.flatnonzero(state.target >= 0)
    c, i, j, g = state.classes[p], state.parts[p], state.target[p], state.gain[p]
    level = quotas.level[c, i, j]
    step = ids.combine(np.uint64(seed), np.uint64(round_), _SALT_ACCEPT)
    draw = ids.uniform(ids.combine(step, state.gids()[p]))
    accept = (g > level) | ((g == level) & (draw < quotas.fraction[c, i, j]))
    parts = state.parts.copy()
    parts[p[accept]] = j[accept]
    return dataclasses.replace(state, parts=parts, target=None, gain=None)
