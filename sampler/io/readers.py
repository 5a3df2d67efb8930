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
    CSV that is not UTF-8 (naming the line) or not CSV, a file that is not Parquet, broken TFRecord framing)
    always raise UserError naming the file.
  * Row-level ones (a CSV row with the wrong number of cells, a cell that does not parse, a
    vector of the wrong length, a missing/empty/null id or value, a number its type cannot
    hold (a finite float past float32's range, an integer past int64's), a record that is not a
    tf.Example, a TFRecord whose data checksum is wrong) are `BadRecord`s naming the file,
    the row (CSV/Parquet: 1-based data row; TFRecord: 0-based record index) and the reason.
    Without `on_bad` the first one raises UserError (its `message()`); with `on_bad` every
    bad row is passed to it and skipped, and the good rows are yielded.
The formats live in csv_reader, tfrecord_reader and parquet_reader; a set in BigQuery is read
by the stream (bigquery_reader, the Parquet reader's checks on its Arrow batches). Files are opened through
`sampler.io.files` (Beam's `FileSystems`), so `gs://` paths work. Nothing here unpickles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import csv_reader, parquet_reader, tfrecord_reader
from sampler.io.bigquery_source import UNIT_FORMAT
from sampler.io.csv_reader import read_csv
from sampler.io.files import check_format
from sampler.io.parquet_reader import read_parquet
from sampler.io.read_common import BadRecord, OnBad
from sampler.io.tfrecord_reader import read_tfrecord

__all__ = ["BadRecord", "OnBad", "columns_of", "read_ids", "read_table", "too_many_bad_records"]


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
    `fmt` "bigquery": `path` is a stream of a BigQuery read session (graph_tables.table_files).
    """
    fmt = UNIT_FORMAT if fmt == UNIT_FORMAT else check_format(fmt)
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
    if fmt == UNIT_FORMAT:  # a set in BigQuery: one stream of its read session
        from sampler.io import bigquery_reader

        reader = bigquery_reader.read_unit
    else:
        reader = {"csv": read_csv, "tfrecord": read_tfrecord, "parquet": read_parquet}[fmt]
    yield from reader(path, id_columns, specs, int(batch_rows), _reporter(on_bad))


def read_ids(
    path: str, fmt: str, column: str = "#id", batch_rows: int = 65536, on_bad: OnBad = None
) -> Iterator[pa.Array]:
    """Yields the (binary) values of one id column of a table file, e.g. a seed table."""
    for table in read_table(path, fmt, (column,), {}, batch_rows, on_bad):
        yield table.column(0).combine_chunks()


def columns_of(path: str, fmt: str) -> list[str] | None:
    """The column names of one table file, as `read_table` finds them: a CSV file's header, a
    Parquet file's columns, the features of a TFRecord file's first record, a BigQuery
    stream's columns; None for a file with no header (empty) or no record."""
    fmt = UNIT_FORMAT if fmt == UNIT_FORMAT else check_format(fmt)
    if fmt == UNIT_FORMAT:
        from sampler.io import bigquery_reader

        return bigquery_reader.unit_columns(path)
    module = {"csv": csv_reader, "tfrecord": tfrecord_reader, "parquet": parquet_reader}[fmt]
    return module.columns_of(path)
