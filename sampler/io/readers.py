"""Readers of Unigraph tables (CSV, TFRecord of tf.Example, Parquet) into canonical Arrow tables.

`read_table` reads one file and yields canonical tables (CONVENTIONS.md) of at most `batch_rows`
rows: the id columns in the order asked for, as `binary`, then the features sorted by name with
`FeatureSpec.arrow_type`. Columns of the file that are not asked for are ignored. An empty
(0-byte) file, or one with only a header, yields no table at all.

Formats (see `sampler.io.writers` for the exact CSV encoding):
  * CSV: a header row, then one row per node/edge; vector cells are `;`-joined values. Blank
    lines are skipped. Numbers are parsed with Python's `float` / `int`.
  * TFRecord of tf.Example: ids are bytes_list or int64_list features (ints become their
    decimal text); features must have the kind of their dtype (float_list, int64_list,
    bytes_list) and exactly `width` values.
  * Parquet: ids may be integer or string/binary columns (ints become decimal text); numeric
    columns are cast to float32 / int64; vectors may be list, large_list or fixed_size_list
    columns whose rows all have `width` values.

Two kinds of user mistakes:
  * File-level ones (missing file or column, a column type that cannot hold the feature, a
    CSV that is not UTF-8 or not CSV, a file that is not Parquet, broken TFRecord framing)
    always raise UserError naming the file.
  * Row-level ones (a CSV row with the wrong number of cells, a cell that does not parse, a
    vector of the wrong length, a missing/empty/null id or value, a record that is not a
    tf.Example, a TFRecord whose data checksum is wrong) are `BadRecord`s naming the file,
    the row (CSV/Parquet: 1-based data row; TFRecord: 0-based record index) and the reason.
    Without `on_bad` the first one raises UserError (its `message()`); with `on_bad` every
    bad row is passed to it and skipped, and the good rows are yielded.
Files are opened with Beam's `FileSystems`, so `gs://` paths work. Nothing here unpickles.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import tfrecord
from sampler.io.files import check_format, open_file

VECTOR_SEPARATOR = ";"
_CSV_FIELD_LIMIT = 2**31 - 1
_READ_CHUNK = 1 << 24
_KIND_OF_LIST = {"float_list": "float", "int64_list": "int", "bytes_list": "bytes"}
_LIST_OF_KIND = {kind: name for name, kind in _KIND_OF_LIST.items()}


@dataclasses.dataclass(frozen=True)
class BadRecord:
    """One row of a table file that could not be read, and why."""

    file: str
    row: int  # CSV/Parquet: 1-based data row; TFRecord: 0-based record index
    reason: str  # e.g. "column 'f': 'x' is not a number"
    line: int | None = None  # CSV: the line the row starts on
    unit: str = "row"  # "row" or "record index"

    def location(self) -> str:
        where = f"{self.unit} {self.row}"
        return f"{where} (line {self.line})" if self.line is not None else where

    def message(self) -> str:
        return f"{self.file}: {self.location()}: {self.reason}"

    def to_json(self, **extra) -> str:
        """One JSON line for the dead-letter output (`extra`: e.g. the node or edge set)."""
        return json.dumps({**extra, **dataclasses.asdict(self)}, sort_keys=True)


OnBad = Callable[[BadRecord], None] | None


def _reporter(on_bad: OnBad) -> Callable[[BadRecord], None]:
    """`on_bad`, or a function raising the bad record as a UserError when there is none."""
    if on_bad is not None:
        return on_bad

    def fail(bad: BadRecord) -> None:
        raise UserError(bad.message())

    return fail


def too_many_bad_records(count: int, limit: int, first: list[str], where: str = "") -> UserError:
    """The one-line error of a run that saw more than `limit` bad records."""
    shown = "; ".join(first[:3]) + ("; ..." if count > 3 else "")
    see = f" (every bad record: {where})" if where else ""
    return UserError(
        f"{count} bad record{'s' if count != 1 else ''}, more than --max_bad_records {limit}: "
        f"{shown}{see}"
    )


class _BadCell(Exception):
    """A bad cell found in a batch: (batch index, column, reason). Internal to this module."""

    def __init__(self, index: int, name: str, reason: str):
        super().__init__(reason)
        self.index, self.name, self.reason = index, name, reason


def read_table(
    path: str,
    fmt: str,
    id_columns: tuple[str, ...],
    specs: dict[str, FeatureSpec],
    batch_rows: int = 65536,
    on_bad: OnBad = None,
) -> Iterator[pa.Table]:
    """Yields the rows of one table file as canonical Arrow tables of at most `batch_rows` rows.

    Bad rows go to `on_bad` and are skipped; without it the first one raises UserError.
    """
    fmt = check_format(fmt)
    if int(batch_rows) < 1:
        raise UserError(f"{path}: batch_rows must be at least 1, not {batch_rows}")
    id_columns = tuple(id_columns)
    if not id_columns:
        raise UserError(f"{path}: no id column to read")
    specs = {name: specs[name] for name in sorted(specs)}
    names = [*id_columns, *specs]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise UserError(f"{path}: column '{twice}' is asked for twice")
    reader = {"csv": _read_csv, "tfrecord": _read_tfrecord, "parquet": _read_parquet}[fmt]
    yield from reader(path, id_columns, specs, int(batch_rows), _reporter(on_bad))


def read_ids(
    path: str, fmt: str, column: str = "#id", batch_rows: int = 65536, on_bad: OnBad = None
) -> Iterator[pa.Array]:
    """Yields the (binary) values of one id column of a table file, e.g. a seed table."""
    for table in read_table(path, fmt, (column,), {}, batch_rows, on_bad):
        yield table.column(0).combine_chunks()


# ---------------------------------------------------------------------------------------------
# Shared helpers


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _schema(id_columns, specs) -> pa.Schema:
    fields = [pa.field(name, pa.binary()) for name in id_columns]
    fields += [pa.field(name, spec.arrow_type) for name, spec in specs.items()]
    return pa.schema(fields)


def _fixed_list(values: pa.Array, spec: FeatureSpec, rows: int) -> pa.Array:
    """A fixed_size_list array of `rows` rows from the flat row-major `values`."""
    if spec.width == 0:  # pyarrow cannot build these from a flat array (division by zero).
        return pa.array([[]] * rows, spec.arrow_type)
    return pa.FixedSizeListArray.from_arrays(values, type=spec.arrow_type)


def _from_numpy(values: np.ndarray, spec: FeatureSpec) -> pa.Array:
    """Canonical Arrow array from numpy values of shape (rows,) or (rows, width)."""
    rows = values.shape[0]
    value_type = pa.binary() if spec.kind == "bytes" else pa.from_numpy_dtype(values.dtype)
    if spec.kind == "bytes":
        flat = pa.array(values.reshape(-1).tolist(), pa.binary())
    else:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1), value_type)
    return _fixed_list(flat, spec, rows) if spec.shape else flat


def _ints_as_ids(values: pa.Array) -> pa.Array:
    return values.cast(pa.int64()).cast(pa.string()).cast(pa.binary())


# ---------------------------------------------------------------------------------------------
# CSV


class _CsvBatch:
    """Cells of one batch of CSV rows, column by column, with their row and line numbers."""

    def __init__(self, count: int):
        self.cells: list[list[str]] = [[] for _ in range(count)]
        self.rows: list[int] = []
        self.lines: list[int] = []


def _read_csv(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    if csv.field_size_limit() < _CSV_FIELD_LIMIT:
        csv.field_size_limit(_CSV_FIELD_LIMIT)  # Long vector cells exceed the 128 KiB default.
    schema = _schema(id_columns, specs)
    wanted = list(schema.names)
    with open_file(path) as raw:
        text = io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        records = _csv_records(path, csv.reader(text))
        header = next(records, None)
        if header is None:
            return
        _, _, names = header
        positions = []
        for name in wanted:
            count = names.count(name)
            if count == 0:
                raise UserError(f"{path}: missing column '{name}' (the header has {names})")
            if count > 1:
                raise UserError(f"{path}: the header has column '{name}' {count} times")
            positions.append(names.index(name))
        batch = _CsvBatch(len(wanted))
        for row, line, cells in records:
            if len(cells) != len(names):
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


def _csv_records(path, reader) -> Iterator[tuple[int, int, list[str]]]:
    """(data row number, line number, cells) of the non-blank CSV records; the header is row 0."""
    row = -1
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
            raise UserError(f"{path}: line {reader.line_num}: bad CSV: {_first_line(e)}") from e
        if not cells:
            continue
        row += 1
        yield row, reader.line_num, cells


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
    return _fixed_list(flat, spec, rows) if spec.shape else flat


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


# ---------------------------------------------------------------------------------------------
# TFRecord of tf.Example


def _tfrecords(path: str, f, report) -> Iterator[tuple[int, bytes]]:
    """(index, data) of a TFRecord stream; a bad data checksum is reported as a bad record."""

    def bad_checksum(index: int) -> None:
        report(BadRecord(path, index, "corrupt record data checksum", unit="record index"))

    return tfrecord.records(path, f, bad_checksum)


class _BadProto(Exception):
    """A record that cannot be read: its reason. Internal to this module."""


def _read_tfrecord(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    schema = _schema(id_columns, specs)
    id_kinds: dict[str, str] | None = None
    with open_file(path) as f:
        batch: list[tuple[int, bytes]] = []
        for index, record in _tfrecords(path, f, report):
            if id_kinds is None:  # from the first readable record
                try:
                    id_kinds = _id_kinds(record, id_columns)
                except _BadProto as e:
                    report(BadRecord(path, index, str(e), unit="record index"))
                    continue
            batch.append((index, record))
            if len(batch) == batch_rows:
                table = _tfrecord_table(path, schema, id_columns, id_kinds, specs, batch, report)
                if table is not None:
                    yield table
                batch = []
        if batch:
            table = _tfrecord_table(path, schema, id_columns, id_kinds, specs, batch, report)
            if table is not None:
                yield table


def _parse_proto(record: bytes):
    from google.protobuf.message import DecodeError
    from tensorflow.core.example import example_pb2

    try:
        return example_pb2.Example.FromString(record)
    except (DecodeError, ValueError) as e:
        raise _BadProto(f"not a tf.Example ({_first_line(e)})") from e


def _id_kinds(record: bytes, id_columns) -> dict[str, str]:
    """'bytes' or 'int' for every id column, as found in one record; _BadProto if it can't tell."""
    example = _parse_proto(record)
    kinds = {}
    for name in id_columns:
        if name not in example.features.feature:
            raise _BadProto(f"feature '{name}': missing")
        kind = _KIND_OF_LIST.get(example.features.feature[name].WhichOneof("kind"))
        if kind not in ("bytes", "int"):
            raise _BadProto(f"id feature '{name}' must be a bytes_list or int64_list")
        kinds[name] = kind
    return kinds


