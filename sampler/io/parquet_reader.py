"""Parquet tables: ids may be integer or string/binary columns (ints become decimal text).

Numeric columns are cast to float32 / int64; vectors may be list, large_list or fixed_size_list
columns whose rows all have `width` values (see `sampler.io.readers` for the contract).
"""

from __future__ import annotations

import io
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io.files import open_file
from sampler.io.read_common import BadRecord, arrow_schema, first_line, fixed_list, ints_as_ids


def parquet_rows(path: str) -> int | None:
    """The rows of a Parquet file from its footer (no data read); None when it is not one (the
    read reports that)."""
    with open_file(path) as f:
        f.seek(0, io.SEEK_END)
        if f.tell() == 0:
            return 0
        f.seek(0)
        try:
            return pq.ParquetFile(f).metadata.num_rows
        except UserError:  # the file could not be read (gs://: the server's failure)
            raise
        except (pa.ArrowException, OSError, ValueError):
            return None


def read_parquet(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    schema = arrow_schema(id_columns, specs)
    with open_file(path) as f:
        f.seek(0, io.SEEK_END)
        if f.tell() == 0:
            return
        f.seek(0)
        try:
            parquet = pq.ParquetFile(f)
            file_schema = parquet.schema_arrow
        except UserError:  # the file could not be read (gs://: the server's failure)
            raise
        except (pa.ArrowException, OSError, ValueError) as e:
            raise UserError(f"{path}: not a Parquet file ({first_line(e)})") from e
        for name in schema.names:
            if file_schema.get_field_index(name) < 0:
                if name in file_schema.names:
                    raise UserError(f"{path}: column '{name}' appears more than once")
                raise UserError(
                    f"{path}: missing column '{name}' (the file has {file_schema.names})"
                )
        batches = parquet.iter_batches(batch_size=batch_rows, columns=list(schema.names))
        yield from canonical_tables(
            path, _parquet_batches(path, batches), id_columns, specs, report
        )


def columns_of(path: str) -> list[str] | None:
    """The columns of a Parquet file; None for an empty (0-byte) file."""
    with open_file(path) as f:
        f.seek(0, io.SEEK_END)
        if f.tell() == 0:
            return None
        f.seek(0)
        try:
            return list(pq.ParquetFile(f).schema_arrow.names)
        except UserError:
            raise
        except (pa.ArrowException, OSError, ValueError) as e:
            raise UserError(f"{path}: not a Parquet file ({first_line(e)})") from e


def _parquet_batches(path: str, batches) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except UserError:  # a gs:// failure already named (sampler.io.gcs)
            raise
        except (pa.ArrowException, OSError, ValueError) as e:
            raise UserError(f"{path}: corrupt Parquet data ({first_line(e)})") from e
        yield batch


def check_column_types(path: str, schema: pa.Schema, id_columns, specs) -> None:
    """UserError (naming `path`) for a column of `schema` whose type cannot hold its id or
    feature, as canonical_tables would raise at the first batch."""
    for name in [*id_columns, *specs]:
        column = pa.array([], schema.field(name).type)
        _parquet_problems(path, name, column, None if name in id_columns else specs[name])


def canonical_tables(
    path: str, batches, id_columns, specs, report, first_row: int = 1
) -> Iterator[pa.Table]:
    """Arrow record batches holding at least the asked columns (ids as integers or strings,
    numbers of any width, vectors as lists) -> canonical tables (sampler.io.readers). Bad rows
    go to `report` as BadRecords of `path`, numbered from `first_row`; columns whose type
    cannot hold their id or feature raise UserError. Shared by Parquet files and BigQuery."""
    schema = arrow_schema(id_columns, specs)
    start = first_row - 1
    for batch in batches:
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
    missing = "missing id" if spec is None else "missing value"
    if column.null_count:  # (no mask of a whole column when it has no null)
        nulls = column.is_null().to_numpy(zero_copy_only=False)
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
    parents = None  # the row of each value, for vectors
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
        if values.null_count:  # the row of each value only when some value is missing
            parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
            inner = values.is_null().to_numpy(zero_copy_only=False)
            problems += [(int(i), "missing value") for i in np.unique(parents[inner])]
    values = _decode(values)
    if not _value_type_ok(values.type, spec.kind):
        raise UserError(
            f"{path}: column '{name}' has values of type {values.type}, "
            f"which cannot be {spec.kind} feature values"
        )
    too_large = _too_large(values, spec.kind)
    if too_large and is_list and parents is None:
        parents = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
    for index, reason in too_large:
        problems.append((index if parents is None else int(parents[index]), reason))
    return sorted(problems)


def _too_large(values: pa.Array, kind: str) -> list[tuple[int, str]]:
    """(value index, reason) of the values the feature's type cannot hold: finite floats past
    float32's range (they would become infinite), integers past int64's."""
    if kind == "float" and pa.types.is_floating(values.type) and values.type != pa.float32():
        narrow = values.cast(pa.float32(), safe=False)
        mask = pc.and_(pc.is_inf(narrow), pc.invert(pc.is_inf(values)))
        what = "float32"
    elif (
        kind == "int" and pa.types.is_unsigned_integer(values.type) and values.type.bit_width == 64
    ):
        mask = pc.greater(values, pa.scalar(2**63 - 1, pa.uint64()))
        what = "int64"
    else:
        return []
    found = np.flatnonzero(mask.fill_null(False).to_numpy(zero_copy_only=False))
    return [(int(i), f"{values[int(i)].as_py()!r} does not fit in {what}") for i in found]


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
            return ints_as_ids(column)
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
        raise UserError(f"{path}: column '{name}': {first_line(e)}") from e


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
    return fixed_list(values, spec, len(column))
