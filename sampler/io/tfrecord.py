"""TFRecord framing, read and written without TensorFlow.

A record is: uint64 length, masked CRC32C of the length, the data, masked CRC32C
of the data (all little-endian). Files concatenate into valid files.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator

import google_crc32c  # installed with apache-beam[gcp]

from sampler.errors import UserError

_READ_CHUNK = 1 << 24


def masked_crc(data: bytes) -> int:
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(records: list[bytes]) -> bytes:
    """The TFRecord bytes of `records`."""
    out = []
    for record in records:
        length = struct.pack("<Q", len(record))
        out += [length, struct.pack("<I", masked_crc(length)), record]
        out.append(struct.pack("<I", masked_crc(record)))
    return b"".join(out)


def _read_exact(f, count: int) -> bytes:
    """Up to `count` bytes, read in chunks so a corrupt length cannot allocate a huge buffer."""
    if count <= _READ_CHUNK:
        return f.read(count)
    parts, left = [], count
    while left:
        part = f.read(min(left, _READ_CHUNK))
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def records(
    path: str, f, on_bad_checksum: Callable[[int], None] | None = None
) -> Iterator[tuple[int, bytes]]:
    """(index, data) of the records of a TFRecord stream, checking framing and checksums.

    Broken framing ends the file with a UserError. A record whose data checksum is wrong
    is passed to `on_bad_checksum(index)` and skipped (its length was intact, so the next
    record is found), or is a UserError when no callback is given.
    """
    index = 0
    while True:
        header = f.read(12)
        if not header:
            return
        where = f"{path}: record index {index}"
        if len(header) < 12:
            raise UserError(f"{where}: truncated record header (not a TFRecord file?)")
        (length,) = struct.unpack("<Q", header[:8])
        if masked_crc(header[:8]) != struct.unpack("<I", header[8:])[0]:
            raise UserError(f"{where}: corrupt record length checksum (not a TFRecord file?)")
        data = _read_exact(f, length)
        footer = f.read(4)
        if len(data) < length or len(footer) < 4:
            raise UserError(f"{where}: truncated record (file ends after {len(data)} bytes)")
        if masked_crc(data) != struct.unpack("<I", footer)[0]:
            if on_bad_checksum is None:
                raise UserError(f"{where}: corrupt record data checksum")
            on_bad_checksum(index)
        else:
            yield index, data
        index += 1
