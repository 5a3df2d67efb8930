"""CSV tables: a header row, then one row per node/edge; vector cells are `;`-joined values.

Blank lines are skipped. A quoted cell may hold line breaks, but broken quoting fails the read
naming the line where the record (and its open quote) starts: a quote left open at the end of
the file, text after a closing quote, a record spanning more than MAX_RECORD_LINES lines, or a
multi-line record with the wrong number of cells (an unterminated quote that swallowed the rows
after it). Numbers are parsed as Python's `float` / `int` parse them; a number written finite
that float32 cannot hold (`3.5e38`: it would become infinite) is a bad row, as is an integer
past int64 (see `sampler.io.readers` for the contract and `sampler.io.writers` for the exact
encoding).

Reading is by columns: blocks of the file cut at record boundaries are parsed by Arrow's CSV
reader (`csv_blocks`), batches of cells converted by Arrow compute (vector cells split on `;`).
A block Arrow might read differently from Python's csv module, or with a record of the wrong
number of cells, is read by the exact path (Python's csv module, line by line); so is a batch
with a bad cell, or a cell Arrow's number parsers might read differently, which then reports
each bad row with its row and line exactly as before.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import csv_blocks
from sampler.io.csv_blocks import MAX_RECORD_LINES
from sampler.io.files import open_file
from sampler.io.read_common import BadRecord, arrow_schema, first_line, fixed_list

__all__ = ["MAX_RECORD_LINES", "VECTOR_SEPARATOR", "read_csv"]

VECTOR_SEPARATOR = ";"
_CSV_FIELD_LIMIT = 2**31 - 1


class _BadCell(Exception):
    """A bad cell found in a batch: (batch index, column, reason). Internal to this module."""

    def __init__(self, index: int, name: str, reason: str):
        super().__init__(reason)
        self.index, self.name, self.reason = index, name, reason


class _CsvBatch:
    """Cells of one batch of CSV rows, column by column, with their row and line numbers."""

    def __init__(self, count: int):
        self.cells: list[list[str]] = [[] for _ in range(count)]
        self.rows: list[int] = []
        self.lines: list[int] = []


class _Piece:
    """Consecutive good records (the right number of cells): the cells of the wanted columns,
    their data row numbers and the lines they start on (computed only when needed)."""

    def __init__(self, cells: list[pa.Array], rows: np.ndarray, lines, marks: str = "(x"):
        self.cells, self.rows, self._lines = cells, rows, lines
        self.marks = marks  # of "(", "x": those that may be in its cells (see _fast_numbers)

    def __len__(self) -> int:
        return len(self.rows)

    def lines(self) -> np.ndarray:
        if callable(self._lines):
            self._lines = self._lines()
        return self._lines

    def split(self, at: int) -> tuple[_Piece, _Piece]:
        def part(lo, hi):
            lines = (lambda: self.lines()[lo:hi]) if callable(self._lines) else self._lines[lo:hi]
            cells = [c.slice(lo, hi - lo) for c in self.cells]
            return _Piece(cells, self.rows[lo:hi], lines, self.marks)

        return part(0, at), part(at, len(self))


class _Batcher:
    """Groups pieces into batches of `batch_rows` records and reads each as a table."""

    def __init__(self, path, schema, id_columns, specs, batch_rows, report):
        self.path, self.schema, self.id_columns, self.specs = path, schema, id_columns, specs
        self.batch_rows, self.report = batch_rows, report
        self.pieces: list[_Piece] = []
        self.count = 0

    def add(self, piece: _Piece) -> Iterator[pa.Table]:
        while len(piece):
            if self.count + len(piece) < self.batch_rows:
                self.pieces.append(piece)
                self.count += len(piece)
                return
            head, piece = piece.split(self.batch_rows - self.count)
            self.pieces.append(head)
            yield from self.flush()

    def flush(self) -> Iterator[pa.Table]:
        if not self.pieces:
            return
        pieces, self.pieces, self.count = self.pieces, [], 0
        cells = [
            pa.concat_arrays([p.cells[k] for p in pieces]) for k in range(len(self.schema.names))
        ]
        marks = "".join(sorted({mark for p in pieces for mark in p.marks}))
        table = _fast_table(self.schema, self.id_columns, self.specs, cells, marks)
        if table is None:  # a bad cell, or one the fast parsers leave to Python
            batch = _CsvBatch(0)
            batch.cells = [column.to_pylist() for column in cells]
            batch.rows = np.concatenate([p.rows for p in pieces]).tolist()
            batch.lines = np.concatenate([p.lines() for p in pieces]).tolist()
            table = _csv_table(
                self.path, self.schema, self.id_columns, self.specs, batch, self.report
            )
        if table is not None:
            yield table


def read_csv(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # Long vector cells exceed the 128 KiB default.
    schema = arrow_schema(id_columns, specs)
    wanted = list(schema.names)
    with open_file(path) as raw:
        source = csv_blocks.Source(path, raw)
        lines = source.lines()
        header = next(_csv_records(path, csv.reader(lines, strict=True)), None)
        if header is None:
            return
        lines.close()
        _, _, _, names = header
        positions = []
        for name in wanted:
            count = names.count(name)
            if count == 0:
                raise UserError(f"{path}: missing column '{name}' (the header has {names})")
            if count > 1:
                raise UserError(f"{path}: the header has column '{name}' {count} times")
            positions.append(names.index(name))
        batcher = _Batcher(path, schema, id_columns, specs, batch_rows, report)
        while True:
            if not source.eof and len(source.buf) - source.pos < csv_blocks.READ_BYTES:
                source.read()
            data = source.buf[source.pos :]
            if not data:
                break
            end = csv_blocks.cut(data, source.eof)
            if end is None or (not end and len(data) > csv_blocks.MAX_BLOCK_BYTES):
                # Quotes the fast path cannot follow: the exact path reads the rest.
                records = csv.reader(source.lines(), strict=True)
                yield from _exact(path, records, source, len(names), positions, batcher, report)
                break
            if not end:
                source.read()
                continue
            block = data[:end]
            cells = None
            if csv_blocks.fast_block(block):
                cells = csv_blocks.arrow_cells(block, len(names), positions)
            if cells is None:
                records = csv.reader(_block_lines(path, block, source.line), strict=True)
                yield from _exact(path, records, source, len(names), positions, batcher, report)
            else:
                rows = source.row + 1 + np.arange(len(cells[0]), dtype=np.int64)
                lines = _lazy_lines(path, block, source.line, source.row)
                marks = "".join(
                    m for m in "(x" if m.encode() in block or m.upper().encode() in block
                )
                source.row += len(rows)
                yield from batcher.add(_Piece(cells, rows, lines, marks))
            source.pos += end
            source.line += csv_blocks.count_lines(block)
        yield from batcher.flush()


def columns_of(path: str) -> list[str] | None:
    """The names in a CSV file's header; None for a file without one (empty)."""
    with open_file(path) as raw:
        lines = csv_blocks.Source(path, raw).lines()
        header = next(_csv_records(path, csv.reader(lines, strict=True)), None)
        lines.close()
    return None if header is None else list(header[3])


