"""Compiled kernels of the chunk encoder (sampler/sample/encode_chunk.py): the lengths of
every record's list payloads, and each record's bytes written whole in one pass, into its
bytes object (`write_into`) or into a buffer (`write_records`).

A payload source is one of (each record i owns the values k in [bounds[i], bounds[i + 1]),
value k being the table row `rows[k]`, or `row0 + k` when `rows` is empty):
  fixed   rows of `row_bytes` bytes of a uint8 buffer (float32 features, copied as they are)
  varint  rows of `width` int64 values, each written as a varint (int64 features, indices)
  ragged  byte ranges data[offsets[r]:offsets[r + 1]] (framed ids and bytes features)
Varints of int64 are those of their two's complement uint64, as protobuf writes them.
"""

from __future__ import annotations

import ctypes

import numpy as np
from numba import carray, types
from numba.core import cgutils
from numba.extending import intrinsic

from sampler.jit import DISABLED, njit, prefetch

# Gathered rows: the table memory of the row _AHEAD values on is asked for (`prefetch`) while
# this one is copied, that of ragged values' offsets twice as far (the row's bytes need them).
_AHEAD = 8
_LINE = 64
_SEVEN = np.uint64(7)
_LOW = np.uint64(0x7F)
_HIGH = np.uint64(0x80)


@intrinsic
def _memcpy(typingctx, dst, dst_at, src, src_at, count):
    """memcpy(&dst[dst_at], &src[src_at], count) of two uint8 arrays (LLVM's memcpy: a
    byte loop does not vectorize, numba's slice assignment is slower still)."""
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        out, out_at, data, data_at, size = args
        out_array = context.make_array(signature.args[0])(context, builder, out)
        data_array = context.make_array(signature.args[2])(context, builder, data)
        to = builder.gep(out_array.data, [out_at])
        source = builder.gep(data_array.data, [data_at])
        cgutils.raw_memcpy(builder, to, source, size, 1)
        return context.get_dummy_value()

    return sig, codegen


@njit
def _varint_length(v):
    """1 to 10, without branches (a loop over the bytes mispredicts on mixed lengths)."""
    n = 1
    for j in range(1, 10):
        n += v >= np.uint64(1) << np.uint64(7 * j)
    return n


@njit
def _put_varint(out, pos, v):
    while v >= _HIGH:
        out[pos] = np.uint8((v & _LOW) | _HIGH)
        v >>= _SEVEN
        pos += 1
    out[pos] = np.uint8(v)
    return pos + 1


@njit
def _put_index(out, pos, v, end):
    """_put_varint, without branches for values below 2**14 (edge indices): it writes two
    bytes and moves on by one or two (the second is written over next: every later byte goes
    after this one), where `out` has room for both (below `end`)."""
    if v >= np.uint64(1 << 14) or pos + 2 > end:
        return _put_varint(out, pos, v)
    more = v >= _HIGH
    out[pos] = np.uint8((v & _LOW) | (np.uint64(more) << _SEVEN))
    out[pos + 1] = np.uint8(v >> _SEVEN)
    return pos + 1 + more


@njit
def _row(rows, row0, k):
    if len(rows):
        return rows[k]
    return row0 + k


@njit
def varint_lengths(values):
    """Bytes of the varint of each int64 value (1 to 10)."""
    out = np.empty(len(values), np.int64)
    for i in range(len(values)):
        out[i] = _varint_length(np.uint64(values[i]))
    return out


@njit
def varint_payloads(values, width, rows, row0, bounds):
    """Bytes of each record's varints: int64 `values`, rows of `width`."""
    n = len(bounds) - 1
    out = np.zeros(n, np.int64)
    for i in range(n):
        total = 0
        for k in range(bounds[i], bounds[i + 1]):
            start = _row(rows, row0, k) * width
            for j in range(start, start + width):
                total += _varint_length(np.uint64(values[j]))
        out[i] = total
    return out


@njit
def index_payloads(values, bounds, limit):
    """(bytes of each record's varints of edge indices `values`, the first value that is
    negative or not below its record's `limit`, or -1)."""
    n = len(bounds) - 1
    out = np.zeros(n, np.int64)
    for i in range(n):
        total = 0
        for k in range(bounds[i], bounds[i + 1]):
            v = values[k]
            if v < 0 or v >= limit[i]:
                return out, k
            if v < 1 << 14:
                total += 1 + (v >= 128)
            else:
                total += _varint_length(np.uint64(v))
        out[i] = total
    return out, -1


