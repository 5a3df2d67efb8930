"""TFRecord tables of tf.Example: one record per node/edge.

Ids are bytes_list or int64_list features (ints become their decimal text); features must have
the kind of their dtype (float_list, int64_list, bytes_list) and exactly `width` values.
Records are parsed with the project's Example class (`sampler.protos.example_pb2`), not TensorFlow.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from google.protobuf.message import DecodeError

from sampler.features import NUMPY_DTYPE
from sampler.io import example_scan, tfrecord
from sampler.io.files import open_file
from sampler.io.read_common import (
    BadRecord,
    arrow_schema,
    first_line,
    fixed_list,
    from_numpy,
    ints_as_ids,
)
from sampler.protos import example_pb2

_KIND_OF_LIST = {"float_list": "float", "int64_list": "int", "bytes_list": "bytes"}
_LIST_OF_KIND = {kind: name for name, kind in _KIND_OF_LIST.items()}


class _BadProto(Exception):
    """A record that cannot be read: its reason. Internal to this module."""


_LAYOUT_ROUNDS = 4  # layouts tried per batch before the rest is read record by record


def read_tfrecord(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    schema = arrow_schema(id_columns, specs)

    def bad_checksum(index: int) -> None:
        report(BadRecord(path, index, "corrupt record data checksum", unit="record index"))

    with open_file(path) as f:
        framer = tfrecord.RecordFramer(path, f, bad_checksum)
        id_kinds: dict[str, str] | None = None
        while id_kinds is None:  # from the first readable record, which starts the first batch
            buf, starts, ends, indices = framer.take(1)
            if not len(starts):
                return
            record = buf[int(starts[0]) : int(ends[0])]
            try:
                id_kinds = _id_kinds(record, id_columns)
            except _BadProto as e:
                report(BadRecord(path, int(indices[0]), str(e), unit="record index"))
        buf, starts, ends, indices = _prepend(record, int(indices[0]), *framer.take(batch_rows - 1))
        while len(starts):
            batch = _Batch(buf, starts, ends, indices)
            table = _tfrecord_table(path, schema, id_columns, id_kinds, specs, batch, report)
            if table is not None:
                yield table
            if len(starts) < batch_rows:
                return
            buf, starts, ends, indices = framer.take(batch_rows)


def columns_of(path: str) -> list[str] | None:
    """The features of a TFRecord file's first readable tf.Example; None without one."""
    with open_file(path) as f:
        framer = tfrecord.RecordFramer(path, f, lambda index: None)
        while True:
            buf, starts, ends, _ = framer.take(1)
            if not len(starts):
                return None
            try:
                example = _parse_proto(buf[int(starts[0]) : int(ends[0])])
            except _BadProto:
                continue
            return list(example.features.feature)


def _prepend(record: bytes, index: int, buf, starts, ends, indices):
    """The record followed by the records taken after it, in one buffer."""
    if not len(starts):
        return record, np.zeros(1, np.int64), np.full(1, len(record)), np.full(1, index)
    low, high = int(starts[0]), int(ends[-1])
    shift = len(record) - low
    return (
        record + buf[low:high],
        np.concatenate([[0], starts + shift]),
        np.concatenate([[len(record)], ends + shift]),
        np.concatenate([[index], indices]),
    )


class _Batch:
    """Records buf[starts[i]:ends[i]] with their record indices."""

    def __init__(self, buf: bytes, starts, ends, indices):
        self.buf, self.starts, self.ends, self.indices = buf, starts, ends, indices

    def record(self, position: int) -> bytes:
        return self.buf[int(self.starts[position]) : int(self.ends[position])]


