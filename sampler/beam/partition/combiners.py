"""Small global combines of the partition stage: count tables, dicts and folds."""

from __future__ import annotations

import apache_beam as beam
import numpy as np


class SumArrays(beam.CombineFn):
    """Sums numpy arrays of one fixed shape (count tables)."""

    def __init__(self, shape: tuple[int, ...]):
        self._shape = shape

    def create_accumulator(self):
        return np.zeros(self._shape, dtype=np.int64)

    def add_input(self, acc, value):
        acc += value
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out += a
        return out

    def extract_output(self, acc):
        return acc


class MergeCounts(beam.CombineFn):
    """Merges {key: count} dicts by summing, returned with sorted keys."""

    def create_accumulator(self):
        return {}

    def add_input(self, acc, value):
        for k, v in value.items():
            acc[k] = acc.get(k, 0) + v
        return acc

    def merge_accumulators(self, accs):
        out = {}
        for a in accs:
            self.add_input(out, a)
        return out

    def extract_output(self, acc):
        return dict(sorted(acc.items()))


class Fold(beam.CombineFn):
    """Folds the values with `add(a, b)` (new objects, inputs untouched); None if none."""

    def __init__(self, add):
        self._add = add

    def create_accumulator(self):
        return None

    def add_input(self, acc, value):
        return value if acc is None else self._add(acc, value)

    def merge_accumulators(self, accs):
        out = None
        for a in accs:
            if a is not None:
                out = self.add_input(out, a)
        return out

    def extract_output(self, acc):
        return acc


def add(a, b):
    return a + b


def add_tuples(a: tuple, b: tuple) -> tuple:
    """Elementwise sum of two tuples of arrays (the label propagation summaries)."""
    return tuple(x + y for x, y in zip(a, b, strict=True))
