"""A chunk of subgraphs encoded as GraphTensor tf.Examples at once (numpy, no protobuf).

The numpy twin of the compiled encoder (sampler.sample.encode_compiled) and its fallback
(sampler.sample.encode_chunk chooses). `encode_chunk_numpy(chunk, specs)` returns, for a
SubgraphChunk, the records `encode_subgraph` (sampler.sample.encode) writes for its
subgraphs one by one: the same bytes (tests/test_encode_chunk.py compares them, and decodes
them independently). It gathers every
feature column and id of the chunk with numpy, encodes the varints and frames the byte strings
of the whole chunk in a few array operations, builds every record's headers (the key and the
lengths) as rows of one byte matrix, and then only joins slices per record.

The wire format of a deterministically serialized Example (map entries sorted by key bytes):

  Example   = 0x0a len(Features) Features
  Features  = for each key: 0x0a len(entry) entry
  entry     = 0x0a len(key) key 0x12 len(Feature) Feature
  Feature   = tag len(list) list        tag 0x0a bytes_list, 0x12 float_list, 0x1a int64_list
  list      = bytes: for each value 0x0a len(value) value
              float, int64 (packed): 0x0a len(payload) payload, nothing at all when empty
  payload   = float: little-endian float32s; int64: varints (negative values take 10 bytes)
"""

from __future__ import annotations

import weakref

import numpy as np

from sampler.arrays import expand_ranges
from sampler.sample.encode import SAMPLE_ID_KEY, SEED_ID_KEY, EncodeSpecs, FeatureKey
from sampler.sample.subgraph import SubgraphChunk

_TAG = {"bytes": 0x0A, "float": 0x12, "int": 0x1A}
_PACKED = {"bytes": False, "float": True, "int": True}
_ACCEPTED_KINDS = {"float": "fiub", "int": "iub", "bytes": "O"}
_U8 = np.uint8


