"""Writers of canonical Arrow tables as CSV, TFRecord of tf.Example, or Parquet.

A canonical table (CONVENTIONS.md) has the id columns `#id` (node sets) or `#source`, `#target`
(edge sets) as `binary`, then one column per feature with `FeatureSpec.arrow_type`. Ids must be
non-empty and no value may be null: every reader rejects such rows.

CSV encoding (read back exactly by `sampler.io.readers`):
  * UTF-8 text written with Python's `csv` module (comma separator, `"` quoting with doubled
    quotes, `\\r\\n` line ends), so cells containing commas, quotes or line breaks are quoted.
  * The first row is the header: the column names.
  * Id cells and `bytes` cells hold the raw value decoded as UTF-8 text (the writer raises
    UserError for bytes that are not valid UTF-8: use TFRecord or Parquet for binary data).
  * Numbers are written in Python `repr`: ints as decimal, floats as `repr(float(x))`, which
    parses back to the identical float32 (`nan`, `inf` and `-inf` included).
  * A vector feature (shape [d1, ..., dn], flattened row-major) is one cell holding its values
    joined by `;`, e.g. `0.5;1.25;-3.0`. A `bytes` vector element must not contain `;`.
  * A vector feature of width 0 is an empty cell.

TFRecord: one tf.Example per row; each id column is a one-value bytes_list feature; float
features are float_list, int features int64_list and bytes features bytes_list, vectors flattened.
Written with the project's Example class and TFRecord framing (no TensorFlow); map keys sorted,
so the bytes are the same on every run.

Parquet: the canonical Arrow table as is (`binary` ids, float32/int64/binary values,
fixed_size_list vectors).
"""

from __future__ import annotations

import csv
import io
import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import tfrecord
from sampler.io.files import check_format, create_file, has_scheme, shard_name
from sampler.protos import example_pb2

NODE_ID_COLUMNS = ("#id",)
EDGE_ID_COLUMNS = ("#source", "#target")
VECTOR_SEPARATOR = ";"
_CSV_CHUNK_ROWS = 4096
_RECORDS_PER_WRITE = 4096


def id_columns_of(names) -> tuple[str, ...]:
    """('#id',) for a node table, ('#source', '#target') for an edge table."""
    names = list(names)
    if "#id" in names:
        return NODE_ID_COLUMNS
    if "#source" in names and "#target" in names:
        return EDGE_ID_COLUMNS
    raise UserError(f"table has no '#id' nor '#source'/'#target' columns (columns: {names})")


def canonical_table(
    table: pa.Table, specs: dict[str, FeatureSpec], where: str = "table"
) -> pa.Table:
    """`table` in canonical column order and types; raises UserError for anything it cannot hold.

    Columns are cast to their canonical types; missing or unexpected columns, null values and
    empty ids are errors.
    """
    ids = id_columns_of(table.column_names)
    names = [*ids, *sorted(specs)]
    extra = sorted(set(table.column_names) - set(names))
    if extra:
        raise UserError(f"{where}: columns {extra} are neither ids nor features of the schema")
    arrays, fields = [], []
    for name in names:
        if name not in table.column_names:
            raise UserError(f"{where}: missing column '{name}'")
        target = pa.binary() if name in ids else specs[name].arrow_type
        column = table.column(name)
        if column.type != target:
            try:
                column = column.cast(target)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise UserError(
                    f"{where}: column '{name}' of type {column.type} cannot be {target}: "
                    f"{str(e).splitlines()[0] if str(e) else type(e).__name__}"
                ) from e
        if column.null_count:
            row = _first_true(pc.is_null(column))
            raise UserError(f"{where}: column '{name}' row {row + 1} is null")
        if pa.types.is_fixed_size_list(target) and len(column):
            values = pc.list_flatten(column)
            if values.null_count:
                raise UserError(f"{where}: column '{name}' has null vector elements")
        if name in ids and len(column):
            empty = pc.equal(pc.binary_length(column), 0)
            if pc.any(empty).as_py():
                raise UserError(f"{where}: column '{name}' row {_first_true(empty) + 1} is empty")
        arrays.append(column)
        fields.append(pa.field(name, target))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_table(path: str, table: pa.Table, fmt: str, specs: dict[str, FeatureSpec]) -> None:
    """Writes a canonical table to one file `path` as 'csv', 'tfrecord' or 'parquet'."""
    fmt = check_format(fmt)
    table = canonical_table(table, specs, where=path)
    ids = id_columns_of(table.column_names)
    _make_parent_dir(path)
    if fmt == "csv":
        _write_csv(path, table, ids, specs)
    elif fmt == "tfrecord":
        _write_tfrecord(path, table, ids, specs)
    else:
        for name in sorted(specs):
            if specs[name].width == 0:  # pyarrow cannot read such columns back.
                raise UserError(
                    f"{path}: feature '{name}' has no values, which Parquet cannot hold"
                )
        with create_file(path) as f:
            pq.write_table(table, f)


