"""--part_method random per node shard: the counts a shard reports and the parts it deals.

Nodes are dealt by *group*: a balance class, or with --balance_edges a (class, in-degree
bucket) pair, encoded as class * (MAX_DEGREE_BUCKET + 1) + bucket so that the groups of a
class are contiguous. Every group is dealt round-robin in a seeded random order
(assign.random_parts); a node's position in that order needs the sizes of its group and of
the earlier groups of its class, and the nodes of its group in earlier shards of its type:
a small global table of counts per (group, type, shard).
"""

from __future__ import annotations

import numpy as np

from sampler import ids
from sampler.partition import assign
from sampler.partition.layout import rank_within

BUCKETS = assign.MAX_DEGREE_BUCKET + 1  # groups per class


def deal_groups(classes: np.ndarray, in_degree: np.ndarray, balance_edges: bool) -> np.ndarray:
    """int64 group of each node."""
    if balance_edges:
        return classes * BUCKETS + assign.degree_bucket(in_degree)
    return classes * BUCKETS


def group_counts(groups: np.ndarray, ntype: int, shard: int) -> dict[tuple[int, int, int], int]:
    """{(group, type, shard): nodes} of one shard."""
    g, n = np.unique(groups, return_counts=True)
    return {(int(k), ntype, shard): int(c) for k, c in zip(g, n, strict=True)}


def deal_parts(
    groups: np.ndarray,
    classes: np.ndarray,
    ntype: int,
    shard: int,
    counts: dict[tuple[int, int, int], int],
    seed: int,
    num_parts: int,
) -> np.ndarray:
    """The part of every node of one shard, given the global `group_counts` table."""
    before = {}  # group -> nodes of the group in earlier shards of this type
    size = {}  # group -> nodes
    for (g, t, s), n in counts.items():
        size[g] = size.get(g, 0) + n
        if t == ntype and s < shard:
            before[g] = before.get(g, 0) + n
    offset = {}  # group -> position of its first node within its class
    for g in sorted(size):
        first = (g // BUCKETS) * BUCKETS
        offset[g] = sum(size[h] for h in size if first <= h < g)
    unique, inverse = np.unique(groups, return_inverse=True)
    inverse = inverse.reshape(-1)
    rank = rank_within(inverse, len(groups) + 1)
    g_list = unique.tolist()  # per distinct group, then gathered per node

    def per_node(table: dict, keys: list, of_node: np.ndarray, dtype=np.int64) -> np.ndarray:
        return np.array([table.get(k, 0) for k in keys], dtype=dtype)[of_node]

    rank = rank + per_node(before, g_list, inverse)
    first, start = _type_runs(counts, size)
    c_unique, c_inverse = np.unique(classes, return_inverse=True)
    c_list, c_inverse = c_unique.tolist(), c_inverse.reshape(-1)
    first_class = per_node(first, c_list, c_inverse, np.uint64)
    rotation = (ids.combine(np.uint64(seed), first_class) % np.uint64(num_parts)).astype(
        np.int64
    ) + per_node(start, c_list, c_inverse)
    return assign.random_parts(
        seed,
        groups.astype(np.uint64),
        rank,
        per_node(size, g_list, inverse),
        per_node(offset, g_list, inverse),
        rotation,
        num_parts,
    )


def _type_runs(counts, size) -> tuple[dict[int, int], dict[int, int]]:
    """Per class: the first class of its type, and the nodes of earlier classes of its type.

    The classes of a type (its --balance_ntypes values) are dealt as one run: a class starts
    where the previous one of its type stopped, after one seeded rotation per type. Each class
    gets floor or ceil(n / parts) nodes per part, and so does the type as a whole. With one
    class per type this is the class's own seeded rotation.
    """
    class_type = {g // BUCKETS: t for (g, t, _) in counts}
    class_size: dict[int, int] = {}
    for g, n in size.items():
        class_size[g // BUCKETS] = class_size.get(g // BUCKETS, 0) + n
    first, start, running, type_first = {}, {}, {}, {}
    for c in sorted(class_size):
        t = class_type[c]
        first[c] = type_first.setdefault(t, c)
        start[c] = running.get(t, 0)
        running[t] = start[c] + class_size[c]
    return first, start
