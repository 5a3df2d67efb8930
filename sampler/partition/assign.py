"""Partition methods as numpy kernels: random, metis and balanced label propagation (lp).

Balance classes. Nodes are balanced per *class*: (node type, value of the
--balance_ntypes feature), or just the node type when the type lacks that feature, as
DGL's `balance_ntypes` does. Every method keeps every class balanced over the parts.
With --balance_edges, the in-degree (edges a node owns) is balanced too.

Everything random is a counter-based hash of (--seed, what, node), so results do not
depend on workers, bundles or input sharding.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sampler import ids
from sampler.errors import UserError
from sampler.partition.sparse import SparseCounts

# Degree buckets used by `random` with --balance_edges: floor(log2(in-degree + 1)).
MAX_DEGREE_BUCKET = 40

# metis runs on one worker: past this many (directed, deduplicated, both-way) adjacency
# entries it refuses. pymetis needs about 40 bytes per entry (CSR, weights, METIS's own
# coarsening copies), so 400M entries is ~16 GB: a 200M-edge graph on a 24 GB worker.
METIS_MAX_ADJACENCY = 400_000_000
# METIS bounds only the largest part (ufactor ~1.03): a post-pass then moves the fewest nodes
# that bring every class within (1 +- this) of its mean per part (or floor/ceil(n / parts)).
METIS_IMBALANCE = 0.03

_SALT_RANDOM = np.uint64(0x52414E444F4D)  # "RANDOM"
_SALT_MOVE = np.uint64(0x4C504D4F5645)  # "LPMOVE"
_SALT_TIE = np.uint64(0x4C5054494553)  # "LPTIES"
_SALT_ACCEPT = np.uint64(0x4C5041434350)  # "LPACCP"


# --------------------------------------------------------------------------- random


def feistel_permute(x: np.ndarray, n: int, key: np.uint64) -> np.ndarray:
    """A keyed pseudo-random permutation of [0, n), applied to x (values in [0, n)).

    A 4-round Feistel network on the smallest even number of bits that covers n, with
    cycle walking: values that land outside [0, n) are permuted again until they are in.
    """
    x = np.asarray(x, dtype=np.uint64)
    if n <= 1:
        return x.copy()
    half = max(1, math.ceil(math.log2(n) / 2))
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)
    round_keys = [ids.combine(np.uint64(key), np.uint64(r)) for r in range(4)]

    def rounds(v: np.ndarray) -> np.ndarray:
        left, right = v >> shift, v & mask
        for k in round_keys:
            left, right = right, left ^ (ids.combine(k, right) & mask)
        return (left << shift) | right

    y = rounds(x)
    bad = np.flatnonzero(y >= np.uint64(n))
    while len(bad):
        y[bad] = rounds(y[bad])
        bad = bad[y[bad] >= np.uint64(n)]
    return y


def random_parts(
    seed: int,
    group_key: np.ndarray,
    rank: np.ndarray,
    group_size: np.ndarray,
    group_offset: np.ndarray,
    class_rotation: np.ndarray,
    num_parts: int,
) -> np.ndarray:
    """Exactly balanced random parts for the nodes of one shard.

    Nodes are dealt round-robin over the parts in a random order of their class. A class
    is cut into groups (degree buckets with --balance_edges, else one group): the order is
    group by group, each group shuffled by a keyed permutation of the node's `rank` within
    its group; `group_offset` is the group's first position within its class. Every class
    then has floor or ceil(n / num_parts) nodes in each part, and heavy and light nodes are
    spread alike. `class_rotation` picks which parts get the extra nodes.
    """
    position = np.empty(len(rank), dtype=np.int64)
    for key in np.unique(group_key):
        rows = np.flatnonzero(group_key == key)
        size = int(group_size[rows[0]])
        perm = feistel_permute(rank[rows], size, ids.combine(np.uint64(seed), _SALT_RANDOM, key))
        position[rows] = group_offset[rows] + perm.astype(np.int64)
    return (position + class_rotation) % num_parts


def degree_bucket(in_degree: np.ndarray) -> np.ndarray:
    return np.minimum(np.floor(np.log2(in_degree + 1.0)), MAX_DEGREE_BUCKET).astype(np.int64)


# --------------------------------------------------------------------------- metis


def metis_parts(
    num_nodes: int,
    src: np.ndarray,
    dst: np.ndarray,
    classes: np.ndarray,
    num_classes: int,
    num_parts: int,
    seed: int,
    balance_edges: bool,
    max_adjacency: int = METIS_MAX_ADJACENCY,
    tolerance: float | None = METIS_IMBALANCE,
) -> np.ndarray:
    """METIS k-way min-cut parts over the whole graph, as DGL's metis_partition_assignment.

    The graph is made symmetric without self-loops or duplicates. Vertex weights: one
    constraint per balance class (a one-hot column), plus, with balance_edges, one per class
    holding the node's in-degree (DGL's multi-constraint weights). METIS only bounds the
    largest part, so `rebalance_parts` then brings every class within `tolerance` of its
    mean in both directions (None: METIS's parts as they are, like DGL).
    """
    import pymetis  # noqa: PLC0415 - only the metis method needs it

    if num_parts == 1:
        return np.zeros(num_nodes, dtype=np.int64)
    in_degree = np.bincount(dst, minlength=num_nodes).astype(np.int64)
    xadj, v = symmetric_csr(num_nodes, src, dst, max_adjacency)
    columns = []
    if num_classes > 1 or balance_edges:
        onehot = np.zeros((num_nodes, num_classes), dtype=np.int64)
        onehot[np.arange(num_nodes), classes] = 1
        columns.append(onehot)
        if balance_edges:
            columns.append(onehot * in_degree[:, None])
    vweights = np.concatenate(columns, axis=1).reshape(-1) if columns else None
    options = pymetis.Options(seed=int(seed) % (2**31))
    result = pymetis.part_graph(
        num_parts,
        pymetis.CSRAdjacency(xadj, v),
        vweights=vweights,
        recursive=False,
        options=options,
    )
    parts = np.asarray(result.vertex_part, dtype=np.int64)
    if tolerance is None:
        return parts
    load = in_degree if balance_edges else None
    return rebalance_parts(parts, classes, num_classes, num_parts, xadj, v, tolerance, load)


def symmetric_csr(
    num_nodes: int, src: np.ndarray, dst: np.ndarray, max_adjacency: int = METIS_MAX_ADJACENCY
) -> tuple[np.ndarray, np.ndarray]:
    """(xadj int64[num_nodes + 1], adjncy int64[...]): the neighbours of node i, both edge
    directions, without self-loops or duplicates, sorted, are adjncy[xadj[i]:xadj[i + 1]].

    Refuses (UserError) past `max_adjacency` entries, before the costly deduplication.
    """
    u = np.concatenate([src, dst]).astype(np.int64)
    v = np.concatenate([dst, src]).astype(np.int64)
    keep = u != v
    u, v = u[keep], v[keep]
    if len(u) > max_adjacency:
        raise UserError(
            f"--part_method metis: the graph has {len(u):,} adjacency entries (both directions), "
            f"more than the {max_adjacency:,} one worker can partition (--metis_max_adjacency); "
            "use --part_method lp, which scales out"
        )
    key = np.unique(u * np.int64(num_nodes) + v)
    u, v = key // num_nodes, key % num_nodes
    del key
    xadj = np.zeros(num_nodes + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=num_nodes), out=xadj[1:])
    return xadj, v


def class_bounds(
    class_sizes: np.ndarray, num_parts: int, tolerance: float
) -> tuple[np.ndarray, np.ndarray]:
    """(lower, upper) int64[C]: the fewest and most nodes of each class a part may hold.

    Within (1 +- tolerance) of the class mean, widened to floor/ceil(n / num_parts) so that
    a small class always has a feasible spread (sum(lower) <= n <= sum(upper)).
    """
    sizes = np.asarray(class_sizes, dtype=np.int64)
    mean = sizes / num_parts
    eps = 1e-9  # 100 * 0.97 is 97.00000000000001 in floating point
    lower = np.minimum(np.ceil(mean * (1 - tolerance) - eps).astype(np.int64), sizes // num_parts)
    upper = np.maximum(
        np.floor(mean * (1 + tolerance) + eps).astype(np.int64), -(-sizes // num_parts)
    )
    return lower, upper


def rebalance_parts(
    parts: np.ndarray,
    classes: np.ndarray,
    num_classes: int,
    num_parts: int,
    xadj: np.ndarray,
    adjncy: np.ndarray,
    tolerance: float,
    in_degree: np.ndarray | None = None,
) -> np.ndarray:
    """Moves the fewest nodes that bring every class within `class_bounds` in every part.

    parts int64[N] (part per node), classes int64[N] (balance class per node), (xadj,
    adjncy) the symmetric CSR of `symmetric_csr`. Returns the new parts (a copy).

    A class with E nodes over its upper bounds (summed over parts) and D missing under its
    lower bounds needs max(E, D) moves, and exactly that many are made: first from parts
    over the bound into parts under it, then the rest of the excess into parts with room,
    or the rest of the deficit from parts with nodes to spare. Among the allowed (node,
    target) moves the largest gain (neighbours in the target part - neighbours in its own
    part, i.e. the smallest cut increase) goes first; ties by node id, then target part.
    Gains are counted once per class and step, against the parts as they are then.

    in_degree int64[N] (the edges a node owns, given with --balance_edges): moves also keep
    every part's total in-degree load within the envelope it had before (the old min and
    max, widened to the mean +- tolerance), so edge balance gets no worse. Node balance comes
    first: when no allowed move fits that envelope, it is dropped for the rest of that step.
    """
    parts = np.asarray(parts, dtype=np.int64).copy()
    classes = np.asarray(classes, dtype=np.int64)
    counts = np.bincount(classes * num_parts + parts, minlength=num_classes * num_parts)
    counts = counts.reshape(num_classes, num_parts)
    lower, upper = class_bounds(counts.sum(axis=1), num_parts, tolerance)
    off = ((counts > upper[:, None]) | (counts < lower[:, None])).any(axis=1)
    if not off.any():
        return parts
    loads = _LoadEnvelope.of(parts, num_parts, in_degree, tolerance)
    order = np.argsort(classes, kind="stable")  # node ids grouped by class, ascending
    starts = np.searchsorted(classes[order], np.arange(num_classes + 1))
    for c in np.flatnonzero(off):
        nodes = order[starts[c] : starts[c + 1]]
        _rebalance_class(parts, nodes, int(lower[c]), int(upper[c]), num_parts, xadj, adjncy, loads)
    return parts


@dataclasses.dataclass
class _LoadEnvelope:
    """In-degree load per part (float64[P]) kept within [low, high]; `degree` int64[N]."""

    degree: np.ndarray | None
    load: np.ndarray
    low: float
    high: float

    @staticmethod
    def of(parts, num_parts, in_degree, tolerance) -> _LoadEnvelope:
        if in_degree is None:
            return _LoadEnvelope(None, np.zeros(num_parts), -np.inf, np.inf)
        load = np.bincount(parts, weights=in_degree, minlength=num_parts)
        mean = load.sum() / num_parts
        low = min(load.min(), mean * (1 - tolerance))
        high = max(load.max(), mean * (1 + tolerance))
        return _LoadEnvelope(np.asarray(in_degree, dtype=np.int64), load, low, high)


def _rebalance_class(parts, nodes, lower, upper, num_parts, xadj, adjncy, loads) -> None:
    """Moves nodes (int64[n], one class) in `parts` until every part holds lower..upper."""
    relaxed = dataclasses.replace(loads, low=-np.inf, high=np.inf)
    steps = (
        lambda cnt: (np.maximum(cnt - upper, 0), np.maximum(lower - cnt, 0)),  # over -> under
        lambda cnt: (np.maximum(cnt - upper, 0), np.maximum(upper - cnt, 0)),  # over -> room
        lambda cnt: (np.maximum(cnt - lower, 0), np.maximum(lower - cnt, 0)),  # spare -> under
    )
    for step in steps:
        send, recv = step(np.bincount(parts[nodes], minlength=num_parts))
        if not send.any() or not recv.any():
            continue
        cand = nodes[send[parts[nodes]] > 0]
        gain = _gains(cand, parts, num_parts, xadj, adjncy)
        done = _greedy_moves(parts, cand, gain, send, recv, loads)
        if not done:  # node balance first: drop the envelope (relaxed shares loads.load)
            _greedy_moves(parts, cand, gain, send, recv, relaxed)


def _gains(nodes, parts, num_parts, xadj, adjncy) -> np.ndarray:
    """int64[len(nodes), P]: neighbours in part p minus neighbours in the node's own part."""
    degree = xadj[nodes + 1] - xadj[nodes]
    row = np.repeat(np.arange(len(nodes)), degree)
    first = np.repeat(xadj[nodes] - (np.cumsum(degree) - degree), degree)
    neighbours = adjncy[np.arange(len(row)) + first]
    counts = np.bincount(row * num_parts + parts[neighbours], minlength=len(nodes) * num_parts)
    counts = counts.reshape(len(nodes), num_parts)
    return counts - counts[np.arange(len(nodes)), parts[nodes]][:, None]


