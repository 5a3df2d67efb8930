"""A chunk of subgraphs encoded as GraphTensor tf.Examples at once: the records' layout.

`encode_chunk(chunk, specs)` returns the serialized tf.Example of every subgraph of a
SubgraphChunk (the keys and values of sampler/sample/encode.py's specs), byte for byte what
protobuf's deterministic serialization gives (tests/test_encode_chunk.py compares them with
protobuf's, and decodes them with TensorFlow's parser). This module checks the chunk and
plans every record with numpy over per-record arrays: which table rows each key's values
come from and every length of every header. The compiled kernels of
sampler/sample/encode_jit.py then write each record whole in one pass, its feature rows and
ids copied straight from the tables, varints and headers in place; on CPython straight into
each record's new bytes object (one copy of each feature row), elsewhere into a buffer of a
few records, from which each record's bytes are then cut.

The wire format of a deterministically serialized Example (map entries sorted by key bytes):

  Example   = 0x0a len(Features) Features
  Features  = for each key: 0x0a len(entry) entry
  entry     = 0x0a len(key) key 0x12 len(Feature) Feature
  Feature   = tag len(list) list        tag 0x0a bytes_list, 0x12 float_list, 0x1a int64_list
  list      = bytes: for each value 0x0a len(value) value
              float, int64 (packed): 0x0a len(payload) payload, nothing at all when empty
  payload   = float: little-endian float32s; int64: varints (negative values take 10 bytes)

A column the kernels do not read as it is (float features that are not float32, int features
that are not int64, a non-contiguous table, bytes features) is first gathered and converted
here. A chunk that cannot be written (a missing or misshaped feature, an index out of range, a
non-bytes id) is a ValueError naming the set and the feature.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import numpy as np

from sampler.arrays import read_only
from sampler.jit_loader import kernels
from sampler.sample.encode import SAMPLE_ID_KEY, SEED_ID_KEY, EncodeSpecs
from sampler.sample.subgraph import SubgraphChunk

_TAG = {"bytes": 0x0A, "float": 0x12, "int": 0x1A}
_ACCEPTED_KINDS = {"float": "fiub", "int": "iub", "bytes": "O"}
_NO_ROWS = np.zeros(0, np.int64)
_U8 = np.uint8


def _kernels():
    return kernels("sampler.sample.encode_jit")


def _int64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of the varint of each uint64 value (1 to 10)."""
    out = np.ones(len(values), np.int64)
    for j in range(1, 10):
        more = values >= np.uint64(1 << (7 * j))
        if not more.any():
            break
        out += more
    return out


def framed_bytes(values) -> tuple[np.ndarray, np.ndarray]:
    """Each byte string as a BytesList value (0x0a, varint length, bytes), concatenated; and
    the framed length of each. A value that is not bytes is a ValueError."""
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    try:
        data = np.frombuffer(b"".join(values), _U8)
    except TypeError as e:
        raise ValueError(f"values must be bytes ({e})") from None
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    head_lengths = varint_lengths(lengths.astype(np.uint64))
    framed = 1 + head_lengths + lengths
    starts = np.cumsum(framed) - framed
    out = np.empty(int(framed.sum()), _U8)
    is_data = np.ones(len(out), bool)
    out[starts] = 0x0A
    is_data[starts] = False
    for j in range(int(head_lengths.max()) if len(values) else 0):  # the varint's bytes
        has = head_lengths > j
        at = starts[has] + 1 + j
        more = (head_lengths[has] > j + 1).astype(_U8) << _U8(7)
        out[at] = ((lengths[has] >> (7 * j)) & 0x7F).astype(_U8) | more
        is_data[at] = False
    out[is_data] = data
    return out, framed


# --------------------------------------------------------------------------- payload sources


