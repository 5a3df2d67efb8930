"""The chunk encoder with compiled kernels (sampler/sample/encode_jit.py): each record is
written whole in one pass, its feature rows and ids copied straight from the tables (no
gathered copy, no joins), varints and headers in place. On CPython the kernel writes each
record straight into its new bytes object (one copy of each feature row); elsewhere into a
buffer of a few records, from which each record's bytes are then cut.

`encode_chunk_compiled(chunk, specs)` gives the bytes of `encode_chunk_numpy`
(sampler.sample.encode_numpy; tests/test_encode_compiled.py compares them). This module
plans (which table rows, which lengths) with numpy over per-record arrays; the kernels do
the per-value work. A column the kernels do not read as it is (float features that are not
float32, int features that are not int64, bytes features, a non-contiguous table) is
gathered by the numpy encoder's own code and copied from there. Anything the numpy encoder
would reject (a missing or misshaped feature, an index out of range, a non-bytes id) is
`Unsupported` here: the caller then runs the numpy encoder, which raises its own error.
"""

from __future__ import annotations

import weakref

import numpy as np

from sampler.jit_loader import kernels
from sampler.sample import encode_numpy as numpy_encoder
from sampler.sample.encode import SAMPLE_ID_KEY, SEED_ID_KEY, EncodeSpecs
from sampler.sample.subgraph import SubgraphChunk

_NO_ROWS = np.zeros(0, np.int64)


class Unsupported(Exception):
    """The chunk takes the numpy encoder (which raises the user's error, if any)."""


def _kernels():
    return kernels("sampler.sample.encode_jit")


def _int64(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


class _Entry:
    """One key of every record: its header constants and where its list payload comes from."""

    def __init__(self, key: str, kind: str):
        self.key = key.encode()
        self.kind = kind
        self.packed = numpy_encoder._PACKED[kind]
        self.prefix = np.frombuffer(numpy_encoder._Entry(key, kind, 0).prefix, np.uint8)
        self.source: tuple | None = None  # (how, arrays..., rows, row0, bounds)
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
        if how == "varint":
            return k.varint_payloads(*arrays, rows, row0, bounds)
        if len(rows) == 0:  # ragged, rows row0, row0 + 1, ...: no gather needed
            at = arrays[1][row0 + bounds]
            return at[1:] - at[:-1]
        return k.ragged_payloads(arrays[1], rows, row0, bounds)

    def params(self, arrays: _Arrays, prefix_at: int) -> list[int]:
        """This entry's row of encode_jit.write_records' `params`."""
        k = _kernels()
        row = [k.NONE, numpy_encoder._TAG[self.kind], self.packed, prefix_at, len(self.prefix)]
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
# array, while it lives (as encode_numpy._framed_table_ids, with the slack).
_FRAMED_IDS: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}