def _greedy_moves(parts, cand, gain, send, recv, loads) -> bool:
    """Moves candidates (int64[m]; gain int64[m, P]) out of parts with send[p] > 0 into
    parts with recv[p] > 0, best gain first, until either side is used up. Updates parts,
    send, recv and loads.load in place; False if stopped early by the load envelope.

    Rounds: each unmoved candidate proposes its best allowed target; proposals are ranked
    by (gain desc, candidate position) and taken while the ones ranked before them from
    the same source, and into the same target, stay within send, recv and the envelope.
    The best proposal is always taken, so every round moves at least one node.
    """
    num_parts = len(send)
    home = parts[cand]
    moved = np.zeros(len(cand), dtype=bool)
    floor = np.iinfo(np.int64).min
    while send.any() and recv.any():
        allowed = (~moved & (send[home] > 0))[:, None] & (recv > 0)[None, :]
        allowed &= home[:, None] != np.arange(num_parts)[None, :]
        if loads.degree is not None:
            deg = loads.degree[cand]
            allowed &= (deg[:, None] <= loads.high - loads.load[None, :]) & (
                deg <= loads.load[home] - loads.low
            )[:, None]
        target = np.argmax(np.where(allowed, gain, floor), axis=1)
        idx = np.flatnonzero(allowed[np.arange(len(cand)), target])
        if len(idx) == 0:
            return False
        idx = idx[np.lexsort((idx, -gain[idx, target[idx]]))]
        src, dst = home[idx], target[idx]
        take = (_group_cumsum(src, None) <= send[src]) & (_group_cumsum(dst, None) <= recv[dst])
        if loads.degree is not None:
            deg = loads.degree[cand[idx]]
            take &= _group_cumsum(dst, deg) <= loads.high - loads.load[dst]
            take &= _group_cumsum(src, deg) <= loads.load[src] - loads.low
            np.add.at(loads.load, dst[take], deg[take])
            np.subtract.at(loads.load, src[take], deg[take])
        idx, src, dst = idx[take], src[take], dst[take]
        moved[idx] = True
        parts[cand[idx]] = dst
        send -= np.bincount(src, minlength=num_parts)
        recv -= np.bincount(dst, minlength=num_parts)
    return True


