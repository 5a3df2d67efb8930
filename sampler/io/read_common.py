"""What the table readers (csv_reader, tfrecord_reader, parquet_reader) share: the bad-row
record and the helpers that build canonical Arrow columns (CONVENTIONS.md)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from sampler.features import FeatureSpec


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


def first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def arrow_schema(id_columns, specs) -> pa.Schema:
    fields = [pa.field(name, pa.binary()) for name in id_columns]
    fields += [pa.field(name, spec.arrow_type) for name, spec in specs.items()]
    return pa.schema(fields)


def fixed_list(values: pa.Array, spec: FeatureSpec, rows: int) -> pa.Array:
    """A fixed_size_list array of `rows` rows from the flat row-major `values`."""
    if spec.width == 0:  # pyarrow cannot build these from a flat array (division by zero).
        return pa.array([[]] * rows, spec.arrow_type)
    return pa.FixedSizeListArray.from_arrays(values, type=spec.arrow_type)


def from_numpy(values: np.ndarray, spec: FeatureSpec) -> pa.Array:
    """Canonical Arrow array from numpy values of shape (rows,) or (rows, width)."""
    rows = values.shape[0]
    value_type = pa.binary() if spec.kind == "bytes" else pa.from_numpy_dtype(values.dtype)
    if spec.kind == "bytes":
        flat = pa.array(values.reshape(-1).tolist(), pa.binary())
    else:
        flat = pa.array(np.ascontiguousarray(values).reshape(-1), value_type)
    return fixed_list(flat, spec, rows) if spec.shape else flat


def ints_as_ids(values: pa.Array) -> pa.Array:
    return values.cast(pa.int64()).cast(pa.string()).cast(pa.binary())
