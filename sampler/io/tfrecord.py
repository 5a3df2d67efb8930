"""TFRecord framing, read and written without TensorFlow.

A record is: uint64 length, masked CRC32C of the length, the data, masked CRC32C
of the data (all little-endian). Files concatenate into valid files.

Reading works over whole buffers: `RecordFramer.take` reads the file in large blocks and returns
the next records of a block as one buffer plus (start, end, index) arrays, so the per-record
Python work is a few integer operations and one checksum call.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import google_crc32c  # installed with apache-beam[gcp]
import numpy as np

from sampler.errors import UserError
from sampler.jit_loader import kernels

_READ_CHUNK = 1 << 24
_HEADER = struct.Struct("<QI")
_LENGTH = struct.Struct("<Q")


def masked_crc(data: bytes) -> int:
    return _masked(google_crc32c.value(data))


def frame(records: list[bytes]) -> bytes:
    """The TFRecord bytes of `records`."""
    out = []
    for record in records:
        length = struct.pack("<Q", len(record))
        out += [length, struct.pack("<I", masked_crc(length)), record]
        out.append(struct.pack("<I", masked_crc(record)))
    return b"".join(out)


class RecordFramer:
    """Reads the records of a TFRecord stream, checking framing and checksums, block by block.

    Broken framing ends the file with a UserError naming the record index. A record whose data
    checksum is wrong is passed to `on_bad_checksum(index)` and skipped (its length was intact,
    so the next record is found), or is a UserError when no callback is given. Within a call of
    `take`, the callbacks and the UserError come in record order.
    """

    def __init__(self, path: str, f, on_bad_checksum: Callable[[int], None] | None = None):
        self.path, self.f, self.on_bad_checksum = path, f, on_bad_checksum
        self.buf = b""
        self.base = 0  # file offset of buf[0]
        self.pos = 0  # the next record's header in buf
        self.index = 0  # the next record's index in the file
        self.eof = False

    def _fill(self, keep_from: int, need: int) -> None:
        """Drops buf before `keep_from` (and moves pos with it); reads until buf holds `need`
        bytes from there, or the file ends."""
        parts = [self.buf[keep_from:]]
        have = len(parts[0])
        while have < need and not self.eof:
            part = self.f.read(_READ_CHUNK)
            if not part:
                self.eof = True
                break
            parts.append(part)
            have += len(part)
        self.buf = b"".join(parts)
        self.base += keep_from
        self.pos -= keep_from

    def _error(self, index: int, what: str) -> UserError:
        return UserError(f"{self.path}: record index {index}: {what}")

    def _frame(self, need: int, first: int):
        """Frames up to `need` more records: (their data's file offsets, their lengths, whether
        each one's length checksum is right, whether its data checksum is right, the error
        that stops the file or None). A record's length checksum is checked before the buffer
        is read on past it; `take` cuts the records at the first wrong one."""
        unpack_header = _HEADER.unpack_from
        parts: list[tuple] = []
        count = 0
        error = None
        while count < need:
            buf, base = self.buf, self.base
            local, *checked, pos = _frame(buf, self.pos, need - count)
            parts.append((local + base, *checked))
            count += len(local)
            self.pos = pos
            if count >= need:
                break
            # The buffer ends inside the next record: check its header, then read on.
            size = len(buf)
            index = self.index + count
            if pos + 12 <= size:
                length, header_crc = unpack_header(buf, pos)
                if masked_crc(buf[pos : pos + 8]) != header_crc:
                    error = self._error(index, _CORRUPT_LENGTH)
                    break
                need_bytes = pos + 16 + length
            else:
                need_bytes = pos + 12
            keep = first - self.base
            self._fill(keep, need_bytes - keep)
            if not self.eof:
                continue
            buf, pos, size = self.buf, self.pos, len(self.buf)
            if pos == size:
                break
            if pos + 12 > size:
                error = self._error(index, "truncated record header (not a TFRecord file?)")
                break
            length, header_crc = unpack_header(buf, pos)
            if pos + 16 + length > size:
                if masked_crc(buf[pos : pos + 8]) != header_crc:
                    error = self._error(index, _CORRUPT_LENGTH)
                else:
                    got = min(length, size - pos - 12)
                    error = self._error(index, f"truncated record (file ends after {got} bytes)")
                break
        if not parts:
            empty = np.zeros(0, np.int64)
            return empty, empty, empty.astype(bool), empty.astype(bool), error
        return (*(_concat([p[k] for p in parts]) for k in range(4)), error)

    def take(self, count: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
        """(buffer, starts, ends, indices) of up to `count` records with good checksums; fewer
        only at the end of the file. buffer[starts[i]:ends[i]] is the data of record indices[i]."""
        first = self.base + self.pos  # file offset of the first record taken: kept in buf
        parts = []
        good = 0
        while good < count:
            starts, lengths, header_ok, ok, error = self._frame(count - good, first)
            indices = self.index + np.arange(len(starts), dtype=np.int64)
            broken = np.flatnonzero(~header_ok)
            if len(broken):  # the records after it were framed with a corrupt length
                cut = int(broken[0])
                starts, lengths, ok, indices = (a[:cut] for a in (starts, lengths, ok, indices))
                error = self._error(int(self.index + cut), _CORRUPT_LENGTH)
            self.index += len(starts) if error is None else 0
            for index in indices[~ok].tolist():
                if self.on_bad_checksum is None:
                    raise self._error(index, "corrupt record data checksum")
                self.on_bad_checksum(index)
            if error is not None:
                raise error
            parts.append((starts[ok], lengths[ok], indices[ok]))
            good += int(ok.sum())
            if not len(starts):
                break
        if not parts:
            empty = np.zeros(0, np.int64)
            return self.buf, empty, empty, empty
        starts = np.concatenate([p[0] for p in parts]) - self.base
        ends = starts + np.concatenate([p[1] for p in parts])
        return self.buf, starts, ends, np.concatenate([p[2] for p in parts])


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _frame(buf: bytes, pos: int, left: int):
    """Up to `left` whole records from buf[pos:] (header, data and data checksum all in buf):
    (the offset in buf of each one's data, its length, whether its length checksum is right,
    whether its data checksum is right, the position after the last), in one compiled pass
    (sampler/io/tfrecord_jit.py)."""
    jit = kernels("sampler.io.tfrecord_jit")
    *framed, pos = jit.frame(np.frombuffer(buf, np.uint8), pos, left, jit._TABLES)
    return (*framed, int(pos))


_CORRUPT_LENGTH = "corrupt record length checksum (not a TFRecord file?)"


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(
    path: str, f, on_bad_checksum: Callable[[int], None] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(index, data) of the records of a TFRecord stream, checking framing and checksums.

    Broken framing ends the file with a UserError. A record whose data checksum is wrong
    is passed to `on_bad_checksum(index)` and skipped (its length was intact, so the next
    record is found), or is a UserError when no callback is given.
    """
    framer = RecordFramer(path, f, on_bad_checksum)
    # With a callback, one record at a time, so that it is called when the record is reached.
    count = 1 if on_bad_checksum is not None else 256
    while True:
        buf, starts, ends, indices = framer.take(count)
        if not len(starts):
            return
        for index, start, end in zip(indices.tolist(), starts.tolist(), ends.tolist(), strict=True):
            yield index, buf[start:end]
