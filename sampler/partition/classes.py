"""Balance classes and in-degrees of nodes: the kernels of the partition stage's classes step.

A balance class is (node type, value of the --balance_ntypes feature), or (node type, 0)
when the type has no such feature. The class table is the sorted list of the classes that
occur; a node's class index is its position in that table. The partition methods balance
every class across parts, and --balance_edges also balances in-degree (owned edges).
"""

from __future__ import annotations

import numpy as np


def class_values(features: dict[str, np.ndarray], feature: str | None, n: int) -> np.ndarray:
    """int64 value of the balance feature of each of n nodes (0 without one)."""
    if feature and feature in features:
        return np.asarray(features[feature], dtype=np.int64).reshape(-1)
    return np.zeros(n, dtype=np.int64)


def class_keys(ntype: int, values: np.ndarray) -> list[tuple[int, int]]:
    """The distinct classes of one shard's values, sorted."""
    return [(ntype, int(v)) for v in np.unique(values)]


def class_indices(ntype: int, values: np.ndarray, class_table) -> np.ndarray:
    """int64 index in `class_table` (sorted (type, value) pairs) of each node's class."""
    index = {key: i for i, key in enumerate(class_table)}
    unique, inverse = np.unique(np.asarray(values, np.int64), return_inverse=True)
    table = np.array([index[(ntype, int(v))] for v in unique], dtype=np.int64)
    return table[inverse.reshape(-1)] if len(values) else np.zeros(0, np.int64)


def in_degree(target_rows: list[np.ndarray], n: int) -> np.ndarray:
    """int64 in-degree of n nodes, given the local rows of the targets of their in-edges."""
    degree = np.zeros(n, dtype=np.int64)
    for rows in target_rows:
        degree += np.bincount(rows, minlength=n)
    return degree


def class_part_counts(classes: np.ndarray, parts: np.ndarray) -> dict[tuple[int, int], int]:
    """{(class, part): nodes} of one shard, for the report's balance per class."""
    classes, parts = np.asarray(classes, np.int64), np.asarray(parts, np.int64)
    if len(parts) == 0:
        return {}
    span = int(parts.max()) + 1
    codes, counts = np.unique(classes * span + parts, return_counts=True)  # sorted (c, p)
    return {(int(k // span), int(k % span)): int(n) for k, n in zip(codes, counts, strict=True)}


def class_names(ntypes, node_features, feature: str | None, table) -> list[str]:
    """Readable name of every class of the table: `type`, or `type/feature=value`."""
    names = []
    for t, v in table:
        name = ntypes[t]
        has = feature and feature in node_features[name]
        names.append(f"{name}/{feature}={v}" if has else name)
    return names
