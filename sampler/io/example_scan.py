"""A schema-driven scan of many serialized tf.Example records at once (numpy only).

Records written by one writer share a layout: the same map entries in the same order, each
value a one-kind Feature holding one packed list (floats, varints) or a run of bytes values.
`layout_of` reads that layout from one record; `scan` then walks every record of a batch with
one cursor per record, each step a numpy operation over the whole batch, so the Python work per
batch is a constant and none is per record.

A record the scan accepts is one whose bytes follow the layout exactly (same keys in the same
order, same value kinds, well-formed varints and lengths, the lists of the wanted features
holding exactly their width of values); its values are then exactly what the protobuf parser
gives. Every other record (another key order, a missing or extra feature, unknown fields, an
unpacked list, anything broken) is left to the caller's exact per-record path.
"""

from __future__ import annotations

import dataclasses

import numpy as np

_KIND_TAG = {"bytes": 0x0A, "float": 0x12, "int": 0x1A}
_TAG_KIND = {tag: kind for kind, tag in _KIND_TAG.items()}
_TOO_LONG = 1 << 40  # no length in a record read here is this long


@dataclasses.dataclass(frozen=True)
class Entry:
    """One map entry of the layout: its key, value kind and, if wanted, its width."""

    key: bytes
    kind: str
    width: int | None  # None: not wanted (checked, then skipped)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    for _ in range(10):
        if pos >= len(data):
            raise ValueError("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
    raise ValueError("varint too long")


def layout_of(record: bytes, wanted: dict[str, tuple[str, int]]) -> tuple[Entry, ...] | None:
    """The layout of one record whose wanted features ({name: (kind, width)}) all have their
    kind; None if the record is not in the plain layout this scan reads."""
    try:
        if not record or record[0] != 0x0A:
            return None
        length, pos = _varint(record, 1)
        if pos + length != len(record):
            return None
        entries = []
        while pos < len(record):
            if record[pos] != 0x0A:
                return None
            length, pos = _varint(record, pos + 1)
            end = pos + length
            if record[pos] != 0x0A:
                return None
            size, pos = _varint(record, pos + 1)
            key = bytes(record[pos : pos + size])
            pos += size
            if record[pos] != 0x12:
                return None
            size, pos = _varint(record, pos + 1)
            if pos + size != end or record[pos] not in _TAG_KIND:
                return None
            kind = _TAG_KIND[record[pos]]
            name = key.decode("utf-8")
            if name in wanted and wanted[name][0] != kind:
                return None
            width = wanted[name][1] if name in wanted else None
            entries.append(Entry(key, kind, width))
            pos = end
    except (IndexError, ValueError, UnicodeDecodeError):
        return None
    keys = [entry.key for entry in entries]
    if len(set(keys)) != len(keys) or not {k.encode() for k in wanted} <= set(keys):
        return None
    return tuple(entries)


class _Scan:
    """Cursors over a batch of records in one buffer; `ok` marks the records still readable."""

    def __init__(self, buf: bytes, starts: np.ndarray, ends: np.ndarray):
        self.data = np.frombuffer(buf, dtype=np.uint8)
        self.last = len(self.data) - 1
        self.cur = starts.astype(np.int64)
        self.end = ends.astype(np.int64)
        self.ok = np.ones(len(starts), dtype=bool)

    def byte(self, at: np.ndarray) -> np.ndarray:
        return self.data[np.minimum(at, self.last)]

    def expect(self, tag: int, where: np.ndarray | None = None) -> None:
        """The next byte is `tag` (only where `where`, if given)."""
        hit = self.byte(self.cur) == tag
        if where is None:
            self.ok &= hit
            self.cur += 1
        else:
            self.ok &= hit | ~where
            self.cur += where

    def varint(self, where: np.ndarray | None = None) -> np.ndarray:
        """The next varint (only where `where`; 0 elsewhere), as int64 (uint64 bits)."""
        first = self.byte(self.cur)
        value = (first & 0x7F).astype(np.uint64)
        more = first >= 0x80
        if where is not None:
            value[~where] = 0
            more &= where
            self.cur += where
        else:
            self.cur += 1
        if more.any():
            rows = np.flatnonzero(more)
            for shift in range(7, 70, 7):
                byte = self.byte(self.cur[rows])
                self.cur[rows] += 1
                value[rows] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
                if shift == 63:  # the tenth byte: one bit left, and no more bytes
                    self.ok[rows[byte > 1]] = False
                    break
                rows = rows[byte >= 0x80]
                if not len(rows):
                    break
        self.cur = np.minimum(self.cur, self.end)
        return value.view(np.int64)

    def length(self, limit: np.ndarray, where: np.ndarray | None = None) -> np.ndarray:
        """A length that must fit before `limit`; 0 (and not ok) where it does not."""
        size = self.varint(where)
        bad = (size < 0) | (size > _TOO_LONG) | (self.cur + size > limit)
        self.ok &= ~bad
        size[bad] = 0
        return size

    def skip_to(self, limit: np.ndarray) -> None:
        self.cur = np.minimum(limit, self.end)


def scan(buf: bytes, starts: np.ndarray, ends: np.ndarray, layout: tuple[Entry, ...]):
    """(ok, values) of the records buf[starts[i]:ends[i]] read by `layout`.

    values: {key: array} for the wanted entries, rows of not-ok records undefined: float ->
    float32 (n, width); int -> int64 (n, width); bytes -> (starts, lengths) int64 (n, width)
    of the values in buf.
    """
    s = _Scan(buf, starts, ends)
    s.expect(0x0A)
    size = s.length(s.end)
    s.ok &= s.cur + size == s.end
    values = {}
    for entry in layout:
        s.expect(0x0A)
        entry_end = s.cur + s.length(s.end)
        s.expect(0x0A)
        s.ok &= s.length(entry_end) == len(entry.key)
        key = np.frombuffer(entry.key, dtype=np.uint8)
        if len(key):
            at = s.cur[:, None] + np.arange(len(key))
            s.ok &= (s.byte(at) == key).all(axis=1)
        s.cur += len(key)
        s.expect(0x12)
        s.ok &= s.cur + s.length(entry_end) == entry_end
        s.expect(_KIND_TAG[entry.kind])
        s.ok &= s.cur + s.length(entry_end) == entry_end
        read = {"float": _floats, "int": _ints, "bytes": _bytes}[entry.kind]
        found = read(s, entry_end, entry.width)
        if entry.width is not None:
            values[entry.key] = found
        s.ok &= s.cur == entry_end
        s.skip_to(entry_end)
    s.ok &= s.cur == s.end
    return s.ok, values


def _floats(s: _Scan, end: np.ndarray, width: int | None):
    has = s.cur < end  # an empty list has no packed field
    s.expect(0x0A, has)
    size = s.length(end, has)
    s.ok &= size % 4 == 0
    if width is not None:
        s.ok &= size == 4 * width
    at = s.cur.copy()
    s.cur += size
    if width is None:
        return None
    out = np.zeros((len(at), width), dtype=np.float32)
    if width:
        out[:] = _gather_floats(s.data, at, width)
    return out


def _gather_floats(data: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """The `width` little-endian float32 values at each byte offset `at` of data."""
    out = np.zeros((len(at), width), dtype=np.float32)
    span = np.arange(width)
    for align in range(4):
        rows = np.flatnonzero(at % 4 == align)
        if not len(rows):
            continue
        words = data[align : align + (len(data) - align) // 4 * 4].view("<f4")
        first = (at[rows] - align) // 4
        out[rows] = words[np.minimum(first[:, None] + span, len(words) - 1)]
    return out


def _ints(s: _Scan, end: np.ndarray, width: int | None):
    has = s.cur < end
    s.expect(0x0A, has)
    size = s.length(end, has)
    s.ok &= s.cur + size == end
    if width is None:  # every varint up to the end must be well formed
        live = s.cur < end
        while live.any():
            s.varint(live)
            live &= s.ok & (s.cur < end)
        return None
    out = np.zeros((len(s.cur), width), dtype=np.int64)
    for column in range(width):
        s.ok &= s.cur < end
        out[:, column] = s.varint()
    return out


def _bytes(s: _Scan, end: np.ndarray, width: int | None):
    if width is None:
        live = s.cur < end
        while live.any():
            s.expect(0x0A, live)
            s.cur += s.length(end, live)
            live &= s.ok & (s.cur < end)
        return None
    at = np.zeros((len(s.cur), width), dtype=np.int64)
    sizes = np.zeros((len(s.cur), width), dtype=np.int64)
    for column in range(width):
        s.ok &= s.cur < end
        s.expect(0x0A)
        sizes[:, column] = s.length(end)
        at[:, column] = s.cur
        s.cur += sizes[:, column]
    return at, sizes


def gather_bytes(buf: bytes, at: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of the byte strings buf[at[i]:at[i]+sizes[i]] laid end to end."""
    data = np.frombuffer(buf, dtype=np.uint8)
    offsets = np.zeros(len(at) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    index = np.repeat(at - offsets[:-1], sizes) + np.arange(offsets[-1], dtype=np.int64)
    return offsets, data[index]
