"""Values pickled once for their trip through the runner, unpickled by the step that gets them.

Only values that this project's own steps made cross here, between the stages of one
pipeline: Beam's default coder pickles the same values anyway when they have no coder of
their own. Packing them once, where they are made, lets them cross the local runner's
Flatten stages and shuffles as bytes, which it copies without unpickling them. No input
file is ever unpickled: tests/test_bad_records.py allows `pickle` to load only here.
"""

from __future__ import annotations

import pickle
import struct

import numpy as np


def packed(value) -> bytes:
    """`value` as bytes, for `unpacked` in a later step of the same pipeline."""
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def unpacked(data: bytes):
    """The value `packed` made `data` from."""
    return pickle.loads(data)


_ALIGN = 64  # each array's bytes start at a multiple of this in a frame (numba, Arrow)
_COUNT = struct.Struct("<QQ")  # bytes of the pickle, number of buffers
_SIZE = struct.Struct("<Q")


class FrameWriter:
    """Writes values packed as frames of a file, read back by `frames`: each value's pickle
    with its arrays' memory out of band (pickle protocol 5), each array written as it is
    (never copied into the pickle) at an offset aligned to 64 bytes."""

    def __init__(self, stream):
        self._stream = stream
        self._at = 0  # bytes written

    def _write(self, data) -> None:
        self._stream.write(data)
        self._at += memoryview(data).nbytes

    def write(self, value) -> None:
        buffers: list[pickle.PickleBuffer] = []
        data = pickle.dumps(value, 5, buffer_callback=buffers.append)
        raws = [buffer.raw() for buffer in buffers]
        sizes = b"".join(_SIZE.pack(raw.nbytes) for raw in raws)
        header = _COUNT.pack(len(data), len(raws)) + sizes
        self._write(_SIZE.pack(len(header)) + header)
        self._write(data)
        for raw in raws:
            if self._at % _ALIGN:
                self._write(bytes(-self._at % _ALIGN))
            self._write(raw)


def frames(data: np.ndarray) -> list:
    """The values of the frames a FrameWriter wrote, one after the other, in `data` (a uint8
    array of the whole file, at least 64-byte aligned): each array a view of `data`, not a
    copy (`data` stays alive while any of them does)."""
    values, at, view = [], 0, memoryview(data)
    while at < len(data):
        (size,) = _SIZE.unpack_from(view, at)
        header = view[at + 8 : at + 8 + size]
        length, count = _COUNT.unpack_from(header)
        sizes = [_SIZE.unpack_from(header, 16 + 8 * i)[0] for i in range(count)]
        at += 8 + size
        pickled, at = view[at : at + length], at + length
        buffers = []
        for nbytes in sizes:
            at += -at % _ALIGN
            buffers.append(view[at : at + nbytes])
            at += nbytes
        values.append(pickle.loads(pickled, buffers=buffers))
    return values