# --------------------------------------------------------------------------- varints


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes of the varint of each uint64 value (1 to 10)."""
    out = np.ones(len(values), np.int64)
    for j in range(1, 10):
        more = values >= np.uint64(1 << (7 * j))
        if not more.any():
            break
        out += more
    return out


def varint_matrix(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """((n, w) uint8 rows holding each value's varint, left-aligned; the varint lengths).

    Int64 values are encoded as their two's complement uint64 (as protobuf does)."""
    values = np.asarray(values)
    if values.dtype != np.uint64:
        values = values.astype(np.int64, copy=False).view(np.uint64)
    lengths = varint_lengths(values)
    width = int(lengths.max()) if len(values) else 1
    out = np.empty((len(values), width), _U8)
    for j in range(width):
        byte = (values >> np.uint64(7 * j)).astype(_U8) & _U8(0x7F)
        if j < width - 1:
            byte |= (lengths > j + 1).astype(_U8) << _U8(7)
        out[:, j] = byte
    return out, lengths


def varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the varints of `values` concatenated, as uint8; the length of each)."""
    values = np.asarray(values)
    if len(values) and values.dtype.kind in "iu" and values.min() >= 0 and values.max() < 1 << 14:
        return _small_varints(values.astype(np.uint16))
    matrix, lengths = varint_matrix(values)
    if matrix.shape[1] == 1:
        return matrix.ravel(), lengths
    keep = np.arange(matrix.shape[1]) < lengths[:, None]
    return np.compress(keep.ravel(), matrix.ravel()), lengths


def _small_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """varints() of uint16 values below 2**14 (one or two bytes each): edge indices, mostly."""
    two = values >= 0x80
    if not two.any():
        return values.astype(_U8), np.ones(len(values), np.int64)
    words = np.where(two, (values & 0x7F) | 0x80 | ((values >> 7) << 8), values).astype("<u2")
    keep = np.ones(2 * len(values), bool)
    keep[1::2] = two
    return np.compress(keep, words.view(_U8)), 1 + two.astype(np.int64)


def framed_bytes(values) -> tuple[np.ndarray, np.ndarray]:
    """Each byte string as a BytesList value (0x0a, varint length, bytes), concatenated; and
    the framed length of each. A value that is not bytes is a ValueError."""
    values = values.tolist() if hasattr(values, "tolist") else list(values)
    try:
        data = np.frombuffer(b"".join(values), _U8)
    except TypeError as e:
        raise ValueError(f"values must be bytes ({e})") from None
    lengths = np.fromiter(map(len, values), np.int64, len(values))
    head, head_lengths = varint_matrix(lengths)
    framed = 1 + head_lengths + lengths
    starts = np.cumsum(framed) - framed
    out = np.empty(int(framed.sum()), _U8)
    is_data = np.ones(len(out), bool)
    out[starts] = 0x0A
    is_data[starts] = False
    for j in range(head.shape[1]):
        has = head_lengths > j
        at = starts[has] + 1 + j
        out[at] = head[has, j]
        is_data[at] = False
    out[is_data] = data
    return out, framed


def _offsets(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


# --------------------------------------------------------------------------- headers


class _Glue:
    """Per-record byte strings built column by column: constants, varints, small bodies."""

    def __init__(self, n: int):
        self.n = n
        self.matrices: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []

    def constant(self, data: bytes, present: np.ndarray | None = None) -> None:
        row = np.frombuffer(data, _U8)
        self.matrices.append(np.broadcast_to(row, (self.n, len(row))))
        full = np.full(self.n, len(row), np.int64)
        self.lengths.append(full if present is None else np.where(present, full, 0))

    def varint(self, values: np.ndarray, present: np.ndarray | None = None) -> None:
        matrix, lengths = varint_matrix(values)
        self.matrices.append(matrix)
        self.lengths.append(lengths if present is None else np.where(present, lengths, 0))

    def build(self) -> tuple[bytes, list[int]]:
        """(the records' strings concatenated, the offset of each record's string)."""
        if not self.matrices:
            return b"", [0] * (self.n + 1)
        matrix = np.concatenate(self.matrices, axis=1)
        keep = np.concatenate(
            [np.arange(m.shape[1]) < lengths[:, None] for m, lengths in zip(
                self.matrices, self.lengths, strict=True)],
            axis=1,
        )  # fmt: skip
        return matrix[keep].tobytes(), _offsets(sum(self.lengths)).tolist()


class _Entry:
    """One key of every record: its list payload (inline varints or a body of a buffer)."""

    def __init__(self, key: str, kind: str, n: int):
        encoded = key.encode()
        self.key = encoded
        self.kind = kind
        # 0x0a len(key) key 0x12: the constant part of the entry header
        self.prefix = b"\x0a" + bytes(varints(np.array([len(encoded)]))[0]) + encoded + b"\x12"
        self.inline: np.ndarray | None = None  # one int64 per record (#size)
        self.body: tuple[np.ndarray, np.ndarray] | None = None  # (uint8 buffer, n + 1 offsets)
        self.n = n

    def payload_lengths(self) -> np.ndarray:
        if self.inline is not None:
            return varint_lengths(self.inline.astype(np.uint64))
        if self.body is None:
            return np.zeros(self.n, np.int64)
        return np.diff(self.body[1])

    def lengths(self):
        """(payload P, list L, Feature F, entry E) lengths of every record."""
        p = self.payload_lengths()
        if _PACKED[self.kind]:
            list_len = np.where(p > 0, 1 + varint_lengths(p.astype(np.uint64)) + p, 0)
        else:
            list_len = p
        feature = 1 + varint_lengths(list_len.astype(np.uint64)) + list_len
        entry = len(self.prefix) + varint_lengths(feature.astype(np.uint64)) + feature
        return p, list_len, feature, entry

    def header(self, glue: _Glue, lengths) -> None:
        """Appends the entry's header (and its inline payload) to `glue`."""
        p, list_len, feature, entry = lengths
        glue.constant(b"\x0a")
        glue.varint(entry)
        glue.constant(self.prefix)
        glue.varint(feature)
        glue.constant(bytes([_TAG[self.kind]]))
        glue.varint(list_len)
        if _PACKED[self.kind]:
            present = p > 0
            glue.constant(b"\x0a", present)
            glue.varint(p, present)
        if self.inline is not None:
            glue.varint(self.inline)