def _block_lines(path: str, block: bytes, line: int) -> Iterator[str]:
    return (text for text, _ in csv_blocks.text_lines(path, block, line))


def _lazy_lines(path: str, block: bytes, line: int, row: int):
    """The lines the records of a block start on, read again by the exact path when asked."""

    def lines() -> np.ndarray:
        records = csv.reader(_block_lines(path, block, line), strict=True)
        found = [start for _, start, _, _ in _csv_records(path, records, row, line - 1)]
        return np.array(found, dtype=np.int64)

    return lines


def _exact(path, records, source, columns, positions, batcher, report) -> Iterator[pa.Table]:
    """Records read by Python's csv module, in order: good ones go to the batcher, and a record
    with the wrong number of cells is reported where it is."""
    offset = source.line - 1  # the reader's first line is the source's current line
    cells: list[list[str]] = [[] for _ in positions]
    rows: list[int] = []
    lines: list[int] = []

    def piece() -> _Piece:
        return _Piece(
            [pa.array(column, pa.string()) for column in cells],
            np.array(rows, dtype=np.int64),
            np.array(lines, dtype=np.int64),
        )

    for row, line, span, found in _csv_records(path, records, source.row, offset):
        source.row = row
        if len(found) != columns:
            if span > 1:  # an unterminated quote swallowed the lines after it
                raise UserError(_broken_quote(path, line, span, len(found), columns))
            yield from batcher.add(piece())
            cells, rows, lines = [[] for _ in positions], [], []
            reason = f"{len(found)} cells, but the header has {columns} columns"
            report(BadRecord(path, row, reason, line))
            continue
        for column, position in zip(cells, positions, strict=True):
            column.append(found[position])
        rows.append(row)
        lines.append(line)
        if batcher.count + len(rows) == batcher.batch_rows:
            yield from batcher.add(piece())
            cells, rows, lines = [[] for _ in positions], [], []
    yield from batcher.add(piece())


