"""Reading DGL 2.1.0 binary files back: tensor dictionaries and one homogeneous graph.

The readers parse what sampler/partition/dgl_format.py writes (and what DGL writes),
validating every magic number, header and length against the bytes actually present
before allocating anything (no pickle, no torch, no dgl). Format: docs/DGL_FORMAT.md.
"""

from __future__ import annotations

import os
import struct

import numpy as np

from sampler.partition.dgl_format import (
    _ALL_FORMATS,
    _CODE_DTYPES,
    _COO,
    _CSC,
    _CSR,
    _DEVICE_CPU,
    _FORMAT_FLAG,
    _I64,
    _MAX_NDIM,
    _NDARRAY_HEAD,
    _U64,
    COO_MAGIC,
    CSR_MAGIC,
    GRAPH_FILE_MAGIC,
    GRAPH_FILE_VERSION,
    GRAPH_HEADER_SIZE,
    GRAPH_TYPE_HETERO,
    HETEROGRAPH_MAGIC,
    IMMUTABLE_GRAPH_MAGIC,
    NDARRAY_MAGIC,
    TENSOR_FILE_MAGIC,
    UNIT_GRAPH_MAGIC,
    DGLFormatError,
    HomoGraph,
)


class _Reader:
    """Bounds-checked little-endian reads over an in-memory file."""

    def __init__(self, buf: bytes | bytearray | memoryview, what: str):
        self.buf = memoryview(buf).cast("B")
        self.pos = 0
        self.what = what

    def fail(self, message: str, at: int | None = None) -> DGLFormatError:
        return DGLFormatError(f"{self.what}: byte {self.pos if at is None else at}: {message}")

    @property
    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def take(self, n: int, field: str) -> memoryview:
        if n < 0 or n > self.remaining:
            raise self.fail(f"truncated: {field} needs {n} bytes, only {self.remaining} remain")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def u64(self, field: str) -> int:
        return _U64.unpack(self.take(8, field))[0]

    def i64(self, field: str) -> int:
        return _I64.unpack(self.take(8, field))[0]

    def u8(self, field: str) -> int:
        return self.take(1, field)[0]

    def magic(self, expected: int, record: str) -> None:
        at = self.pos
        got = self.u64(f"{record} magic")
        if got != expected:
            raise self.fail(f"expected {record} magic {expected:#x}, found {got:#x}", at)

    def count(self, field: str, min_item_size: int) -> int:
        """A u64 element count, checked against the bytes that are left."""
        at = self.pos
        k = self.u64(field)
        if k * min_item_size > self.remaining:
            raise self.fail(
                f"{field} says {k} entries, more than the {self.remaining} bytes left hold", at
            )
        return k

    def string(self, field: str) -> str:
        at = self.pos
        n = self.u64(f"{field} length")
        raw = self.take(n, field)
        try:
            return bytes(raw).decode("utf-8")
        except UnicodeDecodeError as e:
            raise self.fail(f"{field} is not UTF-8", at) from e

    def ndarray(self, field: str) -> np.ndarray:
        start = self.pos
        self.magic(NDARRAY_MAGIC, f"NDArray ({field})")
        _, device, _, ndim, code, bits, lanes = _NDARRAY_HEAD.unpack(
            self.take(_NDARRAY_HEAD.size, f"{field} header")
        )
        if device != _DEVICE_CPU:
            raise self.fail(f"{field}: device_type {device}, only 1 (CPU) is loadable", start)
        if not 0 <= ndim <= _MAX_NDIM:
            raise self.fail(f"{field}: ndim {ndim} out of range", start)
        dtype = _CODE_DTYPES.get((code, bits))
        if dtype is None or lanes != 1:
            raise self.fail(
                f"{field}: unsupported dtype (code {code}, bits {bits}, lanes {lanes})", start
            )
        shape = struct.unpack(f"<{ndim}q", self.take(8 * ndim, f"{field} shape"))
        if any(d < 0 for d in shape):
            raise self.fail(f"{field}: negative dimension in shape {shape}", start)
        nbytes = self.i64(f"{field} byte size")
        expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if nbytes != expected:
            raise self.fail(
                f"{field}: byte size {nbytes} does not match shape {shape} of {dtype}", start
            )
        data = self.take(nbytes, f"{field} data")
        return np.frombuffer(data, dtype=dtype).reshape(shape).astype(dtype.newbyteorder("="))

    def named_tensors(self, field: str) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for _ in range(self.count(f"{field} entry count", 8 + 40)):
            at = self.pos
            name = self.string(f"{field} name")
            if name in out:
                raise self.fail(f"{field}: duplicate name {name!r}", at)
            out[name] = self.ndarray(f"{field}[{name!r}]")
        return out

    def end(self) -> None:
        if self.remaining:
            raise self.fail(f"{self.remaining} unexpected bytes after the end of the data")