class _Entry:
    """One key of every record: its header constants and where its list payload comes from
    (a source of encode_jit.py: ("fixed" | "varint" | "ragged", data, aux, rows, row0,
    bounds[, slack]))."""

    def __init__(self, key: str, kind: str):
        self.key = key.encode()
        self.kind = kind
        self.packed = kind != "bytes"
        # 0x0a len(key) key 0x12: the constant part of its header
        self.prefix = np.frombuffer(
            b"\x0a" + framed_bytes([self.key])[0][1:].tobytes() + b"\x12", _U8
        )
        self.source: tuple | None = None
        self.inline: np.ndarray | None = None  # one int64 varint per record (#size)
        self.lengths: np.ndarray | None = None  # of the payloads, when known already

    def payload_lengths(self, n: int) -> np.ndarray:
        k = _kernels()
        if self.lengths is not None:
            return self.lengths
        if self.inline is not None:
            return k.varint_lengths(self.inline)
        if self.source is None:
            return np.zeros(n, np.int64)
        how, *arrays, rows, row0, bounds = self.source[:6]
        if how == "fixed":
            return np.diff(bounds) * arrays[1]
        if how == "varint":  # (values read-only, as a mapped table's are: one signature)
            return k.varint_payloads(read_only(arrays[0]), arrays[1], rows, row0, bounds)
        if len(rows) == 0:  # ragged, rows row0, row0 + 1, ...: no gather needed
            at = arrays[1][row0 + bounds]
            return at[1:] - at[:-1]
        return k.ragged_payloads(arrays[1], rows, row0, bounds)

    def params(self, arrays: _Arrays, prefix_at: int) -> list[int]:
        """This entry's row of encode_jit.write_records' `params`."""
        k = _kernels()
        row = [k.NONE, _TAG[self.kind], self.packed, prefix_at, len(self.prefix)]
        row += [-1, -1, -1, 0, -1, 0]  # DATA, AUX, ROWS, ROW0, BOUNDS, UNIT
        if self.inline is not None:
            row[k.HOW], row[k.DATA] = k.INLINE, arrays.add(_int64(self.inline))
        elif self.source is not None:
            how, data, aux, rows, row0, bounds, *slack = self.source
            row[k.HOW] = {"fixed": k.FIXED, "varint": k.VARINT, "ragged": k.RAGGED}[how]
            row[k.DATA] = arrays.add(data)
            if how == "ragged":
                row[k.AUX], row[k.UNIT] = arrays.add(aux), (slack or [0])[0]
            else:
                row[k.UNIT] = aux
            row[k.ROWS] = arrays.add(rows) if len(rows) else -1
            row[k.ROW0], row[k.BOUNDS] = row0, arrays.add(bounds)
        return row


class _Arrays:
    """The (address, length) rows of the arrays the kernel reads; holds them while it runs."""

    def __init__(self):
        self.held: list[np.ndarray] = []

    def add(self, array: np.ndarray) -> int:
        if not array.flags.c_contiguous or array.dtype not in (np.uint8, np.int64):
            raise AssertionError(f"not a contiguous uint8/int64 array: {array.dtype}")
        self.held.append(array)
        return len(self.held) - 1

    def table(self) -> np.ndarray:
        rows = [(a.__array_interface__["data"][0], len(a)) for a in self.held]
        return np.array(rows, np.int64).reshape(-1, 2)


# Framed ids (framed_bytes, then SLACK zero bytes) of whole node tables, by id() of their ids
# array, while it lives: a table's ids are framed once, whatever the chunks that take them.
_FRAMED_IDS: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}


def _framed_table_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the framed ids of a table's rows, concatenated, then SLACK bytes; n + 1 row offsets)."""
    hit = _FRAMED_IDS.get(id(ids))
    if hit is not None and hit[0]() is ids:
        return hit[1], hit[2]
    data, framed = framed_bytes(ids)
    padded = np.zeros(len(data) + _kernels().SLACK, _U8)
    padded[: len(data)] = data
    offsets = _offsets(framed)
    _FRAMED_IDS[id(ids)] = (weakref.ref(ids), padded, offsets)
    weakref.finalize(ids, _FRAMED_IDS.pop, id(ids), None)
    return padded, offsets


def _rows_of(index, b0: int, b1: int, table_rows: int, where: str) -> tuple[np.ndarray, int]:
    """(the table rows of values b0..b1 as int64, or empty; row0)."""
    if index is None:
        if b1 > table_rows:
            raise ValueError(f"{where}: {b1} rows of a table of {table_rows}")
        return _NO_ROWS, b0
    rows = _int64(np.asarray(index)[b0:b1])
    if len(rows) < b1 - b0 or (len(rows) and (rows.min() < 0 or rows.max() >= table_rows)):
        raise ValueError(f"{where}: rows outside a table of {table_rows}")
    return rows, 0