def _csv_records(path, reader, row: int = -1, offset: int = 0):
    """(data row number, first line, lines spanned, cells) of the non-blank CSV records; the
    header is row 0 (`row`: the row before the first record read here; `offset`: the lines
    before the reader's first one). Broken quoting is a UserError naming the line the record
    starts on."""
    end = offset  # the last line of the previous record
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            if reader.line_num + offset > end + 1:
                raise UserError(
                    f"{path}: line {end + 1}: bad CSV quoting: the quote opened in the record "
                    f"starting on line {end + 1} is not closed properly ({first_line(e)})"
                ) from e
            raise UserError(
                f"{path}: line {reader.line_num + offset}: bad CSV: {first_line(e)}"
            ) from e
        start, end = end + 1, reader.line_num + offset
        if not cells:
            continue
        if end - start + 1 > MAX_RECORD_LINES:
            raise UserError(
                f"{path}: line {start}: bad CSV quoting: a quoted cell opened on line {start} "
                f"spans {end - start + 1} lines (at most {MAX_RECORD_LINES} allowed); is a "
                "closing quote missing?"
            )
        row += 1
        yield row, start, end - start + 1, cells


def _broken_quote(path, line: int, span: int, cells: int, columns: int) -> str:
    return (
        f"{path}: line {line}: bad CSV quoting: a quoted cell opened on line {line} spans "
        f"{span} lines and its record has {cells} cells, but the header has {columns} columns; "
        "is a closing quote missing?"
    )


def _csv_table(path, schema, id_columns, specs, batch: _CsvBatch, report) -> pa.Table | None:
    """The batch as a table; bad rows are reported and left out (None if no row is left)."""
    try:
        return _csv_arrays(schema, id_columns, specs, batch)
    except _BadCell:
        pass
    # Slow path, only for a batch with a bad cell: check every cell, report each bad row once.
    bad: dict[int, str] = {}
    for name, cells in zip(schema.names, batch.cells, strict=True):
        spec = None if name in id_columns else specs[name]
        for index, cell in enumerate(cells):
            if index not in bad:
                reason = _cell_problem(cell, spec)
                if reason is not None:
                    bad[index] = f"column '{name}': {reason}"
    for index in sorted(bad):
        report(BadRecord(path, batch.rows[index], bad[index], batch.lines[index]))
    keep = [i for i in range(len(batch.rows)) if i not in bad]
    if not keep:
        return None
    good = _CsvBatch(len(batch.cells))
    good.cells = [[column[i] for i in keep] for column in batch.cells]
    good.rows = [batch.rows[i] for i in keep]
    good.lines = [batch.lines[i] for i in keep]
    try:
        return _csv_arrays(schema, id_columns, specs, good)
    except _BadCell as e:  # the checks above and the parser disagree: still one clear line
        index = e.index
        raise UserError(
            f"{path}: row {good.rows[index]} (line {good.lines[index]}): column '{e.name}': "
            f"{e.reason}"
        ) from None


def _fast_table(schema, id_columns, specs, cells: list[pa.Array], marks: str) -> pa.Table | None:
    """The batch as a canonical table by Arrow compute; None if a cell is bad or is one the
    Arrow parsers might read differently from Python (the exact path then reads the batch)."""
    arrays = []
    for name, column in zip(schema.names, cells, strict=True):
        if name in id_columns:
            if _any(pc.equal(pc.binary_length(column), 0)):
                return None
            arrays.append(column.cast(pa.binary()))
            continue
        array = _fast_feature(column, specs[name], marks)
        if array is None:
            return None
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=schema)


def _any(mask: pa.Array) -> bool:
    return bool(pc.any(mask).as_py()) if len(mask) else False


def _fast_feature(column: pa.Array, spec: FeatureSpec, marks: str) -> pa.Array | None:
    rows = len(column)
    values = column
    if spec.shape and spec.width == 0:  # only empty cells: no values
        if _any(pc.not_equal(pc.binary_length(column), 0)):
            return None
        values = column.slice(0, 0)
    elif spec.shape:  # (an empty cell splits into one empty value: right for width 1 only)
        parts = pc.split_pattern(column, VECTOR_SEPARATOR)
        if _any(pc.not_equal(pc.list_value_length(parts), spec.width)):
            return None
        values = pc.list_flatten(parts)
    if spec.kind == "bytes":
        flat = values.cast(pa.binary())
    else:
        flat = _fast_numbers(values, spec.kind, marks)
        if flat is None:
            return None
    return fixed_list(flat, spec, rows) if spec.shape else flat