def _tfrecord_table(path, schema, id_columns, id_kinds, specs, batch, report) -> pa.Table | None:
    """The batch of (index, record) as a table; bad records are reported and left out."""
    import tensorflow as tf

    dtypes = {"float": tf.float32, "int": tf.int64, "bytes": tf.string}
    features = {name: tf.io.FixedLenFeature([], dtypes[id_kinds[name]]) for name in id_columns}
    for name, spec in specs.items():
        shape = [spec.width] if spec.shape else []
        features[name] = tf.io.FixedLenFeature(shape, dtypes[spec.kind])
    try:
        parsed = tf.io.parse_example(tf.constant([r for _, r in batch], dtype=tf.string), features)
    except (tf.errors.OpError, ValueError) as e:
        bad = _diagnose(batch, id_columns, id_kinds, specs)
        for index, reason in bad:
            report(BadRecord(path, index, reason, unit="record index"))
        skipped = {index for index, _ in bad}
        good = [(index, record) for index, record in batch if index not in skipped]
        if not bad:  # parse_example failed for a reason the checks do not know: one line
            raise UserError(
                f"{path}: records {batch[0][0]}..{batch[-1][0]}: cannot parse as tf.Example "
                f"({_first_line(e)})"
            ) from e
        if not good:
            return None
        return _tfrecord_table(path, schema, id_columns, id_kinds, specs, good, report)
    keep = np.ones(len(batch), dtype=bool)
    arrays = []
    for name in id_columns:
        values = parsed[name].numpy()
        if id_kinds[name] == "int":
            arrays.append(_ints_as_ids(pa.array(values, pa.int64())))
            continue
        ids = pa.array(values.tolist(), pa.binary())
        empty = pc.equal(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False)
        for offset in np.flatnonzero(empty & keep):
            reason = f"feature '{name}': empty id"
            report(BadRecord(path, batch[offset][0], reason, unit="record index"))
        keep &= ~empty
        arrays.append(ids)
    for name, spec in specs.items():
        arrays.append(_from_numpy(parsed[name].numpy(), spec))
    table = pa.Table.from_arrays(arrays, schema=schema)
    if keep.all():
        return table
    return table.filter(pa.array(keep)) if keep.any() else None


