"""SparseCounts (sampler/partition/sparse.py): the shards' histograms, summed sparsely."""

from __future__ import annotations

import numpy as np
import pytest

from sampler.partition.sparse import SparseCounts


def test_sums_of_sparse_counts_expand_to_the_dense_sums():
    rng = np.random.default_rng(0)
    shape = (3, 4, 4, 8)
    dense = np.zeros(shape, np.int64)
    pieces = []
    for _ in range(5):
        index = tuple(rng.integers(0, n, 50) for n in shape)
        weights = rng.integers(0, 9, 50)
        np.add.at(dense, index, weights)
        pieces.append(SparseCounts.of(shape, index, weights))
    total = sum(pieces)
    np.testing.assert_array_equal(total.dense(), dense)
    assert np.all(np.diff(total.codes) > 0)  # cells stay unique and sorted
    touched = np.unique(np.concatenate([p.codes for p in pieces]))
    np.testing.assert_array_equal(total.codes, touched)  # only the touched cells are kept


def test_empty_counts_and_mismatched_shapes():
    empty = SparseCounts.of((2, 3), (np.zeros(0, np.int64), np.zeros(0, np.int64)))
    assert empty.dense().shape == (2, 3) and not empty.dense().any()
    one = SparseCounts.of((2, 3), (np.array([1]), np.array([2])))
    assert (empty + one).dense()[1, 2] == 1
    with pytest.raises(ValueError, match="shape"):
        _ = one + SparseCounts.of((3, 2), (np.array([0]), np.array([0])))
