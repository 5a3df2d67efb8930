"""Compiled kernel of `sampler.io.example_scan.scan`: the tf.Example records of a batch read
by one layout, record by record (the numpy twin steps every record's cursor at once, one numpy
pass per byte of the layout, with many passes per varint).

A record it accepts follows the layout exactly, as the twin's accepted records do, and gives
the same values. It is stricter in one way only: a record whose bytes the layout would read
past its own end (a varint or a tag after its last byte) is refused, where the twin reads on
into the bytes that follow it in the buffer; either way such a record is left to the caller's
exact per-record path.
"""

from __future__ import annotations

import numpy as np

from sampler.jit import njit

_TOO_LONG = 1 << 40  # as example_scan._TOO_LONG
_BYTES, _FLOAT, _INT = 0, 1, 2
_TAG = (0x0A, 0x12, 0x1A)


@njit
def _varint(data, cur, end):
    """(value as int64, cursor after it, whether it is whole before `end`)."""
    value = np.uint64(0)
    for k in range(10):
        if cur >= end:
            return np.int64(0), cur, False
        byte = data[cur]
        cur += 1
        value |= np.uint64(byte & 0x7F) << np.uint64(7 * k)
        if k == 9:
            return np.int64(value), cur, byte <= 1
        if byte < 0x80:
            break
    return np.int64(value), cur, True


@njit
def _length(data, cur, end, limit):
    """(a length that fits between the cursor after it and `limit`, cursor, good)."""
    size, cur, good = _varint(data, cur, end)
    good = good and size >= 0 and size <= _TOO_LONG and cur + size <= limit
    return size, cur, good


@njit
def _one(data, r, cur, end, key_data, key_off, kinds, widths, cols, fat, ints, bat, bsz):
    """Reads record r (data[cur:end]) by the layout; whether it follows it."""
    if cur >= end or data[cur] != 0x0A:
        return False
    size, cur, good = _length(data, cur + 1, end, end)
    if not good or cur + size != end:
        return False
    for e in range(len(kinds)):
        if cur >= end or data[cur] != 0x0A:
            return False
        size, cur, good = _length(data, cur + 1, end, end)
        if not good:
            return False
        entry_end = cur + size
        if cur >= entry_end or data[cur] != 0x0A:
            return False
        klen = key_off[e + 1] - key_off[e]
        size, cur, good = _length(data, cur + 1, entry_end, entry_end)
        if not good or size != klen:
            return False
        for j in range(klen):
            if data[cur + j] != key_data[key_off[e] + j]:
                return False
        cur += klen
        if cur >= entry_end or data[cur] != 0x12:
            return False
        size, cur, good = _length(data, cur + 1, entry_end, entry_end)
        if not good or cur + size != entry_end:
            return False
        kind, width, col = kinds[e], widths[e], cols[e]
        if cur >= entry_end or data[cur] != _TAG[kind]:
            return False
        size, cur, good = _length(data, cur + 1, entry_end, entry_end)
        if not good or cur + size != entry_end:
            return False
        if kind == _FLOAT:
            size = 0
            if cur < entry_end:  # an empty list has no packed field
                if data[cur] != 0x0A:
                    return False
                size, cur, good = _length(data, cur + 1, entry_end, entry_end)
                if not good:
                    return False
            if size % 4 != 0 or (width >= 0 and size != 4 * width):
                return False
            if width >= 0:
                fat[r, col] = cur
            cur += size
        elif kind == _INT:
            size = 0
            if cur < entry_end:
                if data[cur] != 0x0A:
                    return False
                size, cur, good = _length(data, cur + 1, entry_end, entry_end)
                if not good or cur + size != entry_end:
                    return False
            if width < 0:  # every varint up to the end must be well formed
                while cur < entry_end:
                    value, cur, good = _varint(data, cur, entry_end)
                    if not good:
                        return False
            else:
                for c in range(width):
                    if cur >= entry_end:
                        return False
                    value, cur, good = _varint(data, cur, entry_end)
                    if not good:
                        return False
                    ints[r, col + c] = value
        else:
            if width < 0:
                while cur < entry_end:
                    if data[cur] != 0x0A:
                        return False
                    size, cur, good = _length(data, cur + 1, entry_end, entry_end)
                    if not good:
                        return False
                    cur += size
            else:
                for c in range(width):
                    if cur >= entry_end or data[cur] != 0x0A:
                        return False
                    size, cur, good = _length(data, cur + 1, entry_end, entry_end)
                    if not good:
                        return False
                    bat[r, col + c] = cur
                    bsz[r, col + c] = size
                    cur += size
        if cur != entry_end:
            return False
    return cur == end


@njit
def scan(data, starts, ends, key_data, key_off, kinds, widths, cols, fat, ints, bat, bsz):
    """Whether each record data[starts[i]:ends[i]] follows the layout (key bytes, kinds,
    widths: -1 for an entry not wanted, the output column of each wanted one); the values
    of those that do: float lists' byte offsets in `fat`, ints in `ints`, bytes values'
    offsets and sizes in `bat` and `bsz`."""
    ok = np.empty(len(starts), np.bool_)
    for r in range(len(starts)):
        ok[r] = _one(
            data, r, starts[r], ends[r], key_data, key_off, kinds, widths, cols, fat, ints, bat, bsz
        )
    return ok