def _group_cumsum(groups: np.ndarray, values: np.ndarray | None) -> np.ndarray:
    """For each position, the sum of values (1 if None) over it and the earlier positions
    of its group (int64[len(groups)])."""
    values = np.ones(len(groups), np.int64) if values is None else values.astype(np.int64)
    order = np.argsort(groups, kind="stable")
    sums = np.cumsum(values[order])
    sorted_groups = groups[order]
    first = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    before = np.repeat(sums[first] - values[order][first], np.diff(np.r_[first, len(groups)]))
    out = np.empty(len(groups), dtype=np.int64)
    out[order] = sums - before
    return out


# --------------------------------------------------------------------------- label propagation

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

    def gids(self) -> np.ndarray:
        return (self.gid_start + np.arange(len(self.parts))).astype(np.uint64)


def build_lp_adjacency(
    rows: int, local: np.ndarray, nbr_key: np.ndarray, nbr_row: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSR (offsets, nbr_key, nbr_row) of a shard from (local row, neighbour) pairs."""
    order = np.lexsort((nbr_row, nbr_key, local))
    offsets = np.zeros(rows + 1, dtype=np.int64)
    np.cumsum(np.bincount(local, minlength=rows), out=offsets[1:])
    return offsets, nbr_key[order].astype(np.int64), nbr_row[order].astype(np.int64)


def lp_messages(state: LPShard, num_parts: int) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """[(neighbour shard key, rows, counts[rows, part])]: the labels this shard's nodes
    show to each neighbour shard, summed per (neighbour row, part)."""
    degrees = np.diff(state.offsets)
    sender_part = np.repeat(state.parts, degrees)
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
    counts = np.zeros(n * num_parts, dtype=np.float64)
    for rows, part_count in messages:
        np.add.at(counts, rows * num_parts + part_count[:, 0], part_count[:, 1])
    counts = counts.reshape(n, num_parts)
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
