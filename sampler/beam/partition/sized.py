"""A coder for the partition stage's array-holding values that estimates their size cheaply.

Beam samples the size of the elements of every PCollection (the first ten of each bundle,
then fewer): a value with no coder of its own is pickled for that, arrays and all. The
stage's PCollections hold a few dozen large shards each, so nearly every shard was pickled
once more for its size. ArraysCoder pickles a value where it crosses stages, as before, and
estimates its size from the bytes of its arrays.
"""

from __future__ import annotations

import dataclasses

import apache_beam as beam
import numpy as np
from apache_beam.coders import coder_impl

from sampler.beam.packing import packed, unpacked
from sampler.partition.graph import EdgeShard, NodeShard
from sampler.partition.new_ids import EdgesWithEnds

_OVERHEAD = 64  # bytes per value that holds others (an estimate)


def nbytes(value) -> int:
    """About the size of `value` pickled: its arrays' bytes, plus a little per container."""
    if isinstance(value, np.ndarray):
        per_item = 32 if value.dtype == object else value.itemsize  # objects: short bytes
        return value.size * per_item + _OVERHEAD
    if isinstance(value, (bytes, str)):
        return len(value)
    if isinstance(value, dict):
        return _OVERHEAD + sum(nbytes(k) + nbytes(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return _OVERHEAD + sum(nbytes(v) for v in value)
    if dataclasses.is_dataclass(value):
        return _OVERHEAD + sum(nbytes(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 8


class ArraysCoder(beam.coders.Coder):
    """Pickle, with the size estimated by `nbytes` instead of pickling."""

    def encode(self, value) -> bytes:
        return packed(value)

    def decode(self, encoded: bytes):
        return unpacked(encoded)

    def _create_impl(self):
        return coder_impl.CallbackCoderImpl(packed, unpacked, nbytes)

    def is_deterministic(self) -> bool:
        return False


for _type in (NodeShard, EdgeShard, EdgesWithEnds):
    beam.coders.registry.register_coder(_type, ArraysCoder)