def _framed_table_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the framed ids of a table's rows, concatenated, then SLACK bytes; n + 1 row offsets),
    once per table."""
    hit = _FRAMED_IDS.get(id(ids))
    if hit is not None and hit[0]() is ids:
        return hit[1], hit[2]
    data, framed = numpy_encoder.framed_bytes(ids)
    padded = np.zeros(len(data) + _kernels().SLACK, np.uint8)
    padded[: len(data)] = data
    offsets = numpy_encoder._offsets(framed)
    _FRAMED_IDS[id(ids)] = (weakref.ref(ids), padded, offsets)
    weakref.finalize(ids, _FRAMED_IDS.pop, id(ids), None)
    return padded, offsets


def _ragged_body(data: np.ndarray, offsets: np.ndarray, n: int) -> tuple:
    """A body of the numpy encoder (buffer, n + 1 record offsets) as a ragged source."""
    return ("ragged", data, _int64(offsets), _NO_ROWS, 0, np.arange(n + 1, dtype=np.int64))


def _rows_of(index, b0: int, b1: int, table_rows: int) -> tuple[np.ndarray, int]:
    """(the table rows of values b0..b1 as int64, or empty; row0) - Unsupported when any
    is out of the table (np.take would raise, or wrap a negative one)."""
    if index is None:
        if b1 > table_rows:
            raise Unsupported
        return _NO_ROWS, b0
    index = np.asarray(index)
    if index.ndim != 1 or index.dtype.kind not in "iu" or len(index) < b1:
        raise Unsupported
    rows = _int64(index[b0:b1])
    if len(rows) and (rows.min() < 0 or rows.max() >= table_rows):
        raise Unsupported
    return rows, 0


def _feature_source(column, index, fk, bounds: np.ndarray, where: str, n: int) -> tuple:
    """The payload source of one feature of a set's rows [bounds[0], bounds[-1])."""
    spec = fk.spec
    b0, b1 = int(bounds[0]), int(bounds[-1])
    base = bounds - b0
    expected = (spec.width,) if spec.shape else ()
    direct = (
        isinstance(column, np.ndarray)
        and column.shape[1:] == expected
        and column.flags.c_contiguous
        and (spec.kind, column.dtype.str) in (("float", "<f4"), ("int", "<i8"))
    )
    if direct:
        rows, row0 = _rows_of(index, b0, b1, len(column))
        flat = column.reshape(-1)
        if spec.kind == "float":
            return ("fixed", flat.view(np.uint8), 4 * spec.width, rows, row0, base)
        return ("varint", flat, spec.width, rows, row0, base)
    # the numpy encoder's gather (np.take, then a copy in the payload's format)
    try:
        values = None if column is None else numpy_encoder._take(column, index)
        values = None if values is None else values[b0:b1]
        values = numpy_encoder._check(values, fk, b1 - b0, where)
        data, offsets = numpy_encoder._value_body(values, spec.kind, base, spec.width)
    except (ValueError, TypeError, IndexError) as e:
        raise Unsupported from e
    return _ragged_body(data, offsets, n)