def _diagnose(batch, id_columns, id_kinds, specs) -> list[tuple[int, str]]:
    """(record index, reason) of every record of the batch that parse_example rejects."""
    wanted = [(name, id_kinds[name], 1) for name in id_columns]
    wanted += [(name, spec.kind, spec.width) for name, spec in specs.items()]
    bad = []
    for index, record in batch:
        try:
            example = _parse_proto(record)
        except _BadProto as e:
            bad.append((index, str(e)))
            continue
        feature_map = example.features.feature
        for name, kind, width in wanted:
            where = f"feature '{name}'"
            if name not in feature_map:
                bad.append((index, f"{where}: missing"))
                break
            found = feature_map[name].WhichOneof("kind")
            if found != _LIST_OF_KIND[kind]:
                bad.append(
                    (index, f"{where}: is {found or 'empty'}, expected {_LIST_OF_KIND[kind]}")
                )
                break
            count = len(getattr(feature_map[name], found).value)
            if count != width:
                bad.append((index, f"{where}: has {count} values, expected {width}"))
                break
    return bad


# ---------------------------------------------------------------------------------------------
# Parquet


def _read_parquet(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    schema = _schema(id_columns, specs)
    with open_file(path) as f:
        f.seek(0, io.SEEK_END)
        if f.tell() == 0:
            return
        f.seek(0)
        try:
            parquet = pq.ParquetFile(f)
            file_schema = parquet.schema_arrow
        except (pa.ArrowException, OSError, ValueError) as e:
            raise UserError(f"{path}: not a Parquet file ({_first_line(e)})") from e
        for name in schema.names:
            if file_schema.get_field_index(name) < 0:
                if name in file_schema.names:
                    raise UserError(f"{path}: column '{name}' appears more than once")
                raise UserError(
                    f"{path}: missing column '{name}' (the file has {file_schema.names})"
                )
        start = 0
        batches = parquet.iter_batches(batch_size=batch_rows, columns=list(schema.names))
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                return
            except (pa.ArrowException, OSError, ValueError) as e:
                raise UserError(f"{path}: corrupt Parquet data ({_first_line(e)})") from e
            if batch.num_rows == 0:
                continue
            bad: dict[int, str] = {}
            for name in schema.names:
                spec = None if name in id_columns else specs[name]
                for index, reason in _parquet_problems(path, name, batch.column(name), spec):
                    bad.setdefault(index, f"column '{name}': {reason}")
            rows = batch.num_rows
            if bad:
                for index in sorted(bad):
                    report(BadRecord(path, start + index + 1, bad[index]))
                keep = np.ones(rows, dtype=bool)
                keep[sorted(bad)] = False
                batch = batch.filter(pa.array(keep))
            if batch.num_rows:
                arrays = []
                for name in schema.names:
                    column = batch.column(name)
                    if name in id_columns:
                        arrays.append(_parquet_ids(path, name, column, start))
                    else:
                        arrays.append(_parquet_feature(path, name, column, specs[name], start))
                yield pa.Table.from_arrays(arrays, schema=schema)
            start += rows


def _parquet_problems(path, name, column: pa.Array, spec) -> list[tuple[int, str]]:
    """(batch index, reason) of the rows of one column that cannot be read (`spec` None: ids).

    A column whose type cannot hold the id or feature at all raises UserError instead.
    """
    column = _decode(column)
    problems = []
    nulls = column.is_null().to_numpy(zero_copy_only=False)
    missing = "missing id" if spec is None else "missing value"
    problems += [(int(i), missing) for i in np.flatnonzero(nulls)]
    if spec is None:
        if _is_text(column.type):
            empty = pc.equal(pc.binary_length(column.cast(pa.binary())), 0)
            empty = empty.fill_null(False).to_numpy(zero_copy_only=False)
            problems += [(int(i), "missing id") for i in np.flatnonzero(empty)]
        elif not pa.types.is_integer(column.type):
            raise UserError(
                f"{path}: column '{name}' has type {column.type}; ids must be strings or integers"
            )
        return problems
    is_list = (
        pa.types.is_list(column.type)
        or pa.types.is_large_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
    )
    if not spec.shape:
        if pa.types.is_nested(column.type):
            raise UserError(f"{path}: column '{name}' holds lists, but the feature is a scalar")
        values = column
    elif not is_list:
        raise UserError(
            f"{path}: column '{name}' has type {column.type}, but the feature is a vector "
            f"of {spec.width} values"
        )
    else:
        lengths = pc.list_value_length(column).fill_null(spec.width)
        wrong = pc.not_equal(lengths, spec.width).to_numpy(zero_copy_only=False)
        problems += [
            (int(i), f"{lengths[int(i)].as_py()} values, expected {spec.width}")
            for i in np.flatnonzero(wrong)
        ]
        values = pc.list_flatten(column)
        parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
        inner = values.is_null().to_numpy(zero_copy_only=False)
        problems += [(int(i), "missing value") for i in np.unique(parents[inner])]
    values = _decode(values)
    if not _value_type_ok(values.type, spec.kind):
        raise UserError(
            f"{path}: column '{name}' has values of type {values.type}, "
            f"which cannot be {spec.kind} feature values"
        )
    return sorted(problems)


def _first_row(mask, start: int) -> int:
    return start + pc.indices_nonzero(mask)[0].as_py() + 1


def _decode(column: pa.Array) -> pa.Array:
    return column.dictionary_decode() if pa.types.is_dictionary(column.type) else column


def _is_text(type_: pa.DataType) -> bool:
    return (
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_binary(type_)
        or pa.types.is_large_binary(type_)
        or pa.types.is_fixed_size_binary(type_)
        or pa.types.is_string_view(type_)
        or pa.types.is_binary_view(type_)
    )


def _parquet_ids(path: str, name: str, column: pa.Array, start: int) -> pa.Array:
    column = _decode(column)
    if column.null_count:
        row = _first_row(column.is_null(), start)
        raise UserError(f"{path}: row {row}: column '{name}': missing id")
    if pa.types.is_integer(column.type):
        try:
            return _ints_as_ids(column)
        except pa.ArrowInvalid:  # uint64 beyond int64
            return column.cast(pa.string()).cast(pa.binary())
    if not _is_text(column.type):
        raise UserError(
            f"{path}: column '{name}' has type {column.type}; ids must be strings or integers"
        )
    ids = column.cast(pa.binary())
    empty = pc.equal(pc.binary_length(ids), 0)
    if pc.any(empty).as_py():
        raise UserError(f"{path}: row {_first_row(empty, start)}: column '{name}': missing id")
    return ids


def _value_type_ok(type_: pa.DataType, kind: str) -> bool:
    if kind == "float":
        return pa.types.is_floating(type_) or pa.types.is_integer(type_)
    if kind == "int":
        return pa.types.is_integer(type_) or pa.types.is_boolean(type_)
    return _is_text(type_)


def _cast_values(path, name, values: pa.Array, spec: FeatureSpec, row_of) -> pa.Array:
    target = (
        pa.binary()
        if spec.kind == "bytes"
        else pa.from_numpy_dtype(np.float32 if spec.kind == "float" else np.int64)
    )
    values = _decode(values)
    if not _value_type_ok(values.type, spec.kind):
        raise UserError(
            f"{path}: column '{name}' has values of type {values.type}, "
            f"which cannot be {spec.kind} feature values"
        )
    if values.null_count:
        row = row_of(pc.indices_nonzero(values.is_null())[0].as_py())
        raise UserError(f"{path}: row {row}: column '{name}': missing value")
    try:
        return values.cast(target, safe=not pa.types.is_floating(target))
    except pa.ArrowInvalid as e:
        raise UserError(f"{path}: column '{name}': {_first_line(e)}") from e


def _parquet_feature(path, name, column: pa.Array, spec: FeatureSpec, start: int) -> pa.Array:
    column = _decode(column)
    if column.null_count:
        row = _first_row(column.is_null(), start)
        raise UserError(f"{path}: row {row}: column '{name}': missing value")
    if not spec.shape:
        if pa.types.is_nested(column.type):
            raise UserError(f"{path}: column '{name}' holds lists, but the feature is a scalar")
        return _cast_values(path, name, column, spec, lambda i: start + i + 1)
    is_list = (
        pa.types.is_list(column.type)
        or pa.types.is_large_list(column.type)
        or pa.types.is_fixed_size_list(column.type)
        or pa.types.is_list_view(column.type)
        or pa.types.is_large_list_view(column.type)
    )
    if not is_list:
        raise UserError(
            f"{path}: column '{name}' has type {column.type}, but the feature is a vector "
            f"of {spec.width} values"
        )
    lengths = pc.list_value_length(column)
    wrong = pc.not_equal(lengths, spec.width)
    if pc.any(wrong).as_py():
        index = pc.indices_nonzero(wrong)[0].as_py()
        raise UserError(
            f"{path}: row {start + index + 1}: column '{name}': {lengths[index].as_py()} values, "
            f"expected {spec.width}"
        )
    values = pc.list_flatten(column)
    width = max(spec.width, 1)
    values = _cast_values(path, name, values, spec, lambda i: start + i // width + 1)
    return _fixed_list(values, spec, len(column))
