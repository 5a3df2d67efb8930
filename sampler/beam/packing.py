"""Values pickled once for their trip through the runner, unpickled by the step that gets them.

Only values that this project's own steps made cross here, between the stages of one
pipeline: Beam's default coder pickles the same values anyway when they have no coder of
their own. Packing them once, where they are made, lets them cross the local runner's
Flatten stages and shuffles as bytes, which it copies without unpickling them. No input
file is ever unpickled: tests/test_bad_records.py allows `pickle` to load only here.

`packed_buffers` and `unpacked_buffers` do the same for a value that goes to a file (the
`sharded` placement's pieces, sampler.io.piece_files), with its arrays' bytes out of band:
they are written from the arrays and read back as arrays over the bytes read, where pickle's
own framing copied each twice more (into the pickle, and out of it into a new array).
"""

from __future__ import annotations

import pickle
import struct

ALIGN = 64  # each out-of-band buffer starts at a multiple of this from the packed value's start
_COUNT = struct.Struct("<QQ")  # the pickle's length, the number of buffers


def packed(value) -> bytes:
    """`value` as bytes, for `unpacked` in a later step of the same pipeline."""
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def unpacked(data: bytes):
    """The value `packed` made `data` from."""
    return pickle.loads(data)


def _padding(offset: int) -> int:
    return -offset % ALIGN


def packed_buffers(value) -> list:
    """`value` as buffers to write one after another, for `unpacked_buffers`: the lengths, the
    pickle, then each contiguous array's bytes (out of band, not copied here), each at a
    multiple of ALIGN bytes."""
    arrays = []
    body = pickle.dumps(value, 5, buffer_callback=arrays.append)
    raws = [a.raw() for a in arrays]
    lengths = struct.pack(f"<{len(raws)}Q", *(r.nbytes for r in raws))
    head = _COUNT.pack(len(body), len(raws)) + lengths + body
    out, offset = [head], len(head)
    for raw in raws:
        pad = _padding(offset)
        if pad:
            out.append(bytes(pad))
        out += [raw]
        offset += pad + raw.nbytes
    return out


def unpacked_buffers(data: bytearray):
    """The value `packed_buffers` made the bytes `data` from (its arrays are views of `data`:
    writable when `data` is, and they keep it alive)."""
    view = memoryview(data)
    body_length, count = _COUNT.unpack_from(view)
    at = _COUNT.size
    lengths = struct.unpack_from(f"<{count}Q", view, at)
    at += 8 * count
    body = view[at : at + body_length]
    at += body_length
    buffers = []
    for length in lengths:
        at += _padding(at)
        buffers.append(view[at : at + length])
        at += length
    return pickle.loads(body, buffers=buffers)