@njit
def ragged_payloads(offsets, rows, row0, bounds):
    """Bytes of each record's byte ranges."""
    n = len(bounds) - 1
    out = np.zeros(n, np.int64)
    for i in range(n):
        total = 0
        for k in range(bounds[i], bounds[i + 1]):
            r = _row(rows, row0, k)
            total += offsets[r + 1] - offsets[r]
        out[i] = total
    return out


# Entries of `write_records`: one row of `params` each, its columns:
HOW, TAG, PACKED, PREFIX_AT, PREFIX_LEN, DATA, AUX, ROWS, ROW0, BOUNDS, UNIT = range(11)
# HOW: no payload; a varint per record (`#size`); and the three sources above. DATA, AUX,
# ROWS and BOUNDS are rows of `arrays` (-1: none): DATA the uint8 buffer (fixed, ragged)
# or the int64 values (inline, varint), AUX the int64 offsets (ragged), UNIT row_bytes
# (fixed), width (varint), or for ragged SLACK when DATA has SLACK bytes to spare after its
# last range, else 0: a range of up to SLACK bytes is then copied as SLACK bytes, the bytes
# after its end being written over next (`out` has SLACK bytes to spare after the records).
NONE, INLINE, FIXED, VARINT, RAGGED = range(5)
SLACK = 16


def _pointer_to(item):
    @intrinsic
    def pointer(typingctx, address):
        """A pointer to `item` values at `address` (an int64 from numpy's array interface)."""

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(types.CPointer(item)))

        return types.CPointer(item)(types.int64), codegen

    return pointer


_uint8_pointer, _int64_pointer = _pointer_to(types.uint8), _pointer_to(types.int64)


@njit
def _uint8_at(address, count):
    return carray(_uint8_pointer(address), count)


@njit
def _int64_at(address, count):
    return carray(_int64_pointer(address), count)


if DISABLED:  # NUMBA_DISABLE_JIT=1: numba's intrinsics as Python (the kernels run as Python)

    def _memcpy(dst, dst_at, src, src_at, count):
        dst[dst_at : dst_at + count] = src[src_at : src_at + count]

    def _at(address, count, kind):
        return np.ctypeslib.as_array((kind * count).from_address(address))

    def _uint8_at(address, count):
        return _at(int(address), int(count), ctypes.c_uint8)

    def _int64_at(address, count):
        return _at(int(address), int(count), ctypes.c_int64)


@njit
def _uint8s(arrays, slot):
    return _uint8_at(arrays[slot, 0], arrays[slot, 1])


@njit
def _int64s(arrays, slot):
    return _int64_at(arrays[slot, 0], arrays[slot, 1])


@njit
def _put_payload(out, pos, end, i, entry, arrays):
    """Record i's list payload of one entry (a row of `params`) at `pos`; returns its end.
    Bytes below `end` may be written over (then written again by what comes next)."""
    how = entry[HOW]
    if how == NONE:
        return pos
    if how == INLINE:
        return _put_varint(out, pos, np.uint64(_int64s(arrays, entry[DATA])[i]))
    bounds, row0, unit = _int64s(arrays, entry[BOUNDS]), entry[ROW0], entry[UNIT]
    if entry[ROWS] < 0:  # rows row0 + k: the record's values lie side by side
        first, last = row0 + bounds[i], row0 + bounds[i + 1]
        if how == FIXED:
            _memcpy(out, pos, _uint8s(arrays, entry[DATA]), first * unit, (last - first) * unit)
            return pos + (last - first) * unit
        if how == VARINT:
            values = _int64s(arrays, entry[DATA])
            for j in range(first * unit, last * unit):
                pos = _put_index(out, pos, np.uint64(values[j]), end)
            return pos
        offsets = _int64s(arrays, entry[AUX])
        size = offsets[last] - offsets[first]
        _memcpy(out, pos, _uint8s(arrays, entry[DATA]), offsets[first], size)
        return pos + size
    rows = _int64s(arrays, entry[ROWS])
    last = bounds[i + 1]
    if how == FIXED:
        data = _uint8s(arrays, entry[DATA])
        for k in range(bounds[i], last):
            if k + _AHEAD < last:
                at = rows[k + _AHEAD] * unit
                for line in range(at, at + unit, _LINE):
                    prefetch(data, line)
            _memcpy(out, pos, data, rows[k] * unit, unit)
            pos += unit
    elif how == VARINT:
        values = _int64s(arrays, entry[DATA])
        for k in range(bounds[i], last):
            if k + _AHEAD < last:
                prefetch(values, rows[k + _AHEAD] * unit)
            for j in range(rows[k] * unit, (rows[k] + 1) * unit):
                pos = _put_index(out, pos, np.uint64(values[j]), end)
    else:
        data, offsets = _uint8s(arrays, entry[DATA]), _int64s(arrays, entry[AUX])
        for k in range(bounds[i], last):
            if k + 2 * _AHEAD < last:
                prefetch(offsets, rows[k + 2 * _AHEAD])
            if k + _AHEAD < last:
                prefetch(data, offsets[rows[k + _AHEAD]])
            start, size = offsets[rows[k]], offsets[rows[k] + 1] - offsets[rows[k]]
            if size <= unit and pos + SLACK <= end:  # ids, mostly: one move, no loop or call
                _memcpy(out, pos, data, start, SLACK)
            else:
                _memcpy(out, pos, data, start, size)
            pos += size
    return pos


