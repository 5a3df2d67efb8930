"""The byte level of the CSV reader: blocks cut at record boundaries, exact line numbers, and
Arrow's CSV parser on the blocks where it reads exactly what Python's `csv` module reads.

A block is parsed by Arrow (`arrow_cells`) only when nothing in it can make the two parsers
differ: no NUL byte, no byte order mark at its start, valid UTF-8, and quotes only as RFC 4180
places them (a quote opens a cell right after a separator or line break, and closes it right
before one, or doubles inside it), so that counting quotes tells which line breaks are inside a
quoted cell. Every other block goes to the exact Python path, read line by line (`text_lines`),
so an error names the exact line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv

from sampler.errors import UserError

BOM = b"\xef\xbb\xbf"
READ_BYTES = 1 << 23
MAX_BLOCK_BYTES = 1 << 26  # a buffer this long without a cut is read by the exact path
MAX_RECORD_LINES = 64  # a quoted cell spanning more lines than this is taken as broken quoting
_QUOTE, _COMMA, _LF, _CR = 34, 44, 10, 13
_BOUNDARY = np.zeros(256, dtype=bool)
_BOUNDARY[[_QUOTE, _COMMA, _LF, _CR]] = True
_LINES = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+")


def count_lines(data: bytes) -> int:
    """Line breaks in data as Python's text files count them (\\r\\n, \\r and \\n)."""
    feeds, returns = data.count(b"\n"), data.count(b"\r")
    if not returns or not feeds:
        return feeds + returns
    array = np.frombuffer(data, dtype=np.uint8)
    after = np.flatnonzero(array[:-1] == _CR) + 1
    return feeds + returns - int(np.count_nonzero(array[after] == _LF))


def text_lines(path: str, data: bytes, line: int):
    """(text, bytes) of each line of data with its line break, decoded one by one; a line that
    is not UTF-8 is a UserError naming it (`line` is the number of the first line)."""
    for number, match in enumerate(_LINES.finditer(data), start=line):
        raw = match.group()
        try:
            yield raw.decode("utf-8"), len(raw)
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: line {number}: not UTF-8 text ({e.reason})") from None


def cut(data: bytes, at_end: bool) -> int | None:
    """Where a block of `data` can end at a record boundary for the fast path: after its last
    line break outside quotes (the whole of data `at_end` of the file); None when the block
    up to there has quotes that counting cannot follow (the exact path must read on)."""
    if b'"' not in data:
        if at_end:
            return len(data)
        last = max(data.rfind(b"\n"), data.rfind(b"\r", 0, len(data) - 1))
        return last + 1 if last >= 0 else 0
    array = np.frombuffer(data, dtype=np.uint8)
    quotes = np.flatnonzero(array == _QUOTE)
    breaks = np.flatnonzero((array == _LF) | (array == _CR))
    inside = np.searchsorted(quotes, breaks) % 2 == 1  # an odd number of quotes before it
    if at_end:
        end = len(data) if len(quotes) % 2 == 0 else None
    else:
        usable = ~inside & (breaks < len(data) - 1)
        usable &= (array[breaks] != _CR) | (array[np.minimum(breaks + 1, len(data) - 1)] != _LF)
        outside = breaks[usable]
        end = int(outside[-1]) + 1 if len(outside) else 0
    if end is None:
        return None
    quotes = quotes[quotes < end]
    if not _quotes_follow_rfc(array, quotes, end):
        return None
    if inside[breaks < end].any() and not _short_records(array, breaks[breaks < end], inside):
        return None
    return end


def _quotes_follow_rfc(array: np.ndarray, quotes: np.ndarray, end: int) -> bool:
    opening = quotes[0::2]  # even rank: opens a cell, or is the second of a doubled quote
    closing = quotes[1::2]  # odd rank: closes a cell, or is the first of a doubled quote
    before = array[np.maximum(opening - 1, 0)]
    if not (_BOUNDARY[before] | (opening == 0)).all():
        return False
    after = array[np.minimum(closing + 1, len(array) - 1)]
    return bool((_BOUNDARY[after] | (closing + 1 == end)).all())


def _short_records(array, breaks, inside) -> bool:
    """No record spans more than MAX_RECORD_LINES lines (and no \\r inside quotes, whose line
    counting is left to the exact path)."""
    inside = inside[: len(breaks)]
    if (array[breaks[inside]] == _CR).any():
        return False
    # Lines of a record: 1 + the line breaks inside quotes since the last one outside.
    outside_before = np.cumsum(~inside)
    runs = np.bincount(outside_before[inside])
    return int(runs.max(initial=0)) + 1 <= MAX_RECORD_LINES


def fast_block(data: bytes) -> bool:
    """Whether Arrow may parse this block (see the module docstring)."""
    if b"\x00" in data or data.startswith(BOM):
        return False
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def arrow_cells(data: bytes, columns: int, positions: list[int]) -> list[pa.Array] | None:
    """The cells of the wanted columns of a block, as string arrays; None when a record has
    the wrong number of cells (the exact path reports it)."""
    names = [f"c{k}" for k in range(columns)]
    wanted = [names[k] for k in positions]
    try:
        table = pa_csv.read_csv(
            pa.py_buffer(data),
            read_options=pa_csv.ReadOptions(
                column_names=names, use_threads=False, block_size=max(len(data), 1 << 20) + 1
            ),
            parse_options=pa_csv.ParseOptions(
                newlines_in_values=b'"' in data, ignore_empty_lines=True
            ),
            convert_options=pa_csv.ConvertOptions(
                column_types={name: pa.string() for name in wanted},
                include_columns=wanted,
                strings_can_be_null=False,
                quoted_strings_can_be_null=False,
                check_utf8=False,
            ),
        )
    except pa.ArrowInvalid:
        return None
    return [table.column(name).combine_chunks() for name in wanted]


class Source:
    """The bytes of a CSV file (after a leading byte order mark), read block by block, with
    the line number and data row number reached."""

    def __init__(self, path: str, f):
        self.path, self.f = path, f
        self.buf = f.read(READ_BYTES)
        self.eof = not self.buf
        if self.buf.startswith(BOM):
            self.buf = self.buf[len(BOM) :]
        self.pos = 0
        self.line = 1  # the line buf[pos] is on
        self.row = 0  # data rows read so far (the header is row 0)

    def read(self) -> bool:
        """Reads another block onto the unread bytes; False at the end of the file."""
        if self.eof:
            return False
        part = self.f.read(READ_BYTES)
        if not part:
            self.eof = True
            return False
        self.buf = self.buf[self.pos :] + part
        self.pos = 0
        return True

    def lines(self) -> Iterator[str]:
        """The next lines, decoded one by one and consumed (the exact path)."""
        while True:
            if self.pos >= len(self.buf) and not self.read():
                return
            match = _LINES.match(self.buf, self.pos)
            raw = match.group()
            if match.end() == len(self.buf) and not raw.endswith(b"\n") and self.read():
                continue  # the line (or its \r\n) may go on in the next block
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(
                    f"{self.path}: line {self.line}: not UTF-8 text ({e.reason})"
                ) from None
            self.pos = match.end()
            self.line += 1
            yield text
