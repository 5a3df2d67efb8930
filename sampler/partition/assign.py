"""Partition methods as numpy kernels: random and metis (label propagation: label_propagation.py).

Balance classes. Nodes are balanced per *class*: (node type, value of the
--balance_ntypes feature), or just the node type when the type lacks that feature, as
DGL's `balance_ntypes` does. Every method keeps every class balanced over the parts.
With --balance_edges, the in-degree (edges a node owns) is balanced too.

Everything random is a counter-based hash of (--seed, what, node), so results do not
depend on workers, bundles or input sharding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import tempfile

import numpy as np

from sampler import ids
from sampler.errors import UserError

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
    with _c_output() as said:
        result = pymetis.part_graph(
            num_parts,
            pymetis.CSRAdjacency(xadj, v),
            vweights=vweights,
            recursive=False,
            options=options,
        )
    if any(m in said[0] for m in METIS_EMPTY_PART_MESSAGES):
        raise UserError(
            f"--num_parts {num_parts}: METIS cannot split this graph ({num_nodes} nodes, "
            f"{num_classes} balance classes) into {num_parts} parts (it reports 'Cannot bisect "
            "a graph with 0 vertices'); use fewer parts, or --part_method lp or random"
        )
    if said[0].strip():
        sys.stderr.write(said[0])
    parts = np.asarray(result.vertex_part, dtype=np.int64)
    if tolerance is None:
        return parts
    load = in_degree if balance_edges else None
    return rebalance_parts(parts, classes, num_classes, num_parts, xadj, v, tolerance, load)


METIS_EMPTY_PART_MESSAGES = ("Cannot bisect a graph with 0 vertices", "too many parts")


@contextlib.contextmanager
def _c_output():
    """Captures what C code writes to file descriptors 1 and 2 (METIS prints there): yields a
    one-item list that holds the text once the block is left."""
    said = [""]
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with tempfile.TemporaryFile() as capture:
        try:
            os.dup2(capture.fileno(), 1)
            os.dup2(capture.fileno(), 2)
            yield said
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            capture.seek(0)
            said[0] = capture.read().decode("utf-8", "replace")


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