# --------------------------------------------------------------------------- columns


def _check(values, fk: FeatureKey, rows: int, where: str) -> np.ndarray:
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


def _value_body(values: np.ndarray, kind: str, bounds: np.ndarray, width: int):
    """(buffer, per-record offsets) of the list payload of a feature column."""
    starts = bounds * width
    if kind == "float":
        raw = np.ascontiguousarray(values, dtype="<f4").reshape(-1).view(_U8)
        return raw, starts * 4
    if kind == "int":
        if values.dtype != np.int64:
            values = values.astype(np.int64)
        data, lengths = varints(values.reshape(-1))
    else:
        data, lengths = framed_bytes(values.reshape(-1))
    return data, _offsets(lengths)[starts]


# Framed ids (framed_bytes) of whole node tables, by id() of their ids array, while it lives.
_FRAMED_IDS: dict[int, tuple[weakref.ref, np.ndarray, np.ndarray]] = {}


def _framed_table_ids(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the framed ids of a table's rows, concatenated; n + 1 row offsets), once per table."""
    hit = _FRAMED_IDS.get(id(ids))
    if hit is not None and hit[0]() is ids:
        return hit[1], hit[2]
    data, framed = framed_bytes(ids)
    offsets = _offsets(framed)
    _FRAMED_IDS[id(ids)] = (weakref.ref(ids), data, offsets)
    weakref.finalize(ids, _FRAMED_IDS.pop, id(ids), None)
    return data, offsets


def _id_body(part, bounds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(framed ids, per-record offsets) of a node set's rows in the chunk: rows of a table
    (`index`) are gathered from the table's framed ids, rows given per chunk framed here."""
    base = bounds - bounds[0]
    if part.index is None:
        data, lengths = framed_bytes(part.batch.ids[bounds[0] : bounds[-1]])
        return data, _offsets(lengths)[base]
    table, offsets = _framed_table_ids(part.batch.ids)
    rows = part.index[bounds[0] : bounds[-1]]
    starts, lengths = offsets[rows], offsets[rows + 1] - offsets[rows]
    return table[expand_ranges(starts, lengths)[1]], _offsets(lengths)[base]


def _take(column: np.ndarray, index: np.ndarray | None) -> np.ndarray:
    return column if index is None else np.take(column, index, axis=0)


def _entries(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[_Entry]:
    n = len(chunk)
    entries = []
    for key, values in ((SAMPLE_ID_KEY, chunk.sample_ids), (SEED_ID_KEY, chunk.seed_ids)):
        entry = _Entry(key, "bytes", n)
        try:
            data, lengths = framed_bytes(values)
        except ValueError as e:
            raise ValueError(f"subgraph: seed_id and sample_id must be bytes ({e})") from None
        entry.body = (data, _offsets(lengths))
        entries.append(entry)
    unknown = chunk.node_rows.keys() - specs.node_sets.keys()
    unknown |= chunk.edge_rows.keys() - specs.edge_sets.keys()
    if unknown:
        raise ValueError(f"chunk: sets {sorted(unknown)} not in schema")
    sizes = {}
    for name, enc in specs.node_sets.items():
        where = f"node set '{name}'"
        part = chunk.node_rows.get(name)
        size = _Entry(enc.size_key, "int", n)
        ids = _Entry(enc.id_key, "bytes", n)
        features = [_Entry(fk.key, fk.spec.kind, n) for fk in enc.features]
        if part is None:
            size.inline = np.zeros(n, np.int64)
        else:
            bounds = np.asarray(part.bounds, np.int64)
            rows = int(bounds[-1] - bounds[0])
            size.inline = np.diff(bounds)
            sizes[name] = size.inline
            base = bounds - bounds[0]
            if getattr(part.batch.ids, "ndim", 1) != 1:
                raise ValueError(f"{where}: ids must be 1-D, got shape {part.batch.ids.shape}")
            try:
                ids.body = _id_body(part, bounds)
            except ValueError as e:
                raise ValueError(f"{where}: node ids must be bytes ({e})") from None
            for fk, entry in zip(enc.features, features, strict=True):
                column = part.batch.features.get(fk.spec.name)
                values = None if column is None else _take(column, part.index)
                values = None if values is None else values[bounds[0] : bounds[-1]]
                values = _check(values, fk, rows, where)
                entry.body = _value_body(values, fk.spec.kind, base, fk.spec.width)
        entries += [size, ids, *features]
    for name, enc in specs.edge_sets.items():
        where = f"edge set '{name}'"
        edges = chunk.edge_rows.get(name)
        size = _Entry(enc.size_key, "int", n)
        ends = [_Entry(enc.source_key, "int", n), _Entry(enc.target_key, "int", n)]
        features = [_Entry(fk.key, fk.spec.kind, n) for fk in enc.features]
        if edges is None:
            size.inline = np.zeros(n, np.int64)
        else:
            index, values_of, bounds = edges
            bounds = np.asarray(bounds, np.int64)
            size.inline = np.diff(bounds)
            base = bounds - bounds[0]
            index = np.asarray(index)[:, bounds[0] : bounds[-1]]
            for end, entry, node_set in zip(
                ("#source", "#target"), ends, (enc.source, enc.target), strict=True
            ):
                _check_indices(index[0 if end == "#source" else 1], size.inline,
                               sizes.get(node_set), where, end)  # fmt: skip
                data, lengths = varints(index[0 if end == "#source" else 1])
                entry.body = (data, _offsets(lengths)[base])
            rows = int(base[-1])
            for fk, entry in zip(enc.features, features, strict=True):
                values = values_of.get(fk.spec.name)
                values = None if values is None else values[bounds[0] : bounds[-1]]
                values = _check(values, fk, rows, where)
                entry.body = _value_body(values, fk.spec.kind, base, fk.spec.width)
        entries += [size, *ends, *features]
    return sorted(entries, key=lambda e: e.key)


def _check_indices(index, edges_per_sample, nodes_per_sample, where: str, name: str) -> None:
    """Every edge's index is below its sample's node count in that node set."""
    if len(index) == 0:
        return
    if index.dtype.kind not in "iu":
        raise ValueError(f"{where}: {name} has dtype {index.dtype}, not integer")
    limit = np.repeat(
        nodes_per_sample if nodes_per_sample is not None else np.zeros(len(edges_per_sample)),
        edges_per_sample,
    )
    bad = (index < 0) | (index >= limit)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{where}: {name} index {int(index[i])} but the sample's node set has"
            f" {int(limit[i])} nodes"
        )


# --------------------------------------------------------------------------- records


def encode_chunk_numpy(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[bytes]:
    """The serialized tf.Example of every subgraph of `chunk`, in order: byte for byte what
    `encode_subgraph` gives for each (same checks, ValueError naming the set and feature).
    In numpy passes: the compiled encoder's twin and fallback (sampler.sample.encode_chunk)."""
    n = len(chunk)
    if n == 0:
        return []
    entries = _entries(chunk, specs)
    lengths = [entry.lengths() for entry in entries]
    total = sum(1 + varint_lengths(ln[3].astype(np.uint64)) + ln[3] for ln in lengths)
    glues, bodies = [], []
    glue = _Glue(n)
    glue.constant(b"\x0a")
    glue.varint(total)
    for entry, ln in zip(entries, lengths, strict=True):
        entry.header(glue, ln)
        if entry.body is not None:
            glues.append(glue.build())
            data, offsets = entry.body
            bodies.append((memoryview(data), offsets.tolist()))
            glue = _Glue(n)
    glues.append(glue.build())
    return _join(n, glues, bodies)


def _join(n: int, glues, bodies) -> list[bytes]:
    """Record i: glue 0, body 0, glue 1, body 1, ..., last glue (each sliced for record i)."""
    first, first_at = glues[0]
    rest = list(zip(bodies, glues[1:], strict=True))
    records = []
    for i in range(n):
        parts = [first[first_at[i] : first_at[i + 1]]]
        for (data, at), (glue, glue_at) in rest:
            parts.append(data[at[i] : at[i + 1]])
            parts.append(glue[glue_at[i] : glue_at[i + 1]])
        records.append(b"".join(parts))
    return records
