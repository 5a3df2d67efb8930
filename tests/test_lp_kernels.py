"""The compiled kernels of lp (sampler/partition/lp_jit.py) and of the fingerprint lookups
(lookup_jit.py) against numpy, on edge cases: each kernel must give the very arrays numpy
gives (the partition files stay the same bytes, tests/test_kernel_digests.py), including
the order of ties, which a stable sort keeps and any other sort may not.
"""

from __future__ import annotations

import numpy as np
import pytest

from sampler.partition import label_propagation, lookup_jit, lp_jit
from sampler.partition.graph import NodeIndex


def _column_cases():
    rng = np.random.default_rng(5)
    yield (np.array([3]),)
    yield np.array([2, 2, 2, 2]), np.array([1, 1, 1, 1])  # all ties: input order
    yield np.array([5, 0, 5, 0]), np.array([0, 9, 0, 9]), np.array([1, 1, 0, 0])
    # One long run of equal major (past the insertion sort: the merge sort), many ties.
    n = 300
    yield np.zeros(n, np.int64), rng.integers(0, 4, n), rng.integers(0, 3, n)
    # A major too wide for counting (span >> entries): the code of all columns, no kernel.
    yield rng.integers(0, 1 << 40, 50), rng.integers(0, 3, 50)
    # The adjacency's shape: (local row, neighbour type, neighbour row), skewed degrees.
    local = np.repeat(np.arange(40), rng.integers(0, 60, 40))
    m = len(local)
    yield rng.permutation(local), rng.integers(0, 3, m), rng.integers(0, 30, m)
    yield rng.integers(0, 7, 1000), rng.integers(0, 1 << 20, 1000)  # minor code, wide
    yield (rng.integers(0, 1000, 20),)  # one column, sparse range


@pytest.mark.parametrize("columns", list(_column_cases()))
def test_stable_order_is_lexsort(columns):
    want = np.lexsort(columns[::-1])
    assert np.array_equal(label_propagation.stable_order(*columns), want)


def test_grouped_order_keeps_input_order_of_ties():
    # Equal (major, minor) in a long segment: only a stable sort keeps 0, 2, 4, ... first.
    n = 100
    major = np.zeros(n, np.int64)
    minor = np.arange(n, dtype=np.int64) % 2
    got = lp_jit.grouped_order(major, minor, 1, True)
    assert got.tolist() == list(range(0, n, 2)) + list(range(1, n, 2))
    assert lp_jit.grouped_order(major[:0], minor[:0], 1, True).tolist() == []
    # Without the minor key, by major alone; empty bins are skipped.
    got = lp_jit.grouped_order(np.array([4, 0, 4, 2]), np.zeros(4, np.int64), 6, False)
    assert got.tolist() == [1, 3, 0, 2]