def write_sharded(
    base: str, table: pa.Table, fmt: str, specs: dict[str, FeatureSpec], num_shards: int
) -> str:
    """Writes `table` as `num_shards` files `base-0000i-of-0000N` of contiguous row ranges.

    Returns the pattern `base@N` naming them. Shards may be empty if the table is small.
    """
    if int(num_shards) < 1:
        raise UserError(f"{base}: the number of shards must be at least 1, not {num_shards}")
    num_shards = int(num_shards)
    bounds = np.linspace(0, table.num_rows, num_shards + 1).round().astype(np.int64)
    for index in range(num_shards):
        start, stop = int(bounds[index]), int(bounds[index + 1])
        name = shard_name(base, index, num_shards)
        write_table(name, table.slice(start, stop - start), fmt, specs)
    return f"{base}@{num_shards}"


def _first_true(mask) -> int:
    """Index of the first true value of a boolean Arrow array (there must be one)."""
    return int(pc.indices_nonzero(mask)[0].as_py())


def _make_parent_dir(path: str) -> None:
    if not has_scheme(path):
        parent = os.path.dirname(os.path.abspath(path))
        os.makedirs(parent, exist_ok=True)


def _values(column: pa.ChunkedArray, spec: FeatureSpec | None) -> np.ndarray:
    """Numpy values of a canonical column: (rows,) for scalars/ids, (rows, width) for vectors."""
    rows = len(column)
    if spec is not None and spec.shape:
        flat = pc.list_flatten(column) if rows else pa.array([], spec.arrow_type.value_type)
        values = _numpy(flat, spec.kind)
        return values.reshape(rows, spec.width)
    return _numpy(column, "bytes" if spec is None else spec.kind)


def _numpy(array, kind: str) -> np.ndarray:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if kind == "bytes":
        return np.array(array.to_pylist(), dtype=object)
    dtype = np.float32 if kind == "float" else np.int64
    return np.asarray(array.to_numpy(zero_copy_only=False), dtype=dtype)


def _text(value: bytes, where: str, name: str, row: int) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(
            f"{where}: column '{name}' row {row + 1} is not UTF-8 text, which CSV cannot hold; "
            "write TFRecord or Parquet instead"
        ) from e


def _csv_cells(name: str, values: np.ndarray, spec: FeatureSpec | None, where: str) -> list[str]:
    """The CSV cell text of every row of one column."""
    kind = "bytes" if spec is None else spec.kind
    if kind == "float":
        to_text = lambda v: repr(float(v))  # noqa: E731
    elif kind == "int":
        to_text = lambda v: str(int(v))  # noqa: E731
    else:
        to_text = None
    if spec is None or not spec.shape:
        if to_text is None:
            return [_text(v, where, name, row) for row, v in enumerate(values)]
        return [to_text(v) for v in values.tolist()]
    cells = []
    for row, vector in enumerate(values.tolist()):
        if to_text is None:
            parts = [_text(v, where, name, row) for v in vector]
            for part in parts:
                if VECTOR_SEPARATOR in part:
                    raise UserError(
                        f"{where}: column '{name}' row {row + 1} has a vector element containing "
                        f"'{VECTOR_SEPARATOR}', which CSV cannot hold; write TFRecord or Parquet"
                    )
        else:
            parts = [to_text(v) for v in vector]
        cells.append(VECTOR_SEPARATOR.join(parts))
    return cells


def _write_csv(path: str, table: pa.Table, ids, specs: dict[str, FeatureSpec]) -> None:
    names = table.column_names
    columns = []
    for name in names:
        spec = None if name in ids else specs[name]
        columns.append(_csv_cells(name, _values(table.column(name), spec), spec, path))
    with create_file(path) as f:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(names)
        for start in range(0, table.num_rows, _CSV_CHUNK_ROWS):
            stop = min(start + _CSV_CHUNK_ROWS, table.num_rows)
            writer.writerows(zip(*(column[start:stop] for column in columns), strict=True))
            f.write(buffer.getvalue().encode("utf-8"))
            buffer.seek(0)
            buffer.truncate()
        f.write(buffer.getvalue().encode("utf-8"))


def _write_tfrecord(path: str, table: pa.Table, ids, specs: dict[str, FeatureSpec]) -> None:
    def feature_maker(spec: FeatureSpec | None):
        kind = "bytes" if spec is None else spec.kind
        scalar = spec is None or not spec.shape
        if kind == "float":
            make = lambda v: Feature(float_list=example_pb2.FloatList(value=v))  # noqa: E731
        elif kind == "int":
            make = lambda v: Feature(int64_list=example_pb2.Int64List(value=v))  # noqa: E731
        else:
            make = lambda v: Feature(bytes_list=example_pb2.BytesList(value=v))  # noqa: E731
        return (lambda v: make([v])) if scalar else make

    Feature = example_pb2.Feature
    names = table.column_names
    makers = [feature_maker(None if name in ids else specs[name]) for name in names]
    columns = []
    for name in names:
        spec = None if name in ids else specs[name]
        values = _values(table.column(name), spec)
        columns.append(values.tolist())
    with create_file(path) as f:
        records = []
        for row in range(table.num_rows):
            feature = {
                name: make(column[row])
                for name, make, column in zip(names, makers, columns, strict=True)
            }
            example = example_pb2.Example(features=example_pb2.Features(feature=feature))
            records.append(example.SerializeToString(deterministic=True))
            if len(records) == _RECORDS_PER_WRITE:
                f.write(tfrecord.frame(records))
                records = []
        f.write(tfrecord.frame(records))
