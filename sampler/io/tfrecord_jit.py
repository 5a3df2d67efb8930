"""Compiled kernel of TFRecord framing (sampler/io/tfrecord.py, `RecordFramer`): walks the
record headers of a buffer and computes each record's data CRC32C, in one pass.

In Python this is a few integer operations and one `google_crc32c.value` call per record
(about 1.5 us); records of tables are small (tens to hundreds of bytes), so that call, not the
checksum, would be the reading's cost. The checksum here is CRC32C (Castagnoli, reflected, as
google_crc32c computes it) by slicing-by-8 tables.
"""

from __future__ import annotations

import numpy as np

from sampler.jit import njit


def _tables() -> np.ndarray:
    """The 8 x 256 slicing-by-8 tables of CRC32C (reflected polynomial 0x82F63B78)."""
    table = np.zeros((8, 256), np.uint32)
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
        table[0, i] = c
    for k in range(1, 8):
        for i in range(256):
            prev = int(table[k - 1, i])
            table[k, i] = (prev >> 8) ^ int(table[0, prev & 0xFF])
    return table


_TABLES = _tables()


@njit
def crc32c(buf, lo, hi, tables):
    """CRC32C of buf[lo:hi] (uint8), as google_crc32c.value gives it."""
    crc = np.uint32(0xFFFFFFFF)
    i = lo
    while i + 8 <= hi:
        one = crc ^ (
            np.uint32(buf[i])
            | (np.uint32(buf[i + 1]) << np.uint32(8))
            | (np.uint32(buf[i + 2]) << np.uint32(16))
            | (np.uint32(buf[i + 3]) << np.uint32(24))
        )
        crc = (
            tables[7, one & np.uint32(0xFF)]
            ^ tables[6, (one >> np.uint32(8)) & np.uint32(0xFF)]
            ^ tables[5, (one >> np.uint32(16)) & np.uint32(0xFF)]
            ^ tables[4, one >> np.uint32(24)]
            ^ tables[3, buf[i + 4]]
            ^ tables[2, buf[i + 5]]
            ^ tables[1, buf[i + 6]]
            ^ tables[0, buf[i + 7]]
        )
        i += 8
    while i < hi:
        crc = tables[0, (crc ^ np.uint32(buf[i])) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
        i += 1
    return crc ^ np.uint32(0xFFFFFFFF)


@njit
def _masked(crc):
    """The masked CRC32C that TFRecord stores (sampler.io.tfrecord._masked)."""
    mask = np.uint64(0xFFFFFFFF)  # numba widens uint32 arithmetic to 64 bits
    c = np.uint64(crc)
    rotated = ((c >> np.uint64(15)) | (c << np.uint64(17))) & mask
    return (rotated + np.uint64(0xA282EAD8)) & mask


@njit
def _word(buf, at):
    """The little-endian uint32 at buf[at:at + 4]."""
    out = np.uint64(0)
    for b in range(4):
        out |= np.uint64(buf[at + b]) << np.uint64(8 * b)
    return out


@njit
def frame(buf, pos, left, tables):
    """Up to `left` whole records from buf[pos:]: (the offset in buf of each one's data, its
    length, whether its length checksum is right, whether its data checksum is right, the
    position after the last): a record counts when its header, data and data checksum are
    all in the buffer (tests/kernel_oracles.py has the same in Python)."""
    size = len(buf)
    cap = min(left, size // 16 + 1)
    starts = np.empty(cap, np.int64)
    lengths = np.empty(cap, np.int64)
    header_ok = np.empty(cap, np.bool_)
    data_ok = np.empty(cap, np.bool_)
    k = 0
    while k < left:
        if pos + 12 > size:
            break
        length = np.uint64(0)
        for b in range(8):
            length |= np.uint64(buf[pos + b]) << np.uint64(8 * b)
        room = size - pos - 16
        if room < 0 or length > np.uint64(room):
            break
        start = pos + 12
        end = start + np.int64(length)
        starts[k] = start
        lengths[k] = end - start
        header_ok[k] = _masked(crc32c(buf, pos, pos + 8, tables)) == _word(buf, pos + 8)
        data_ok[k] = _masked(crc32c(buf, start, end, tables)) == _word(buf, end)
        pos = end + 4
        k += 1
    return starts[:k].copy(), lengths[:k].copy(), header_ok[:k].copy(), data_ok[:k].copy(), pos


def warm() -> None:
    """Compiles the kernel for the argument types the runs pass (sampler/jit_loader.py): a
    read-only view of the file's bytes."""
    frame(np.frombuffer(bytes(20), np.uint8), 0, 2, _TABLES)