def _parse_proto(record: bytes) -> example_pb2.Example:
    try:
        return example_pb2.Example.FromString(record)
    except (DecodeError, ValueError) as e:
        raise _BadProto(f"not a tf.Example ({first_line(e)})") from e


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
    """The batch as a table; bad records are reported and left out.

    Every id column must be a one-value list and every feature a list of exactly `width` values
    of its kind, as TensorFlow's parse_example with FixedLenFeature (no default) requires.
    Records in a common layout are read by `example_scan`, the others one by one with the
    protobuf parser, which also gives the reason of each bad one.
    """
    wanted = _wanted(id_columns, id_kinds, specs)
    fast_rows, fast = _scan_batch(batch, wanted)
    is_slow = np.ones(len(batch.starts), dtype=bool)
    is_slow[fast_rows] = False
    slow = np.flatnonzero(is_slow)
    slow_values: dict[str, list] = {name: [] for name, _, _ in wanted}
    slow_rows: list[int] = []
    for position in slow.tolist():
        index = int(batch.indices[position])
        try:
            example = _parse_proto(batch.record(position))
        except _BadProto as e:
            report(BadRecord(path, index, str(e), unit="record index"))
            continue
        lists = _check(example.features.feature, wanted)
        if isinstance(lists, str):
            report(BadRecord(path, index, lists, unit="record index"))
            continue
        for (name, _, _), found in zip(wanted, lists, strict=True):
            slow_values[name].extend(found)
        slow_rows.append(position)
    count = len(fast_rows) + len(slow_rows)
    if not count:
        return None
    order = np.argsort(np.concatenate([fast_rows, slow_rows]), kind="stable")
    rows = batch.indices[np.concatenate([fast_rows, slow_rows]).astype(np.int64)[order]]
    columns = {}
    for name, kind, width in wanted:
        if kind == "bytes":
            at, sizes = fast[name] if fast else (np.zeros((0, width), np.int64),) * 2
            columns[name] = _binary(batch.buf, at, sizes, slow_values[name], order, width)
        else:
            values = fast[name] if fast else np.zeros((0, width), NUMPY_DTYPE[kind])
            slow_array = np.array(slow_values[name], dtype=NUMPY_DTYPE[kind])
            slow_array = slow_array.reshape(len(slow_rows), width)
            columns[name] = np.concatenate([values, slow_array])[order]
    keep = np.ones(count, dtype=bool)
    arrays = []
    for name in id_columns:
        if id_kinds[name] == "int":
            arrays.append(ints_as_ids(pa.array(columns[name].reshape(-1), pa.int64())))
            continue
        ids = columns[name]
        empty = pc.equal(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False)
        for offset in np.flatnonzero(empty & keep):
            reason = f"feature '{name}': empty id"
            report(BadRecord(path, int(rows[offset]), reason, unit="record index"))
        keep &= ~empty
        arrays.append(ids)
    for name, spec in specs.items():
        values = columns[name]
        if spec.kind == "bytes":
            arrays.append(fixed_list(values, spec, count) if spec.shape else values)
        else:
            arrays.append(from_numpy(values if spec.shape else values.reshape(-1), spec))
    table = pa.Table.from_arrays(arrays, schema=schema)
    if keep.all():
        return table
    return table.filter(pa.array(keep)) if keep.any() else None


def _scan_batch(batch: _Batch, wanted) -> tuple[np.ndarray, dict]:
    """(positions, {name: values}) of the records of the batch that `example_scan` reads,
    positions ascending; every other record is left to the protobuf parser."""
    want = {name: (kind, width) for name, kind, width in wanted}
    left = np.arange(len(batch.starts))
    found_rows, found = [], []
    for _ in range(_LAYOUT_ROUNDS):
        if not len(left):
            break
        layout = example_scan.layout_of(batch.record(int(left[0])), want)
        if layout is None:
            left = left[1:]
            continue
        ok, values = example_scan.scan(batch.buf, batch.starts[left], batch.ends[left], layout)
        if not ok[0]:
            left = left[1:]
            continue
        found_rows.append(left[ok])
        found.append({key.decode(): _rows(value, ok) for key, value in values.items()})
        left = left[~ok]
    if not found_rows:
        return np.zeros(0, np.int64), {}
    positions = np.concatenate(found_rows)
    order = np.argsort(positions, kind="stable")
    merged = {}
    for name, kind, _ in wanted:
        if kind == "bytes":
            merged[name] = tuple(np.concatenate([f[name][k] for f in found])[order] for k in (0, 1))
        else:
            merged[name] = np.concatenate([f[name] for f in found])[order]
            if kind == "float":
                _quiet_nans(merged[name])
    return positions[order], merged


def _rows(value, ok: np.ndarray):
    return tuple(v[ok] for v in value) if isinstance(value, tuple) else value[ok]


def _quiet_nans(values: np.ndarray) -> None:
    """NaNs as the protobuf parser gives them: through a C double, which quiets them."""
    nan = np.isnan(values)
    if nan.any():
        values[nan] = values[nan].astype(np.float64).astype(np.float32)


def _binary(buf, at, sizes, slow: list, order: np.ndarray, width: int) -> pa.Array:
    """The flat binary values of fast rows (at, sizes) and slow rows (a list), rows in `order`."""
    offsets, data = example_scan.gather_bytes(buf, at.reshape(-1), sizes.reshape(-1))
    fast = pa.Array.from_buffers(
        pa.large_binary(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    ).cast(pa.binary())
    if not slow and np.array_equal(order, np.arange(len(order))):
        return fast
    values = pa.concat_arrays([fast, pa.array(slow, pa.binary())])
    take = (order[:, None] * width + np.arange(width)).reshape(-1)
    return values.take(pa.array(take))


def _wanted(id_columns, id_kinds, specs) -> list[tuple[str, str, int]]:
    """(name, kind, values per record) of every column to read, ids first."""
    wanted = [(name, id_kinds[name], 1) for name in id_columns]
    return wanted + [(name, spec.kind, spec.width) for name, spec in specs.items()]


def _check(feature_map, wanted) -> list | str:
    """The value lists of the wanted features of one record, or why the record is bad."""
    lists = []
    for name, kind, width in wanted:
        where = f"feature '{name}'"
        if name not in feature_map:
            return f"{where}: missing"
        feature = feature_map[name]
        found = feature.WhichOneof("kind")
        if found != _LIST_OF_KIND[kind]:
            return f"{where}: is {found or 'empty'}, expected {_LIST_OF_KIND[kind]}"
        value = getattr(feature, found).value
        if len(value) != width:
            return f"{where}: has {len(value)} values, expected {width}"
        lists.append(value)
    return lists