def _checked(values, fk, rows: int, where: str) -> np.ndarray:
    spec = fk.spec
    if values is None:
        raise ValueError(f"{where}: feature '{spec.name}' is missing")
    shape = getattr(values, "shape", None)
    expected = (rows, spec.width) if spec.shape else (rows,)
    if shape != expected:
        raise ValueError(
            f"{where}: feature '{spec.name}' has shape {shape}, expected {expected}"
            f" (schema shape {list(spec.shape)})"
        )
    if values.dtype.kind not in _ACCEPTED_KINDS[spec.kind]:
        raise ValueError(
            f"{where}: feature '{spec.name}' has dtype {values.dtype}, expected {spec.kind} values"
        )
    return values


def _feature_source(column, index, fk, bounds: np.ndarray, where: str) -> tuple:
    """The payload source of one feature of a set's rows [bounds[0], bounds[-1])."""
    spec = fk.spec
    b0, b1 = int(bounds[0]), int(bounds[-1])
    base = bounds - b0
    expected = (spec.width,) if spec.shape else ()
    if (
        isinstance(column, np.ndarray)
        and column.shape[1:] == expected
        and column.flags.c_contiguous
        and (spec.kind, column.dtype.str) in (("float", "<f4"), ("int", "<i8"))
    ):  # read as it is, row by row
        rows, row0 = _rows_of(index, b0, b1, len(column), where)
        if spec.kind == "float":
            return ("fixed", column.reshape(-1).view(_U8), 4 * spec.width, rows, row0, base)
        return ("varint", column.reshape(-1), spec.width, rows, row0, base)
    if column is not None and index is not None:  # the chunk's rows of the table
        column = np.take(column, _rows_of(index, b0, b1, len(column), where)[0], axis=0)
    elif column is not None:
        column = column[b0:b1]
    values = _checked(column, fk, b1 - b0, where)
    if spec.kind == "float":
        raw = np.ascontiguousarray(values, dtype="<f4").reshape(-1).view(_U8)
        return ("fixed", raw, 4 * spec.width, _NO_ROWS, 0, base)
    if spec.kind == "int":
        return ("varint", _int64(values.reshape(-1)), spec.width, _NO_ROWS, 0, base)
    try:
        data, lengths = framed_bytes(values.reshape(-1))
    except ValueError as e:
        raise ValueError(f"{where}: feature '{spec.name}' holds a non-bytes value ({e})") from None
    return ("ragged", data, _offsets(lengths), _NO_ROWS, 0, base * spec.width)


def _bounds(bounds, n: int, where: str) -> np.ndarray:
    bounds = _int64(bounds)
    if len(bounds) != n + 1:
        raise ValueError(f"{where}: bounds of {len(bounds) - 1} samples in a chunk of {n}")
    return bounds


