"""Compiled kernels of the chunk encoder (sampler.sample.encode_compiled): the lengths of
every record's list payloads, and the records' bytes written in one pass into one buffer.

A payload source is one of (each record i owns the values k in [bounds[i], bounds[i + 1]),
value k being the table row `rows[k]`, or `row0 + k` when `rows` is empty):
  fixed   rows of `row_bytes` bytes of a uint8 buffer (float32 features, copied as they are)
  varint  rows of `width` int64 values, each written as a varint (int64 features, indices)
  ragged  byte ranges data[offsets[r]:offsets[r + 1]] (framed ids, bytes features, any body
          the numpy encoder built)
Varints of int64 are those of their two's complement uint64, as protobuf writes them.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from sampler.jit import njit

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
    n = 1
    while v >= _HIGH:
        v >>= _SEVEN
        n += 1
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


@njit
def put_record_heads(out, at, total):
    """0x0a varint(total[i]) at at[i]: each record's Example header."""
    for i in range(len(at)):
        out[at[i]] = 0x0A
        _put_varint(out, at[i] + 1, np.uint64(total[i]))


@njit
def put_entry_heads(out, at, entry, prefix, feature, tag, list_len, payload, packed):
    """Each record's header of one map entry (0x0a len(entry) 0x0a len(key) key 0x12
    len(Feature) tag len(list) [0x0a len(payload)]) at at[i]; returns where the payloads go."""
    n = len(at)
    ends = np.empty(n, np.int64)
    for i in range(n):
        pos = at[i]
        out[pos] = 0x0A
        pos = _put_varint(out, pos + 1, np.uint64(entry[i]))
        for b in range(len(prefix)):
            out[pos + b] = prefix[b]
        pos = _put_varint(out, pos + len(prefix), np.uint64(feature[i]))
        out[pos] = tag
        pos = _put_varint(out, pos + 1, np.uint64(list_len[i]))
        if packed and payload[i] > 0:
            out[pos] = 0x0A
            pos = _put_varint(out, pos + 1, np.uint64(payload[i]))
        ends[i] = pos
    return ends


@njit
def put_varints(out, at, values):
    """varint(values[i]) at at[i]."""
    for i in range(len(at)):
        _put_varint(out, at[i], np.uint64(values[i]))


@njit
def put_fixed(out, at, data, row_bytes, rows, row0, bounds):
    """Each record's rows of `data` (row_bytes each), copied one after another at at[i]."""
    for i in range(len(at)):
        pos = at[i]
        for k in range(bounds[i], bounds[i + 1]):
            start = _row(rows, row0, k) * row_bytes
            _memcpy(out, pos, data, start, row_bytes)
            pos += row_bytes


@njit
def put_varint_rows(out, at, values, width, rows, row0, bounds):
    """Each record's rows of int64 `values` (width each) as varints at at[i]."""
    for i in range(len(at)):
        pos = at[i]
        for k in range(bounds[i], bounds[i + 1]):
            start = _row(rows, row0, k) * width
            for j in range(start, start + width):
                pos = _put_varint(out, pos, np.uint64(values[j]))


@njit
def put_ragged(out, at, data, offsets, rows, row0, bounds):
    """Each record's byte ranges of `data`, one after another at at[i]."""
    for i in range(len(at)):
        pos = at[i]
        for k in range(bounds[i], bounds[i + 1]):
            r = _row(rows, row0, k)
            start = offsets[r]
            size = offsets[r + 1] - start
            _memcpy(out, pos, data, start, size)
            pos += size
