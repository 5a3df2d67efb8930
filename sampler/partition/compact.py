"""Compact pickling of the int64 arrays that cross Beam stages.

Between stages a runner encodes every element; Beam's default coder pickles objects it does
not know, so an int64 array costs 8 bytes per value however small its values are. Most of
what label propagation carries round after round is small integers: neighbour shard keys
(< types x shards), neighbour rows (< a shard's size), parts, classes. `narrow` stores such
an array in the smallest integer dtype that holds its values and `widen` brings it back to
int64 on unpickling, so the kernels always see int64 and the results are identical.
`CompactTuple` does this for a tuple of arrays (a message); `LPShard` and `ClusterShard`
use `narrow`/`widen` in their `__reduce__`. Row offsets (CSR) are sent as their differences.

`pack_arrays` goes further for the many small messages of every round: the arrays, narrowed
the same way, as one `bytes` (a small header, then each array's raw bytes), which Beam's
default coder writes as it is, with no pickling; `unpack_arrays` gives back the int64 (or
other) arrays.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

# (dtype, smallest value, largest value), narrowest first (np.iinfo is slow to build).
_NARROW = tuple(
    (t, int(np.iinfo(t).min), int(np.iinfo(t).max)) for t in (np.int8, np.int16, np.int32)
)


def narrow(a):
    """`a` (an int64 array) as a 1-tuple of it in the smallest signed integer dtype holding its
    values; anything else unchanged. Undone by `widen`."""
    if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for dtype, low, high in _NARROW:
        if low <= lo and hi <= high:
            return (a.astype(dtype),)
    return a


def widen(a):
    """The int64 array `narrow` made `a` from; anything else (never narrowed) unchanged."""
    if type(a) is tuple:
        return a[0].astype(np.int64)
    return a


def narrow_offsets(offsets):
    """CSR offsets (int64, starting at 0) as narrowed differences."""
    return narrow(np.diff(offsets))


def widen_offsets(degrees):
    degrees = widen(degrees)
    out = np.zeros(len(degrees) + 1, dtype=np.int64)
    np.cumsum(degrees, out=out[1:])
    return out


def _tuple(items):
    return tuple(widen(a) for a in items)


class CompactTuple(tuple):
    """A tuple (of int64 arrays and other values) that pickles its int64 arrays narrowed and
    unpickles as a plain tuple of int64 arrays."""

    __slots__ = ()

    def __reduce__(self):
        return _tuple, (tuple(narrow(a) for a in self),)


def pack_arrays(arrays) -> bytes:
    """A tuple of numpy arrays as bytes: int64 arrays narrowed (see `narrow`); undone by
    `unpack_arrays`."""
    header = [struct.pack("<B", len(arrays))]
    data = []
    for a in arrays:
        small = narrow(np.ascontiguousarray(a))
        widened = type(small) is tuple
        if widened:
            small = small[0]
        code = small.dtype.str.encode("ascii")
        header.append(struct.pack("<?B", widened, len(code)) + code)
        header.append(struct.pack(f"<B{small.ndim}q", small.ndim, *small.shape))
        data.append(small.tobytes())
    return b"".join(header + data)


def unpack_arrays(packed: bytes) -> tuple:
    """The tuple of arrays `pack_arrays` made `packed` from (new, writable arrays)."""
    view = memoryview(packed)
    (count,) = struct.unpack_from("<B", view, 0)
    pos = 1
    specs = []
    for _ in range(count):
        widened, length = struct.unpack_from("<?B", view, pos)
        pos += 2
        dtype = np.dtype(bytes(view[pos : pos + length]).decode("ascii"))
        pos += length
        (ndim,) = struct.unpack_from("<B", view, pos)
        shape = struct.unpack_from(f"<{ndim}q", view, pos + 1)
        pos += 1 + 8 * ndim
        specs.append((widened, dtype, shape))
    out = []
    for widened, dtype, shape in specs:
        size = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(view, dtype=dtype, count=size, offset=pos).reshape(shape)
        pos += size * dtype.itemsize
        out.append(a.astype(np.int64) if widened else a.copy())
    return tuple(out)


def reduce_narrowed(obj):
    """`__reduce__` of a dataclass whose fields are passed to its constructor in order: its
    int64 array fields narrowed (see `narrow`), widened again on unpickling."""
    values, narrowed = [], []
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        small = narrow(value)
        narrowed.append(small is not value)
        values.append(small[0] if small is not value else value)
    return _rebuild, (type(obj), tuple(narrowed), tuple(values))


def _rebuild(cls, narrowed, values):
    return cls(*(v.astype(np.int64) if n else v for n, v in zip(narrowed, values, strict=True)))
