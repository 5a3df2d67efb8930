"""Compact pickling of the int64 arrays that cross Beam stages.

Between stages a runner encodes every element; Beam's default coder pickles objects it does
not know, so an int64 array costs 8 bytes per value however small its values are. Most of
what label propagation carries round after round is small integers: neighbour shard keys
(< types x shards), neighbour rows (< a shard's size), parts, classes. `narrow` stores such
an array in the smallest integer dtype that holds its values and `widen` brings it back to
int64 on unpickling, so the kernels always see int64 and the results are identical.
`CompactTuple` does this for a tuple of arrays (a message); `LPShard` and `ClusterShard`
use `narrow`/`widen` in their `__reduce__`. Row offsets (CSR) are sent as their differences.
"""

from __future__ import annotations

import numpy as np

_NARROW = (np.int8, np.int16, np.int32)


def narrow(a):
    """`a` (an int64 array) as a 1-tuple of it in the smallest signed integer dtype holding its
    values; anything else unchanged. Undone by `widen`."""
    if not isinstance(a, np.ndarray) or a.dtype != np.int64 or a.size == 0:
        return a
    lo, hi = int(a.min()), int(a.max())
    for dtype in _NARROW:
        info = np.iinfo(dtype)
        if info.min <= lo and hi <= info.max:
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