@njit
def _put_record(out, pos, end, i, total, params, prefixes, arrays, heads):
    """Record i, whole, at `pos`: 0x0a len(Features), then per entry (a row of `params`, in
    key order) its header (0x0a len(entry) 0x0a len(key) key 0x12 len(Feature) tag len(list)
    [0x0a len(payload)], lengths heads[e, 0..3, i]) and its payload. Bytes below `end` past
    the record may be written over."""
    out[pos] = 0x0A
    pos = _put_varint(out, pos + 1, np.uint64(total[i]))
    for e in range(len(params)):
        entry = params[e]
        out[pos] = 0x0A
        pos = _put_varint(out, pos + 1, np.uint64(heads[e, 0, i]))
        size = entry[PREFIX_LEN]
        _memcpy(out, pos, prefixes, entry[PREFIX_AT], size)
        pos = _put_varint(out, pos + size, np.uint64(heads[e, 1, i]))
        out[pos] = entry[TAG]
        pos = _put_varint(out, pos + 1, np.uint64(heads[e, 2, i]))
        if entry[PACKED] and heads[e, 3, i] > 0:
            out[pos] = 0x0A
            pos = _put_varint(out, pos + 1, np.uint64(heads[e, 3, i]))
        pos = _put_payload(out, pos, end, i, entry, arrays)
    return pos


@njit
def write_records(out, shift, first, last, starts, total, params, prefixes, arrays, heads):
    """Records first..last-1 into `out`, record i at starts[i] - shift, each in one pass
    (_put_record). `arrays`: (address, length) rows of the arrays the entries read, kept
    alive by the caller."""
    for i in range(first, last):
        _put_record(out, starts[i] - shift, len(out), i, total, params, prefixes, arrays, heads)


@njit
def write_into(addresses, sizes, total, params, prefixes, arrays, heads):
    """Record i written at addresses[i], where sizes[i] bytes are the caller's to write (the
    storage of a new bytes object), in one pass (_put_record), nothing past its end.
    Returns the first record whose length is not sizes[i], or -1."""
    for i in range(len(addresses)):
        out = _uint8_at(addresses[i], sizes[i])
        if _put_record(out, 0, sizes[i], i, total, params, prefixes, arrays, heads) != sizes[i]:
            return i
    return -1


def warm() -> None:
    """Compiles each kernel for the argument types the encoder passes (sampler/jit_loader.py):
    one record of one entry with no payload, written into a buffer and into place."""
    i64 = np.array([0, 1], np.int64)
    varint_lengths(i64)
    frozen = i64.view()
    frozen.flags.writeable = False  # (the values: read-only, as a mapped table's)
    varint_payloads(frozen, 1, i64[:0], 0, i64)
    index_payloads(i64, i64, i64 + 2)
    ragged_payloads(i64, i64[:0], 0, i64)
    params = np.array([[NONE, 0x0A, 0, 0, 1, -1, -1, -1, 0, -1, 0]], np.int64)
    prefix, arrays = np.zeros(1, np.uint8), np.zeros((0, 2), np.int64)
    heads, total = np.zeros((1, 4, 1), np.int64), np.array([6], np.int64)
    out = np.zeros(64, np.uint8)
    write_records(out, 0, 0, 1, i64, total, params, prefix, arrays, heads)
    address = np.array([out.__array_interface__["data"][0]], np.int64)
    write_into(address, np.array([8], np.int64), total, params, prefix, arrays, heads)