def _entries(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[_Entry]:
    """Every key of the records, sorted: its payload's source, checked."""
    n, k = len(chunk), _kernels()
    entries = []
    for key, values in ((SAMPLE_ID_KEY, chunk.sample_ids), (SEED_ID_KEY, chunk.seed_ids)):
        entry = _Entry(key, "bytes")
        try:
            data, lengths = framed_bytes(values)
        except ValueError as e:
            raise ValueError(f"subgraph: seed_id and sample_id must be bytes ({e})") from None
        entry.source = ("ragged", data, _offsets(lengths), _NO_ROWS, 0, np.arange(n + 1))
        entries.append(entry)
    if specs.seed_time is not None:
        if chunk.seed_times is None:
            raise ValueError("chunk: the schema has context/seed_time but the chunk no seed times")
        entry = _Entry(specs.seed_time.key, specs.seed_time.spec.kind)
        bounds = np.arange(n + 1, dtype=np.int64)
        entry.source = _feature_source(chunk.seed_times, None, specs.seed_time, bounds, "context")
        entries.append(entry)
    unknown = chunk.node_rows.keys() - specs.node_sets.keys()
    unknown |= chunk.edge_rows.keys() - specs.edge_sets.keys()
    if unknown:
        raise ValueError(f"chunk: sets {sorted(unknown)} not in schema")
    sizes = {}
    for name, enc in specs.node_sets.items():
        where = f"node set '{name}'"
        part = chunk.node_rows.get(name)
        size, ids = _Entry(enc.size_key, "int"), _Entry(enc.id_key, "bytes")
        features = [_Entry(fk.key, fk.spec.kind) for fk in enc.features]
        entries += [size, ids, *features]
        if part is None:
            size.inline = np.zeros(n, np.int64)
            continue
        bounds = _bounds(part.bounds, n, where)
        size.inline = sizes[name] = np.diff(bounds)
        b0, b1 = int(bounds[0]), int(bounds[-1])
        table_ids = part.batch.ids
        if getattr(table_ids, "ndim", 1) != 1:
            raise ValueError(f"{where}: ids must be 1-D, got shape {table_ids.shape}")
        try:
            if part.index is None:
                data, lengths = framed_bytes(table_ids[b0:b1])
                ids.source = ("ragged", data, _offsets(lengths), _NO_ROWS, 0, bounds - b0)
            else:
                data, offsets = _framed_table_ids(table_ids)
                rows, _ = _rows_of(part.index, b0, b1, len(offsets) - 1, where)
                ids.source = ("ragged", data, offsets, rows, 0, bounds - b0, k.SLACK)
        except ValueError as e:
            raise ValueError(f"{where}: node ids must be bytes ({e})") from None
        for fk, entry in zip(enc.features, features, strict=True):
            column = part.batch.features.get(fk.spec.name)
            entry.source = _feature_source(column, part.index, fk, bounds, where)
    for name, enc in specs.edge_sets.items():
        where = f"edge set '{name}'"
        edges = chunk.edge_rows.get(name)
        size = _Entry(enc.size_key, "int")
        ends = [_Entry(enc.source_key, "int"), _Entry(enc.target_key, "int")]
        features = [_Entry(fk.key, fk.spec.kind) for fk in enc.features]
        entries += [size, *ends, *features]
        if edges is None:
            size.inline = np.zeros(n, np.int64)
            continue
        index, values_of, bounds = edges
        bounds = _bounds(bounds, n, where)
        size.inline = np.diff(bounds)
        b0, b1 = int(bounds[0]), int(bounds[-1])
        base = bounds - b0
        index = np.asarray(index)[:, b0:b1]
        for end, entry, node_set in zip((0, 1), ends, (enc.source, enc.target), strict=True):
            entry.source, entry.lengths = _index_source(
                index[end], base, sizes.get(node_set), where, ("#source", "#target")[end]
            )
        for fk, entry in zip(enc.features, features, strict=True):
            values = values_of.get(fk.spec.name)
            values = None if values is None else values[b0:b1]
            entry.source = _feature_source(values, None, fk, base, where)
    return sorted(entries, key=lambda e: e.key)


def _index_source(values, base, nodes, where: str, name: str):
    """(the varint source of one end's edge indices, their payload lengths); every index
    must be below its sample's node count in that node set."""
    if len(values) and values.dtype.kind not in "iu":
        raise ValueError(f"{where}: {name} has dtype {values.dtype}, not integer")
    values = _int64(values)  # (a uint64 index past 2**63 is negative here)
    nodes = np.zeros(len(base) - 1, np.int64) if nodes is None else nodes
    lengths, bad = _kernels().index_payloads(values, base, nodes)
    if bad >= 0:
        limit = nodes[np.searchsorted(base, bad, "right") - 1]
        raise ValueError(
            f"{where}: {name} index {int(values[bad])} but the sample's node set has"
            f" {int(limit)} nodes"
        )
    return ("varint", values, 1, _NO_ROWS, 0, base), lengths


# --------------------------------------------------------------------------- records

# Without direct writes (below): records are written in groups of about this many bytes into
# one buffer (it stays in the CPU's caches) and copied from there into their bytes objects.
GROUP_BYTES = 1 << 21


def _direct_bytes():
    """(new_bytes, offset) where new_bytes(None, n) is a new bytes object of n bytes not yet
    written (CPython's PyBytes_FromStringAndSize(NULL, n): its documented way to build a bytes
    object in place) and `offset` where its bytes start from its id(); None where that does
    not hold (checked on one object), and the records are then cut from a buffer."""
    global _DIRECT
    if _DIRECT is not False:
        return _DIRECT
    _DIRECT = None
    try:
        import ctypes
        import sys

        if sys.implementation.name != "cpython":
            return None
        prototype = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_char_p, ctypes.c_ssize_t)
        new_bytes = prototype(("PyBytes_FromStringAndSize", ctypes.pythonapi))  # our own
        offset = bytes.__basicsize__ - 1  # ob_sval, the last field: n bytes, then a NUL
        probe = new_bytes(None, 3)
        ctypes.memmove(id(probe) + offset, b"abc", 3)
        if probe == b"abc" and type(probe) is bytes:
            _DIRECT = (new_bytes, offset)
    except (AttributeError, OSError, TypeError, ValueError):
        pass
    return _DIRECT