def _fast_numbers(values: pa.Array, kind: str, marks: str) -> pa.Array | None:
    """float32 / int64 values parsed as Python's float / int parse them, or None. Arrow also
    reads hexadecimal integers and `nan(...)`, which Python does not: those go to Python."""
    try:
        if kind == "int":
            if "x" in marks and _any(pc.match_substring(values, "x", ignore_case=True)):
                return None
            return pc.cast(values, pa.int64())
        if "(" in marks and _any(pc.match_substring(values, "(")):
            return None
        wide = pc.cast(values, pa.float64())  # rounded once to double, as Python's float
    except pa.ArrowInvalid:
        return None
    narrow = wide.cast(pa.float32(), safe=False)
    infinite = pc.is_inf(narrow)
    if _any(infinite):  # only the infinities written as such may be infinite
        texts = values.filter(infinite).to_pylist()
        if not all(_infinity_text(text) for text in texts):
            return None
    return narrow


def _infinity_text(text: str) -> bool:
    return text.strip().lstrip("+-").lower() in ("inf", "infinity")


def _cell_problem(cell: str, spec: FeatureSpec | None) -> str | None:
    """Why one CSV cell cannot be read (`spec` None: an id cell), or None if it can."""
    if spec is None:
        return "missing id" if not cell else None
    if spec.shape:
        parts = [] if cell == "" and spec.width != 1 else cell.split(VECTOR_SEPARATOR)
        if len(parts) != spec.width:
            return f"{len(parts)} values, expected {spec.width} (joined by ';')"
    else:
        parts = [cell]
    if spec.kind == "bytes":
        return None
    for part in parts:
        try:
            number = (float if spec.kind == "float" else int)(part)
        except ValueError:
            return f"{_clip(part)} is not {'a number' if spec.kind == 'float' else 'an integer'}"
        if spec.kind == "int" and not -(2**63) <= number < 2**63:
            return f"{_clip(part)} does not fit in int64"
        if spec.kind == "float" and _overflows(number, part):
            return f"{_clip(part)} does not fit in float32"
    return None


def _overflows(number: float, text: str) -> bool:
    """A number written finite that float32 cannot hold (it would become infinite)."""
    with np.errstate(over="ignore"):
        return math.isinf(np.float32(number)) and not _infinity_text(text)


def _csv_arrays(schema, id_columns, specs, batch: _CsvBatch) -> pa.Table:
    """The batch as a canonical table; raises _BadCell at the first bad cell."""
    arrays = []
    for name, cells in zip(schema.names, batch.cells, strict=True):
        if name in id_columns:
            for index, cell in enumerate(cells):
                if not cell:
                    raise _BadCell(index, name, "missing id")
            arrays.append(pa.array(cells, pa.string()).cast(pa.binary()))
        else:
            arrays.append(_csv_feature(cells, specs[name], lambda i, r, n=name: _BadCell(i, n, r)))
    return pa.Table.from_arrays(arrays, schema=schema)


def _csv_feature(cells: list[str], spec: FeatureSpec, fail) -> pa.Array:
    rows = len(cells)
    if spec.shape:
        values = []
        for index, cell in enumerate(cells):
            # An empty cell is one empty value if the width is 1, else no values at all.
            parts = [] if cell == "" and spec.width != 1 else cell.split(VECTOR_SEPARATOR)
            if len(parts) != spec.width:
                raise fail(index, f"{len(parts)} values, expected {spec.width} (joined by ';')")
            values.extend(parts)
        row_of = lambda i: i // spec.width  # noqa: E731
    else:
        values = cells
        row_of = lambda i: i  # noqa: E731
    if spec.kind == "bytes":
        flat = pa.array(values, pa.string()).cast(pa.binary())
    else:
        flat = pa.array(_parse_numbers(values, spec.kind, lambda i, r: fail(row_of(i), r)))
    return fixed_list(flat, spec, rows) if spec.shape else flat


def _parse_numbers(cells: list[str], kind: str, fail) -> np.ndarray:
    parse = float if kind == "float" else int
    try:
        numbers = [parse(cell) for cell in cells]
    except ValueError:
        for index, cell in enumerate(cells):
            try:
                parse(cell)
            except ValueError:
                what = "a number" if kind == "float" else "an integer"
                raise fail(index, f"{_clip(cell)} is not {what}") from None
        raise
    if kind == "float":
        with np.errstate(over="ignore"):
            array = np.array(numbers, dtype=np.float32)
        for index in np.flatnonzero(np.isinf(array)).tolist():
            if _overflows(numbers[index], cells[index]):
                raise fail(index, f"{_clip(cells[index])} does not fit in float32")
        return array
    try:
        return np.array(numbers, dtype=np.int64)
    except OverflowError:
        for index, number in enumerate(numbers):
            if not -(2**63) <= number < 2**63:
                raise fail(index, f"{_clip(cells[index])} does not fit in int64") from None
        raise


def _clip(text: str, limit: int = 40) -> str:
    """The quoted, escaped (so one-line) and shortened text of a cell."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