def read_tensors(
    buf: bytes | bytearray | memoryview, what: str = "tensors"
) -> dict[str, np.ndarray]:
    """Parse the bytes of a DGL tensor-dictionary file; entries come back in file order."""
    r = _Reader(buf, what)
    r.magic(TENSOR_FILE_MAGIC, "tensor file")
    first = r.u64("entry count")
    at = r.pos
    out = r.named_tensors("tensor")
    if len(out) != first:
        raise r.fail(f"header says {first} entries, the list holds {len(out)}", at)
    r.end()
    return out


def _read_file(path: str | os.PathLike) -> bytearray:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        buf = bytearray(size)
        if f.readinto(buf) != size:
            raise DGLFormatError(f"{os.fspath(path)}: the file changed while being read")
    return buf


def load_tensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a DGL tensor-dictionary file. bool tensors come back as uint8, as in DGL."""
    return read_tensors(_read_file(path), what=os.fspath(path))


def _read_metagraph(r: _Reader, field: str) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
    r.magic(IMMUTABLE_GRAPH_MAGIC, f"{field} ImmutableGraph")
    num_rows, num_cols, indptr, indices, data = _read_csr(r, f"{field} CSR")
    if num_rows != num_cols:
        raise r.fail(f"{field}: {num_rows} x {num_cols} adjacency is not square")
    return num_rows, indptr, indices, data


def _read_csr(r: _Reader, field: str):
    at = r.pos
    r.magic(CSR_MAGIC, field)
    num_cols = r.i64(f"{field} num_cols")
    num_rows = r.i64(f"{field} num_rows")
    indptr = r.ndarray(f"{field} indptr")
    indices = r.ndarray(f"{field} indices")
    data = r.ndarray(f"{field} data")
    r.u8(f"{field} sorted")
    if num_rows < 0 or num_cols < 0:
        raise r.fail(f"{field}: negative shape {num_rows} x {num_cols}", at)
    for name, a in (("indptr", indptr), ("indices", indices), ("data", data)):
        if a.ndim != 1 or a.dtype.kind != "i" or a.dtype.itemsize not in (4, 8):
            if not (name == "data" and a.size == 0):
                raise r.fail(f"{field}: {name} must be a 1-D int32/int64 array", at)
    if indptr.dtype != indices.dtype or (len(data) and data.dtype != indptr.dtype):
        raise r.fail(f"{field}: indptr, indices and data differ in dtype", at)
    if len(indptr) != num_rows + 1 or indptr[0] != 0 or np.any(np.diff(indptr) < 0):
        raise r.fail(f"{field}: indptr is not a valid offset array for {num_rows} rows", at)
    if indptr[-1] != len(indices) or (len(data) and len(data) != len(indices)):
        raise r.fail(f"{field}: indptr, indices and data disagree on the entry count", at)
    if len(indices) and (indices.min() < 0 or indices.max() >= num_cols):
        raise r.fail(f"{field}: column index outside [0, {num_cols})", at)
    return num_rows, num_cols, indptr.astype(np.int64), indices.astype(np.int64), data


def _edge_order(r: _Reader, field: str, ids: np.ndarray, num_edges: int) -> np.ndarray:
    """Positions -> edge ids: a null data array means edge id = position (docs/DGL_FORMAT.md#sparse)."""
    if len(ids) == 0:
        return np.arange(num_edges, dtype=np.int64)
    ids = ids.astype(np.int64)
    if not np.array_equal(np.sort(ids), np.arange(num_edges)):
        raise r.fail(f"{field}: edge ids are not a permutation of 0..{num_edges - 1}")
    return ids


def _read_unit_graph(r: _Reader) -> tuple[int, np.ndarray, np.ndarray]:
    """One relation of a homogeneous graph -> (num_nodes, src, dst) in edge-id order."""
    at = r.pos
    r.magic(UNIT_GRAPH_MAGIC, "UnitGraph")
    saved = r.i64("saved formats")
    allowed = r.i64("allowed formats")
    if saved & _FORMAT_FLAG:
        saved &= ~_FORMAT_FLAG
    elif saved in (1, 2, 3):  # legacy enum: COO, CSR, CSC
        saved = {1: _COO, 2: _CSR, 3: _CSC}[saved]
    else:
        raise r.fail(f"unknown saved-formats code {saved}", at)
    if not (allowed & _FORMAT_FLAG) and allowed not in (0, 1, 2, 3):
        raise r.fail(f"unknown allowed-formats code {allowed}", at)
    if saved == 0 or saved & ~_ALL_FORMATS:
        raise r.fail(f"saved formats {saved:#x} name no valid sparse format", at)
    edges: list[tuple[str, int, np.ndarray, np.ndarray]] = []
    for bit, name in ((_COO, "COO"), (_CSR, "CSR"), (_CSC, "CSC")):
        if not saved & bit:
            continue
        vertices, _, meta_indices, _ = _read_metagraph(r, f"{name} unit metagraph")
        if vertices != 1 or len(meta_indices) != 1:
            raise r.fail(f"{name} unit metagraph is not that of a homogeneous relation")
        rec = r.pos
        if bit == _COO:
            r.magic(COO_MAGIC, "COO")
            num_cols = r.i64("COO num_cols")
            num_rows = r.i64("COO num_rows")
            row = r.ndarray("COO row")
            col = r.ndarray("COO col")
            data = r.ndarray("COO data")
            r.take(2, "COO sorted flags")
            for a in (row, col):
                if a.ndim != 1 or a.dtype.kind != "i" or a.dtype.itemsize not in (4, 8):
                    raise r.fail("COO row/col must be 1-D int32/int64 arrays", rec)
            if row.dtype != col.dtype or (len(data) and data.dtype != row.dtype):
                raise r.fail("COO row, col and data differ in dtype", rec)
            if len(row) != len(col) or (len(data) and len(data) != len(row)):
                raise r.fail("COO row, col and data differ in length", rec)
            order = _edge_order(r, "COO data", data, len(row))
            src, dst = np.empty_like(row, np.int64), np.empty_like(col, np.int64)
            src[order], dst[order] = row, col
        else:
            num_rows, num_cols, indptr, indices, data = _read_csr(r, name)
            majors = np.repeat(np.arange(num_rows, dtype=np.int64), np.diff(indptr))
            order = _edge_order(r, f"{name} data", data, len(indices))
            rows, cols = (majors, indices) if bit == _CSR else (indices, majors)
            src, dst = np.empty_like(rows), np.empty_like(cols)
            src[order], dst[order] = rows, cols
        if num_rows != num_cols or num_rows < 0:
            raise r.fail(f"{name}: a homogeneous relation needs a square shape", rec)
        if len(src) and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= num_rows):
            raise r.fail(f"{name}: node id outside [0, {num_rows})", rec)
        edges.append((name, num_rows, src, dst))
    name0, n, src, dst = edges[0]
    for name, n_other, s, d in edges[1:]:
        if n_other != n or not (np.array_equal(s, src) and np.array_equal(d, dst)):
            raise r.fail(f"the {name} and {name0} records describe different graphs", at)
    return n, src, dst


