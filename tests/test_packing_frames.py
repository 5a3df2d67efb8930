"""Frames of packed values (sampler.beam.packing.FrameWriter / frames): the `worker`
placement's part files. Checked against the values written, compared by numpy and Arrow."""

from __future__ import annotations

import io

import numpy as np
import pyarrow as pa

from sampler.batches import NodeBatch
from sampler.beam.packing import FrameWriter, frames


def _values():
    ids = np.empty(3, dtype=object)
    ids[:] = [b"p1", b"", b"p\x003"]
    return [
        ("node", "paper"),
        np.arange(7, dtype=np.int64),
        np.zeros(0, np.float32),
        np.arange(30, dtype=np.float32).reshape(5, 6),
        np.arange(20, dtype=np.int32)[::3],  # not contiguous: pickled in band
        (pa.array(["a", None, "ccc"]), {"end": pa.array([1, 2], pa.uint64())}),
        NodeBatch(np.array([3, 1, 2], np.uint64), ids, {"f": np.ones((3, 2), np.float16)}),
        np.arange(5, dtype=np.uint8),  # 5 bytes: the next array starts unaligned unless padded
        np.arange(9, dtype=np.float64),
    ]


def _same(a, b) -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, pa.Array):
        assert a.equals(b)
    elif isinstance(a, (tuple, list)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _same(x, y)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _same(a[k], b[k])
    elif isinstance(a, NodeBatch):
        _same(a.fp, b.fp)
        assert a.ids.tolist() == b.ids.tolist()
        _same(a.features, b.features)
    else:
        assert a == b


def _arrays(value):
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _arrays(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _arrays(v)
    elif isinstance(value, NodeBatch):
        yield value.fp
        yield from value.features.values()


def test_frames_give_back_the_values_written_with_their_arrays_aligned_and_writable():
    out = io.BytesIO()
    writer = FrameWriter(out)
    values = _values()
    for value in values:
        writer.write(value)
    data = np.frombuffer(bytearray(out.getvalue()), np.uint8)
    aligned = np.empty(len(data) + 64, np.uint8)
    start = -aligned.ctypes.data % 64
    buffer = aligned[start : start + len(data)]
    buffer[:] = data
    got = frames(buffer)
    assert len(got) == len(values)
    for a, b in zip(values, got, strict=True):
        _same(a, b)
    for value in got:
        for array in _arrays(value):
            assert array.ctypes.data % 16 == 0 or array.size == 0, array
            assert array.flags.writeable or array.size == 0


def test_arrays_are_views_of_the_file_bytes_not_copies():
    out = io.BytesIO()
    FrameWriter(out).write(np.arange(1000, dtype=np.int64))
    data = np.empty(len(out.getvalue()), np.uint8)
    data[:] = np.frombuffer(out.getvalue(), np.uint8)
    (array,) = frames(data)
    assert np.shares_memory(array, data)
