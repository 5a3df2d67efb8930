"""Small global combines of the partition stage: count tables, dicts and folds."""

from __future__ import annotations

from typing import Any

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


class _CombineAll(beam.DoFn):
    """The combine of every value of the side input (the CombineFn's default when none)."""

    def __init__(self, combine_fn: beam.CombineFn):
        self._fn = combine_fn

    def setup(self):
        self._fn.setup()

    def process(self, _, values):
        yield self._fn.apply(values)

    def teardown(self):
        self._fn.teardown()


class CombineAll(beam.PTransform):
    """beam.CombineGlobally(fn) (one value, the default when the input is empty) from 3
    transforms and one stage instead of 13 transforms and three stages: one Impulse whose
    only element reads the values as an iterable side input (streamed, not a list) and
    combines them, with a declared output type, so that Beam infers none from bytecode.

    Pipeline construction costs about 10 ms per transform and the local runner 15-100 ms per
    stage; a pipeline has dozens of global combines of a few values per shard each, which
    need no combiner lifting.
    """

    def __init__(self, fn):
        super().__init__()
        self._fn = beam.CombineFn.maybe_from_callable(fn)

    def expand(self, pcoll):
        return (
            pcoll.pipeline
            | "Once" >> beam.Impulse()
            | "Combine"
            >> beam.ParDo(_CombineAll(self._fn), beam.pvalue.AsIter(pcoll)).with_output_types(Any)
        )
