"""CSV tables: a header row, then one row per node/edge; vector cells are `;`-joined values.

Blank lines are skipped. A quoted cell may hold line breaks, but broken quoting fails the read
naming the line where the record (and its open quote) starts: a quote left open at the end of
the file, text after a closing quote, a record spanning more than MAX_RECORD_LINES lines, or a
multi-line record with the wrong number of cells (an unterminated quote that swallowed the rows
after it). Numbers are parsed with Python's `float` / `int` (see
`sampler.io.readers` for the contract and `sampler.io.writers` for the exact encoding).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io.files import open_file
from sampler.io.read_common import BadRecord, arrow_schema, first_line, fixed_list

VECTOR_SEPARATOR = ";"
_CSV_FIELD_LIMIT = 2**31 - 1
MAX_RECORD_LINES = 64  # a quoted cell spanning more lines than this is taken as broken quoting


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


def read_csv(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # Long vector cells exceed the 128 KiB default.
    schema = arrow_schema(id_columns, specs)
    wanted = list(schema.names)
    with open_file(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        records = _csv_records(path, csv.reader(text, strict=True))
        header = next(records, None)
        if header is None:
            return
        _, _, _, names = header
        positions = []
        for name in wanted:
            count = names.count(name)
            if count == 0:
                raise UserError(f"{path}: missing column '{name}' (the header has {names})")
            if count > 1:
                raise UserError(f"{path}: the header has column '{name}' {count} times")
            positions.append(names.index(name))
        batch = _CsvBatch(len(wanted))
        for row, line, span, cells in records:
            if len(cells) != len(names):
                if span > 1:  # an unterminated quote swallowed the lines after it
                    raise UserError(_broken_quote(path, line, span, len(cells), len(names)))
                reason = f"{len(cells)} cells, but the header has {len(names)} columns"
                report(BadRecord(path, row, reason, line))
                continue
            for column, position in zip(batch.cells, positions, strict=True):
                column.append(cells[position])
            batch.rows.append(row)
            batch.lines.append(line)
            if len(batch.rows) == batch_rows:
                table = _csv_table(path, schema, id_columns, specs, batch, report)
                if table is not None:
                    yield table
                batch = _CsvBatch(len(wanted))
        if batch.rows:
            table = _csv_table(path, schema, id_columns, specs, batch, report)
            if table is not None:
                yield table


def _csv_records(path, reader) -> Iterator[tuple[int, int, int, list[str]]]:
    """(data row number, first line, lines spanned, cells) of the non-blank CSV records; the
    header is row 0. Broken quoting is a UserError naming the line the record starts on."""
    row = -1
    end = 0  # the last line of the previous record
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except UnicodeDecodeError as e:
            raise UserError(
                f"{path}: near line {reader.line_num + 1}: not UTF-8 text ({e.reason})"
            ) from e
        except csv.Error as e:
            if reader.line_num > end + 1:
                raise UserError(
                    f"{path}: line {end + 1}: bad CSV quoting: the quote opened in the record "
                    f"starting on line {end + 1} is not closed properly ({first_line(e)})"
                ) from e
            raise UserError(f"{path}: line {reader.line_num}: bad CSV: {first_line(e)}") from e
        start, end = end + 1, reader.line_num
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
    return None


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
            return np.array(numbers, dtype=np.float32)
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
