"""Pieces that one step writes to a file for a later step of the same run to read, so that only
where they are crosses the shuffle (the `sharded` placement's node rows and edges on their way
to the assembly): the local runner holds every shuffle whole in its own memory, and the
assembly's was the largest (1.5x the records).

A step writes its pieces one after another into one new file of a run's temporary folder and
passes on a PieceRange per piece; the reader reads that range. A retried step writes a new file
(a new name), so a range always points into the file of the attempt whose outputs carry it.
The folder goes when the run is done (the caller's job).
"""

from __future__ import annotations

import typing
import uuid
from collections.abc import Iterable, Iterator

from sampler.errors import UserError
from sampler.io import files

Piece = bytes | bytearray | list  # one piece's bytes, or its buffers in order


class PieceRange(typing.NamedTuple):
    """Bytes [offset, offset + length) of the file `name` of the folder: one piece."""

    name: str
    offset: int
    length: int


def write_pieces(folder: str, prefix: str, pieces: Iterable[tuple[object, Piece]]) -> list:
    """[(key, PieceRange)] of `pieces` ((key, bytes, or buffers written one after another as
    one piece: a value with its arrays out of band)), written in order to one new file of
    `folder`, named `prefix-<random>`; a file that cannot be written is a UserError."""
    name = f"{prefix}-{uuid.uuid4().hex}"
    path = files.join(folder, name)
    ranges, offset = [], 0
    try:
        with files.create_file(path) as out:
            for key, data in pieces:
                start = offset
                for buffer in [data] if isinstance(data, bytes | bytearray) else data:
                    out.write(buffer)
                    offset += memoryview(buffer).nbytes
                ranges.append((key, PieceRange(name, start, offset - start)))
    except OSError as e:
        raise files.write_error(path, e) from e
    return ranges


def read_pieces(folder: str, ranges: list[PieceRange]) -> Iterator[tuple[int, bytearray]]:
    """(i, the bytes of ranges[i], writable) for each range of a file of `folder`, file by file (each
    opened once); a range that the file no longer holds is a UserError."""
    by_name: dict[str, list[int]] = {}
    for i, where in enumerate(ranges):
        by_name.setdefault(where.name, []).append(i)
    for name, indices in by_name.items():
        path = files.join(folder, name)
        with files.open_file(path) as f:
            for i in sorted(indices, key=lambda i: ranges[i].offset):
                f.seek(ranges[i].offset)
                data = bytearray(ranges[i].length)
                got = _read_into(f, data)
                if got != ranges[i].length:
                    raise UserError(
                        f"{path}: cut short ({got} of {ranges[i].length} bytes at"
                        f" {ranges[i].offset}): was the run's temporary folder changed?"
                    )
                yield i, data


def _read_into(f, data: bytearray) -> int:
    """Reads into `data` until it is full or the file ends: how many bytes were read."""
    view, got = memoryview(data), 0
    while got < len(data):
        n = f.readinto(view[got:])
        if not n:
            break
        got += n
    return got
