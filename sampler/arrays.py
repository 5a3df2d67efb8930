"""Small numpy helpers used on hot paths.

NumPy 2's `np.unique` hashes, and on millions of distinct uint64 values it is
about 100x slower than sorting; these helpers sort instead.
"""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray, kind: str | None = None) -> np.ndarray:
    """np.unique(values) by sorting (`kind`: np.sort's; "stable" for nearly sorted values)."""
    out = np.sort(values, kind=kind)
    if len(out) < 2:
        return out
    keep = np.empty(len(out), dtype=bool)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


# Above this many possible values a bitmap costs more memory than it saves time (no kernel
# takes a bitmap by this limit any more: sample_jit.unique_parts chooses per sample; the
# records' digests, tests/test_kernel_digests.py, are checked with it at 0 too).
_BITMAP_LIMIT = 1 << 27


def sorted_unique_index(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_index=True) (first occurrences) by a stable sort."""
    order = np.argsort(values, kind="stable")
    out = values[order]
    keep = np.ones(len(out), dtype=bool)
    if len(out) > 1:
        np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep], order[keep]


def expand_ranges(start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row index, position) for every position in [start, start + length) of every row."""
    total = int(length.sum())
    rows = np.repeat(np.arange(len(start)), length)
    if total == 0:
        return rows, np.zeros(0, np.int64)
    first = np.cumsum(length) - length
    within = np.arange(total) - np.repeat(first, length)
    return rows, np.repeat(start, length) + within


def lexsort_two(minor: np.ndarray, major: np.ndarray) -> np.ndarray:
    """np.lexsort((minor, major)): the order by `major`, ties by `minor`, then input order.

    One stable argsort of `major` (lexsort's indirect passes over every key are several times
    slower on tens of millions of rows), then a lexsort of only the rows whose `major` repeats.
    """
    order = np.argsort(major, kind="stable")
    if len(order) < 2:
        return order
    ranked = major[order]
    repeat = ranked[1:] == ranked[:-1]
    if not repeat.any():
        return order
    in_run = np.zeros(len(order), dtype=bool)
    in_run[1:] |= repeat
    in_run[:-1] |= repeat
    rows = np.flatnonzero(in_run)
    tied = order[rows]  # runs of equal `major`, each in input order
    order[rows] = tied[np.lexsort((minor[tied], ranked[rows]))]
    return order


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a`. A graph's arrays go to the compiled kernels read-only whether
    they were built here or mapped from a snapshot (read-only): numba compiles a kernel once
    per argument type, and read-only is part of the type."""
    view = a.view()
    view.flags.writeable = False
    return view
