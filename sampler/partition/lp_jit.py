"""Compiled kernels of label propagation and clustering (sampler/jit.py): counting sorts on
the bounded integer codes that lp's rounds sort, and per-segment passes over them.

numpy sorts a whole type's adjacency (tens of millions of int64 codes at 1M papers) with a
comparison sort whose passes fall out of the CPU caches, so its cost per entry grows with
the graph. These kernels sort by a counting sort on a code of bounded range (one counting
pass and one scatter, whatever the size) and sort only the short segments that remain (a
node's neighbours, a row's labels), which stay in the caches.

Each kernel gives exactly what its numpy twin in label_propagation.py / clustering.py gives
(the same order, the same arrays); tests/test_lp_kernels.py compares them on edge cases.
"""

from __future__ import annotations

import numpy as np

from sampler.jit import njit

_INSERTION_MAX = 24  # segments up to this long are sorted by insertion (in the caches)


@njit
def _stable_sort_segment(minor, order, a, b):
    """Sorts order[a:b] stably by minor[order[k]] (insertion for short segments, else a
    merge sort, which is stable)."""
    n = b - a
    if n < 2:
        return
    if n <= _INSERTION_MAX:
        for i in range(a + 1, b):
            item = order[i]
            value = minor[item]
            j = i - 1
            while j >= a and minor[order[j]] > value:
                order[j + 1] = order[j]
                j -= 1
            order[j + 1] = item
        return
    values = np.empty(n, minor.dtype)
    for i in range(n):
        values[i] = minor[order[a + i]]
    perm = np.argsort(values, kind="mergesort")
    items = order[a:b].copy()
    for i in range(n):
        order[a + i] = items[perm[i]]


@njit
def grouped_order(major, minor, bins, has_minor):
    """np.lexsort((minor, major)) for major in [0, bins): a stable counting sort by major,
    then each run of equal major sorted stably by minor (when has_minor)."""
    n = len(major)
    counts = np.zeros(bins + 1, np.int64)
    for i in range(n):
        counts[major[i] + 1] += 1
    for k in range(bins):
        counts[k + 1] += counts[k]
    order = np.empty(n, np.int64)
    fill = counts[:bins].copy()
    for i in range(n):
        m = major[i]
        order[fill[m]] = i
        fill[m] += 1
    if has_minor:
        for k in range(bins):
            _stable_sort_segment(minor, order, counts[k], counts[k + 1])
    return order


@njit
def segment_part_counts(group, source, parts, num_parts):
    """(group, part, count) of the distinct (group, part) pairs of adjacency entries sorted
    by a non-decreasing `group`, entry k's part parts[source[k]], by (group, part)
    ascending: what np.bincount of group * num_parts + part and its non-zero bins give."""
    n = len(group)
    out_group = np.empty(n, np.int64)
    out_part = np.empty(n, np.int64)
    out_count = np.empty(n, np.int64)
    counts = np.zeros(num_parts, np.int64)
    m = 0
    a = 0
    while a < n:
        b = a
        while b < n and group[b] == group[a]:
            counts[parts[source[b]]] += 1
            b += 1
        for p in range(num_parts):
            if counts[p]:
                out_group[m] = group[a]
                out_part[m] = p
                out_count[m] = counts[p]
                m += 1
                counts[p] = 0
        a = b
    return out_group[:m], out_part[:m], out_count[:m]


@njit
def sum_row_labels(rows, labels, counts, num_rows):
    """(rows, labels, sums): the distinct (row, label) pairs by (row, label) ascending, with
    the sum of `counts` over each (rows in [0, num_rows), labels >= 0)."""
    n = len(rows)
    starts = np.zeros(num_rows + 1, np.int64)
    for i in range(n):
        starts[rows[i] + 1] += 1
    for k in range(num_rows):
        starts[k + 1] += starts[k]
    fill = starts[:num_rows].copy()
    label_of = np.empty(n, np.int64)
    count_of = np.empty(n, np.int64)
    for i in range(n):
        r = rows[i]
        label_of[fill[r]] = labels[i]
        count_of[fill[r]] = counts[i]
        fill[r] += 1
    out_row = np.empty(n, np.int64)
    out_label = np.empty(n, np.int64)
    out_sum = np.empty(n, np.int64)
    m = 0
    for r in range(num_rows):
        a, b = starts[r], starts[r + 1]
        if b - a > _INSERTION_MAX:
            perm = np.argsort(label_of[a:b])
            seg_label = label_of[a:b][perm]
            seg_count = count_of[a:b][perm]
            label_of[a:b] = seg_label
            count_of[a:b] = seg_count
        else:
            for i in range(a + 1, b):
                value, weight = label_of[i], count_of[i]
                j = i - 1
                while j >= a and label_of[j] > value:
                    label_of[j + 1] = label_of[j]
                    count_of[j + 1] = count_of[j]
                    j -= 1
                label_of[j + 1] = value
                count_of[j + 1] = weight
        k = a
        while k < b:
            total = count_of[k]
            j = k + 1
            while j < b and label_of[j] == label_of[k]:
                total += count_of[j]
                j += 1
            out_row[m] = r
            out_label[m] = label_of[k]
            out_sum[m] = total
            m += 1
            k = j
    return out_row[:m], out_label[:m], out_sum[:m]


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py):
    index widths int32 below 2**31 adjacency entries, else int64."""
    one = np.zeros(1, np.int64)
    for has_minor in (True, False):
        grouped_order(one, one, 1, has_minor)
    for small in (np.int32, np.int64):
        segment_part_counts(one.astype(small), one.astype(small), one, 1)
    sum_row_labels(one, one, one, 1)