def _read_frames(r: _Reader, field: str, rows: int) -> dict[str, np.ndarray]:
    at = r.pos
    if r.count(f"{field} frame count", 8) != 1:
        raise r.fail(f"{field}: a homogeneous graph has exactly one frame", at)
    frame = r.named_tensors(field)
    for name, a in frame.items():
        if a.ndim == 0 or a.shape[0] != rows:
            raise r.fail(f"{field}[{name!r}] has shape {a.shape}, expected {rows} rows", at)
    return frame


def read_graph(buf: bytes | bytearray | memoryview, what: str = "graph") -> HomoGraph:
    """Parse the bytes of a DGL graph file holding one homogeneous graph.

    Reads what dgl.save_graphs writes for such a graph: any of the COO/CSR/CSC records,
    int32 or int64 ids (returned as int64). Graph-level labels are checked and dropped.
    """
    r = _Reader(buf, what)
    r.magic(GRAPH_FILE_MAGIC, "graph file")
    version = r.u64("version")
    if version != GRAPH_FILE_VERSION:
        raise r.fail(f"graph file version {version}, only version 2 is supported", 8)
    graph_type = r.u64("graph type")
    if graph_type != GRAPH_TYPE_HETERO:
        raise r.fail(f"graph type {graph_type}, only 2 (heterograph) is supported", 16)
    num_graphs = r.u64("graph count")
    if num_graphs != 1:
        raise r.fail(f"the file holds {num_graphs} graphs; load_graph_file reads exactly one", 24)
    r.take(GRAPH_HEADER_SIZE - r.pos, "header")
    gdata_start = r.u64("graph data offset")
    r.named_tensors("label")
    if gdata_start != r.pos:
        raise r.fail(f"graph data offset says {gdata_start}, labels end at {r.pos}", 4096)

    r.magic(HETEROGRAPH_MAGIC, "HeteroGraph")
    num_types, _, meta_indices, _ = _read_metagraph(r, "metagraph")
    if num_types != 1 or len(meta_indices) != 1:
        raise r.fail(f"not a homogeneous graph ({num_types} node types)")
    if r.count("relation count", 8) != 1:
        raise r.fail("not a homogeneous graph (several relations)")
    n, src, dst = _read_unit_graph(r)
    at = r.pos
    if r.count("node type count", 8) != 1 or r.i64("node count") != n:
        raise r.fail(f"node count disagrees with the {n}-node sparse matrix", at)
    ndata = _read_frames(r, "ndata", n)
    edata = _read_frames(r, "edata", len(src))
    for field in ("node type", "edge type"):
        at = r.pos
        if r.count(f"{field} name count", 8) != 1:
            raise r.fail(f"expected one {field} name", at)
        r.string(f"{field} name")

    at = r.pos
    index_size = r.u64("index length")
    trailer = (index_size, r.u64("index count"), r.u64("graph offset"), r.u64("index size"))
    if trailer != (16, 1, gdata_start, 16):
        raise r.fail(f"bad graph index trailer {trailer}", at)
    r.end()
    return HomoGraph(num_nodes=n, src=src, dst=dst, ndata=ndata, edata=edata)


def load_graph_file(path: str | os.PathLike) -> HomoGraph:
    """Read a DGL graph file holding one homogeneous graph."""
    return read_graph(_read_file(path), what=os.fspath(path))