def _entries(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[_Entry]:
    """sampler.sample.encode_numpy._entries, as payload sources instead of bodies."""
    n, k = len(chunk), _kernels()
    entries = []
    for key, values in ((SAMPLE_ID_KEY, chunk.sample_ids), (SEED_ID_KEY, chunk.seed_ids)):
        entry = _Entry(key, "bytes")
        try:
            data, lengths = numpy_encoder.framed_bytes(values)
        except ValueError as e:
            raise Unsupported from e
        if len(lengths) != n:
            raise Unsupported
        entry.source = _ragged_body(data, numpy_encoder._offsets(lengths), n)
        entries.append(entry)
    unknown = chunk.node_rows.keys() - specs.node_sets.keys()
    unknown |= chunk.edge_rows.keys() - specs.edge_sets.keys()
    if unknown:
        raise Unsupported
    sizes = {}
    for name, enc in specs.node_sets.items():
        where = f"node set '{name}'"
        part = chunk.node_rows.get(name)
        size, ids = _Entry(enc.size_key, "int"), _Entry(enc.id_key, "bytes")
        features = [_Entry(fk.key, fk.spec.kind) for fk in enc.features]
        if part is None:
            size.inline = np.zeros(n, np.int64)
        else:
            bounds = _int64(part.bounds)
            if len(bounds) != n + 1:
                raise Unsupported
            size.inline = np.diff(bounds)
            sizes[name] = size.inline
            b0, b1 = int(bounds[0]), int(bounds[-1])
            base = bounds - b0
            table_ids = part.batch.ids
            if getattr(table_ids, "ndim", 1) != 1:
                raise Unsupported
            try:
                if part.index is None:
                    data, lengths = numpy_encoder.framed_bytes(table_ids[b0:b1])
                    if len(lengths) != b1 - b0:
                        raise Unsupported
                    ids.source = (
                        "ragged",
                        data,
                        numpy_encoder._offsets(lengths),
                        _NO_ROWS,
                        0,
                        base,
                    )
                else:
                    data, offsets = _framed_table_ids(table_ids)
                    rows, _ = _rows_of(part.index, b0, b1, len(offsets) - 1)
                    ids.source = ("ragged", data, offsets, rows, 0, base, k.SLACK)
            except ValueError as e:
                raise Unsupported from e
            for fk, entry in zip(enc.features, features, strict=True):
                column = part.batch.features.get(fk.spec.name)
                entry.source = _feature_source(column, part.index, fk, bounds, where, n)
        entries += [size, ids, *features]
    for name, enc in specs.edge_sets.items():
        where = f"edge set '{name}'"
        edges = chunk.edge_rows.get(name)
        size = _Entry(enc.size_key, "int")
        ends = [_Entry(enc.source_key, "int"), _Entry(enc.target_key, "int")]
        features = [_Entry(fk.key, fk.spec.kind) for fk in enc.features]
        if edges is None:
            size.inline = np.zeros(n, np.int64)
        else:
            index, values_of, bounds = edges
            bounds = _int64(bounds)
            if len(bounds) != n + 1:
                raise Unsupported
            size.inline = np.diff(bounds)
            b0, b1 = int(bounds[0]), int(bounds[-1])
            base = bounds - b0
            index = np.asarray(index)[:, b0:b1]
            if index.ndim != 2 or len(index) != 2 or index.shape[1] != b1 - b0:
                raise Unsupported
            if b1 > b0 and index.dtype.kind not in "iu":
                raise Unsupported
            for end, entry, node_set in zip((0, 1), ends, (enc.source, enc.target), strict=True):
                values = _int64(index[end])
                nodes = sizes.get(node_set)
                nodes = np.zeros(n, np.int64) if nodes is None else nodes
                lengths, bad = k.index_payloads(values, base, nodes)
                if bad >= 0:  # (a uint64 index past 2**63 is negative here)
                    raise Unsupported
                entry.source = ("varint", values, 1, _NO_ROWS, 0, base)
                entry.lengths = lengths
            for fk, entry in zip(enc.features, features, strict=True):
                values = values_of.get(fk.spec.name)
                values = None if values is None else values[b0:b1]
                entry.source = _feature_source(values, None, fk, base, where, n)
        entries += [size, *ends, *features]
    return sorted(entries, key=lambda e: e.key)


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


def encode_chunk_compiled(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[bytes]:
    """encode_chunk_numpy's records of `chunk`; Unsupported where that one would raise (or
    meets input the kernels do not take)."""
    n = len(chunk)
    if n == 0:
        return []
    k = _kernels()
    try:
        entries = _entries(chunk, specs)
    except (ValueError, TypeError, IndexError, AttributeError) as e:  # the numpy one's to say
        raise Unsupported from e
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
    table = arrays.table()
    direct = _direct_bytes()
    if direct is not None and sizes.min() > 1:  # (0 or 1 byte may be a shared object)
        # one copy: each record written straight into its own new bytes object
        new_bytes, offset = direct
        records = [new_bytes(None, size) for size in sizes.tolist()]
        addresses = np.array([id(record) + offset for record in records], np.int64)
        wrong = k.write_into(addresses, sizes, total, params, prefixes, table, heads)
        if wrong >= 0:
            raise AssertionError(f"encode_jit: record {wrong} is not {sizes[wrong]} bytes")
        return records
    starts = np.zeros(n + 1, np.int64)
    np.cumsum(sizes, out=starts[1:])
    ends = starts.tolist()
    size = min(ends[-1], max(GROUP_BYTES, int(sizes.max())))
    buffer = np.empty(size + k.SLACK, np.uint8)  # bytes to spare (encode_jit._put_index, SLACK)
    view = memoryview(buffer)
    records, first = [], 0
    while first < n:
        last = int(np.searchsorted(starts, ends[first] + size, "right")) - 1
        last = max(first + 1, min(last, n))
        shift = ends[first]
        k.write_records(buffer, shift, first, last, starts, total, params, prefixes, table, heads)
        records += [bytes(view[ends[i] - shift : ends[i + 1] - shift]) for i in range(first, last)]
        first = last
    return records