_DIRECT: tuple | None | bool = False  # not checked yet


class Layout(NamedTuple):
    """What the kernels of encode_jit.py need to write a chunk's records: `sizes` (bytes of
    each record), then write_records' and write_into's other arguments (`arrays` holds the
    arrays whose addresses `table` gives, while the layout lives)."""

    sizes: np.ndarray
    total: np.ndarray
    params: np.ndarray
    prefixes: np.ndarray
    table: np.ndarray
    heads: np.ndarray
    arrays: _Arrays

    def write_records(self, out, shift: int, first: int, last: int, starts) -> None:
        """Records first..last-1 into the uint8 array `out`, record i at starts[i] - shift;
        `out` must have SLACK bytes to spare after the last (they may be written over, as
        may the SLACK bytes after each record before the next is written)."""
        k, arguments = _kernels(), (self.total, self.params, self.prefixes, self.table, self.heads)
        k.write_records(out, shift, first, last, starts, *arguments)


def layout(chunk: SubgraphChunk, specs: EncodeSpecs) -> Layout:
    """The layout of a chunk of at least one subgraph: every record's length and headers; a
    ValueError naming the set and feature for a chunk that cannot be written."""
    n = len(chunk)
    k = _kernels()
    entries = _entries(chunk, specs)
    vlen = k.varint_lengths
    heads = np.empty((len(entries), 4, n), np.int64)  # entry, Feature, list, payload lengths
    total = np.zeros(n, np.int64)
    for e, entry in enumerate(entries):
        p = entry.payload_lengths(n)
        list_len = np.where(p > 0, 1 + vlen(p) + p, 0) if entry.packed else p
        feature = 1 + vlen(list_len) + list_len
        length = len(entry.prefix) + vlen(feature) + feature
        heads[e] = length, feature, list_len, p
        total += 1 + vlen(length) + length
    sizes = 1 + vlen(total) + total
    arrays, params, prefix_at = _Arrays(), [], 0
    for entry in entries:
        params.append(entry.params(arrays, prefix_at))
        prefix_at += len(entry.prefix)
    params = np.array(params, np.int64)
    prefixes = np.concatenate([entry.prefix for entry in entries])
    return Layout(sizes, total, params, prefixes, arrays.table(), heads, arrays)


def encode_chunk(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[bytes]:
    """The serialized tf.Example of every subgraph of `chunk`, in order (see the module
    docstring); a ValueError naming the set and feature for a chunk that cannot be written."""
    n = len(chunk)
    if n == 0:
        return []
    k = _kernels()
    plan = layout(chunk, specs)
    sizes = plan.sizes
    direct = _direct_bytes()
    if direct is not None and sizes.min() > 1:  # (0 or 1 byte may be a shared object)
        # one copy: each record written straight into its own new bytes object
        new_bytes, offset = direct
        records = [new_bytes(None, size) for size in sizes.tolist()]
        addresses = np.array([id(record) + offset for record in records], np.int64)
        wrong = k.write_into(addresses, sizes, *plan[1:6])
        if wrong >= 0:
            raise AssertionError(f"encode_jit: record {wrong} is not {sizes[wrong]} bytes")
        return records
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    ends = starts.tolist()
    size = min(ends[-1], max(GROUP_BYTES, int(sizes.max())))
    buffer = np.empty(size + k.SLACK, _U8)  # bytes to spare (encode_jit._put_index, SLACK)
    view = memoryview(buffer)
    records, first = [], 0
    while first < n:
        last = int(np.searchsorted(starts, ends[first] + size, "right")) - 1
        last = max(first + 1, min(last, n))
        shift = ends[first]
        plan.write_records(buffer, shift, first, last, starts)
        records += [bytes(view[ends[i] - shift : ends[i + 1] - shift]) for i in range(first, last)]
        first = last
    return records
