"""Count histograms kept sparse: a shard's proposals fill few cells of [classes, parts,
parts, gain levels], which dense would be parts^2 x 64 cells per class and per shard."""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class SparseCounts:
    """Counts over the cells of a dense array of `shape`: sorted unique flat cell indices
    and their counts. `a + b` merges two (summing shared cells); `dense()` expands."""

    shape: tuple[int, ...]
    codes: np.ndarray  # int64 sorted unique flat indices into `shape`
    counts: np.ndarray  # int64

    @classmethod
    def of(cls, shape, index: tuple[np.ndarray, ...], weights=None) -> SparseCounts:
        """Counts of the cells `index` (one array per axis), each weighted (default 1)."""
        shape = tuple(int(n) for n in shape)
        codes = np.ravel_multi_index(tuple(np.asarray(i, np.int64) for i in index), shape)
        weights = np.ones(len(codes), np.int64) if weights is None else np.asarray(weights)
        return cls._reduced(shape, np.asarray(codes, np.int64), weights.astype(np.int64))

    @classmethod
    def _reduced(cls, shape, codes: np.ndarray, counts: np.ndarray) -> SparseCounts:
        unique, inverse = np.unique(codes, return_inverse=True)
        sums = np.zeros(len(unique), np.int64)
        np.add.at(sums, inverse, counts)
        return cls(shape, unique.astype(np.int64), sums)

    def __add__(self, other):
        if isinstance(other, int) and other == 0:  # sum() starts from 0
            return self
        if other.shape != self.shape:
            raise ValueError(f"cannot add counts of shape {other.shape} to {self.shape}")
        return SparseCounts._reduced(
            self.shape,
            np.concatenate([self.codes, other.codes]),
            np.concatenate([self.counts, other.counts]),
        )

    __radd__ = __add__

    def dense(self) -> np.ndarray:
        out = np.zeros(int(np.prod(self.shape)), np.int64)
        out[self.codes] = self.counts
        return out.reshape(self.shape)