def _part_counts_numpy(group, source, parts, num_parts):
    code = group.astype(np.int64) * num_parts + parts[source]
    counts = np.bincount(code, minlength=(int(group.max()) + 1 if len(group) else 0) * num_parts)
    nonzero = np.flatnonzero(counts)
    pair, part = np.divmod(nonzero, num_parts)
    return pair, part, counts[nonzero]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_segment_part_counts_is_bincount(seed):
    rng = np.random.default_rng(seed)
    n = [0, 1, 500][seed]
    group = np.sort(rng.integers(0, max(n // 3, 1), n)).astype(np.int32)
    order = rng.permutation(n)
    parts = rng.integers(0, 5, n)
    got = lp_jit.segment_part_counts(group, order, parts, 5)
    want = _part_counts_numpy(group, order, parts, 5)
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a, b)


def test_segment_part_counts_by_hand():
    group = np.array([0, 0, 0, 3, 3])
    order = np.array([4, 3, 2, 1, 0])
    parts = np.array([1, 0, 1, 2, 2])  # entries 4,3,2 -> parts 2,2,1; entries 1,0 -> 0,1
    got = [a.tolist() for a in lp_jit.segment_part_counts(group, order, parts, 3)]
    assert got == [[0, 0, 3, 3], [1, 2, 0, 1], [1, 2, 1, 1]]


def _row_label_cases():
    rng = np.random.default_rng(9)
    yield np.array([0]), np.array([7]), np.array([2]), 1
    yield np.array([2, 2, 0, 2]), np.array([5, 5, 1, 4]), np.array([1, 3, 1, 1]), 4
    # One row with many labels (past the insertion sort), repeated labels to sum.
    n = 200
    yield np.full(n, 3), rng.integers(0, 40, n), rng.integers(1, 9, n), 5
    # Sorted pieces, as cluster_propose gets them from several shards.
    rows, labels = [], []
    for _ in range(3):
        r, lab = rng.integers(0, 50, 400), rng.integers(0, 1 << 33, 400)
        o = np.lexsort((lab, r))
        rows.append(r[o])
        labels.append(lab[o])
    yield np.concatenate(rows), np.concatenate(labels), rng.integers(1, 4, 1200), 50


@pytest.mark.parametrize("case", list(_row_label_cases()))
def test_sum_row_labels_is_numpys_sum_per_pair(case):
    rows, labels, counts, num_rows = case
    got = lp_jit.sum_row_labels(rows, labels, counts, num_rows)
    order = np.lexsort((labels, rows))
    a, b, w = rows[order], labels[order], counts[order]
    first = np.flatnonzero(np.r_[True, (a[1:] != a[:-1]) | (b[1:] != b[:-1])])
    want = a[first], b[first], np.add.reduceat(w, first)
    assert len(got) == len(want) == 3
    for a, b in zip(got, want, strict=True):
        assert a.dtype == b.dtype == np.int64
        assert np.array_equal(a, b)


def test_sum_row_labels_by_hand():
    got = lp_jit.sum_row_labels(
        np.array([1, 0, 1, 1]), np.array([9, 4, 2, 9]), np.array([1, 2, 3, 4]), 3
    )
    assert [a.tolist() for a in got] == [[0, 1, 1], [4, 2, 9], [2, 3, 5]]


def _lookup_cases():
    rng = np.random.default_rng(3)
    even = np.sort(rng.integers(0, 1 << 63, 5000, dtype=np.uint64) * np.uint64(2))
    queries = np.concatenate([even[::7], rng.integers(0, 1 << 63, 3000, dtype=np.uint64), even[:1]])
    yield even, queries  # members, non-members, the first
    # Uneven: every fingerprint in a few buckets (binary search), duplicates, the extremes.
    crowded = np.sort(np.r_[np.arange(2000, dtype=np.uint64), np.uint64(2**64 - 1), 5, 5])
    extremes = np.array([0, 1, 4, 5, 6, 1999, 2000, 2**63, 2**64 - 1], np.uint64)
    yield crowded, np.concatenate([extremes, rng.integers(0, 3000, 500, dtype=np.uint64)])
    yield np.array([7, 9], np.uint64), np.array([0, 7, 8, 9, 10, 2**64 - 1], np.uint64)
    yield even, np.zeros(0, np.uint64)


@pytest.mark.parametrize("case", list(_lookup_cases()))
def test_fingerprint_positions_are_searchsorted(case):
    table, queries = case
    want = np.searchsorted(table, queries)
    bits = min(max(int(len(table) - 1).bit_length(), 1), 32)
    for b in sorted({1, bits, bits + 3}):  # few, about one per entry, more
        assert np.array_equal(lookup_jit.positions(table, queries, b), want)


def test_node_index_lookup_compiled():
    fp = np.sort(np.random.default_rng(1).integers(0, 1 << 63, 300, dtype=np.uint64))
    index = NodeIndex(0, 0, fp, 100)
    queries = np.concatenate([fp[::3], fp[:5] + np.uint64(1)])
    got = index.lookup(queries)
    pos = np.minimum(np.searchsorted(fp, queries), len(fp) - 1)
    assert np.array_equal(got[0], 100 + pos) and np.array_equal(got[1], fp[pos] == queries)
    assert got[1].sum() == 100
    empty = NodeIndex(0, 0, fp[:0], 0).lookup(queries)
    assert not empty[1].any()
