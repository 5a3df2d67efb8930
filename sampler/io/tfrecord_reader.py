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
from sampler.io import tfrecord
from sampler.io.files import open_file
from sampler.io.read_common import BadRecord, arrow_schema, first_line, from_numpy, ints_as_ids
from sampler.protos import example_pb2

_KIND_OF_LIST = {"float_list": "float", "int64_list": "int", "bytes_list": "bytes"}
_LIST_OF_KIND = {kind: name for name, kind in _KIND_OF_LIST.items()}


def _tfrecords(path: str, f, report) -> Iterator[tuple[int, bytes]]:
    """(index, data) of a TFRecord stream; a bad data checksum is reported as a bad record."""

    def bad_checksum(index: int) -> None:
        report(BadRecord(path, index, "corrupt record data checksum", unit="record index"))

    return tfrecord.records(path, f, bad_checksum)


class _BadProto(Exception):
    """A record that cannot be read: its reason. Internal to this module."""


def read_tfrecord(path, id_columns, specs, batch_rows, report) -> Iterator[pa.Table]:
    schema = arrow_schema(id_columns, specs)
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
    """The batch of (index, record) as a table; bad records are reported and left out.

    Every id column must be a one-value list and every feature a list of exactly `width` values
    of its kind, as TensorFlow's parse_example with FixedLenFeature (no default) requires.
    """
    wanted = _wanted(id_columns, id_kinds, specs)
    values: dict[str, list] = {name: [] for name, _, _ in wanted}
    rows: list[int] = []
    for index, record in batch:
        try:
            example = _parse_proto(record)
        except _BadProto as e:
            report(BadRecord(path, index, str(e), unit="record index"))
            continue
        lists = _check(example.features.feature, wanted)
        if isinstance(lists, str):
            report(BadRecord(path, index, lists, unit="record index"))
            continue
        for (name, _, _), found in zip(wanted, lists, strict=True):
            values[name].extend(found)
        rows.append(index)
    if not rows:
        return None
    keep = np.ones(len(rows), dtype=bool)
    arrays = []
    for name in id_columns:
        if id_kinds[name] == "int":
            arrays.append(ints_as_ids(pa.array(values[name], pa.int64())))
            continue
        ids = pa.array(values[name], pa.binary())
        empty = pc.equal(pc.binary_length(ids), 0).to_numpy(zero_copy_only=False)
        for offset in np.flatnonzero(empty & keep):
            reason = f"feature '{name}': empty id"
            report(BadRecord(path, rows[offset], reason, unit="record index"))
        keep &= ~empty
        arrays.append(ids)
    for name, spec in specs.items():
        flat = np.array(values[name], dtype=NUMPY_DTYPE[spec.kind])
        arrays.append(from_numpy(flat.reshape(len(rows), spec.width) if spec.shape else flat, spec))
    table = pa.Table.from_arrays(arrays, schema=schema)
    if keep.all():
        return table
    return table.filter(pa.array(keep)) if keep.any() else None


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
