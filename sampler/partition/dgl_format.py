"""DGL 2.1.0 binary files from pure numpy: tensor dictionaries and one homogeneous graph.

Writers produce what `dgl.data.utils.save_tensors` and `dgl.save_graphs` write, so that
`dgl.data.utils.load_tensors`, `dgl.load_graphs` and `dgl.distributed.load_partition` read
them; readers parse the same files back, validating every magic number, header and length
against the bytes actually present before allocating anything (no pickle, no torch, no dgl).
The byte-level format is described in docs/DGL_FORMAT.md (section names below are its
anchors).

Byte identity with DGL: for the same content our files equal DGL's byte for byte, except
graph-file header bytes 32..4095, which DGL fills from uninitialised memory and we zero.
That includes the order of dictionary entries, which DGL takes from a C++
`std::unordered_map` (docs/DGL_FORMAT.md#dict-order, reproduced by `dgl_dict_order`).

Dtypes: int8/16/32/64, uint8, bool (stored as uint8, as DGL does; it loads back as uint8),
float16/32/64. Graph node ids are int64 (partition graphs must use int64).
"""

from __future__ import annotations

import dataclasses
import io
import os
import struct
from collections import deque
from collections.abc import Iterable, Mapping
from typing import BinaryIO

import numpy as np

from sampler.errors import UserError
from sampler.io.files import open_new

__all__ = [
    "DGLFormatError",
    "HomoGraph",
    "dgl_dict_order",
    "save_graph",
    "save_tensors",
    "write_graph",
    "write_tensors",
]


class DGLFormatError(UserError):
    """A .dgl file that is not what it should be, or content DGL cannot store."""


# Magic numbers (docs/DGL_FORMAT.md#encoding), written as little-endian u64.
TENSOR_FILE_MAGIC = 0xDD5A9FBE3FA2443F
GRAPH_FILE_MAGIC = 0xDD2E4FF046B4A13F
NDARRAY_MAGIC = 0xDD5E40F096B4A13F
HETEROGRAPH_MAGIC = 0xDD589FBE35224ABF
IMMUTABLE_GRAPH_MAGIC = 0xDD3C5FFE20046ABF
UNIT_GRAPH_MAGIC = 0xDD2E60F0F6B4A127
COO_MAGIC = 0xDD61FFD305DFF127
CSR_MAGIC = 0xDD6CD31205DFF127

GRAPH_FILE_VERSION = 2
GRAPH_TYPE_HETERO = 2
GRAPH_HEADER_SIZE = 4096
_DEVICE_CPU = 1

# UnitGraph format words (docs/DGL_FORMAT.md#unit-graph).
_FORMAT_FLAG = 0x1_0000_0000
_COO, _CSR, _CSC = 1, 2, 4
_ALL_FORMATS = _COO | _CSR | _CSC

# numpy dtype -> (DGL type code, bits). bool is stored as uint8 (docs/DGL_FORMAT.md#ndarray).
_DTYPE_CODES: dict[np.dtype, tuple[int, int]] = {
    np.dtype(np.int8): (0, 8),
    np.dtype(np.int16): (0, 16),
    np.dtype(np.int32): (0, 32),
    np.dtype(np.int64): (0, 64),
    np.dtype(np.uint8): (1, 8),
    np.dtype(np.bool_): (1, 8),
    np.dtype(np.float16): (2, 16),
    np.dtype(np.float32): (2, 32),
    np.dtype(np.float64): (2, 64),
}
_CODE_DTYPES: dict[tuple[int, int], np.dtype] = {
    code: np.dtype(dt).newbyteorder("<")
    for dt, code in _DTYPE_CODES.items()
    if dt != np.dtype(np.bool_)
}

_U64 = struct.Struct("<Q")
_I64 = struct.Struct("<q")
# NDArray header after the magic: reserved u64, device_type i32, device_id i32, ndim i32,
# dtype code u8, bits u8, lanes u16.
_NDARRAY_HEAD = struct.Struct("<QiiiBBH")
_MAX_NDIM = 32


@dataclasses.dataclass
class HomoGraph:
    """One homogeneous graph: edge i goes from src[i] to dst[i] and owns row i of edata."""

    num_nodes: int
    src: np.ndarray  # int64, (num_edges,)
    dst: np.ndarray  # int64, (num_edges,)
    ndata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # (num_nodes, ...)
    edata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # (num_edges, ...)

    @property
    def num_edges(self) -> int:
        return int(len(self.src))


# --------------------------------------------------------------------------- dict order

# Bucket counts a libstdc++ unordered_map goes through as it grows from empty (max load
# factor 1): it has 13 buckets for its first 13 keys, 29 up to 29 keys, and so on. Read off
# the real libstdc++ (_Prime_rehash_policy::_M_next_bkt applied to twice the count).
_BUCKET_COUNTS = (
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061,
    712697, 1447153, 2938679, 5967347, 12117689, 24607243, 49969847, 101473717, 206062531,
    418451333, 849749479, 1725587117, 3504151727, 8589934583,
)  # fmt: skip
_MASK64 = (1 << 64) - 1
_MURMUR_MUL = 0xC6A4A7935BD1E995
_STRING_HASH_SEED = 0xC70F6907


def _std_string_hash(data: bytes) -> int:
    """libstdc++'s std::hash<std::string> on 64-bit: _Hash_bytes (MurmurHash64A variant)."""

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)

    n = len(data)
    h = (_STRING_HASH_SEED ^ (n * _MURMUR_MUL)) & _MASK64
    aligned = n & ~7
    for i in range(0, aligned, 8):
        word = int.from_bytes(data[i : i + 8], "little")
        h ^= (shift_mix((word * _MURMUR_MUL) & _MASK64) * _MURMUR_MUL) & _MASK64
        h = (h * _MURMUR_MUL) & _MASK64
    if n & 7:
        h ^= int.from_bytes(data[aligned:], "little")
        h = (h * _MURMUR_MUL) & _MASK64
    h = (shift_mix(h) * _MURMUR_MUL) & _MASK64
    return shift_mix(h)


def dgl_dict_order(keys: Iterable[str]) -> list[str]:
    """The order DGL writes a dict's entries in, given the dict's own (insertion) order.

    DGL copies every name->tensor dict into a C++ std::unordered_map<std::string, ...> and
    writes it in that map's iteration order (docs/DGL_FORMAT.md#dict-order). This replays libstdc++'s
    insertion and rehash rules: a key whose bucket is empty goes to the front of the node
    list, otherwise just before the first node of its bucket; a rehash re-inserts the nodes
    in list order by the same rule. Nodes of one bucket stay contiguous, so the list is kept
    as a sequence of buckets, each with its keys.
    """
    keys = list(keys)
    if len(set(keys)) != len(keys):
        raise DGLFormatError("dgl_dict_order: duplicate keys")
    hashes = {k: _std_string_hash(k.encode("utf-8")) for k in keys}
    num_buckets = 0
    buckets: deque[int] = deque()  # bucket numbers in list order
    members: dict[int, deque[str]] = {}  # bucket -> its keys in list order

    def insert(key: str) -> None:
        bucket = hashes[key] % num_buckets
        if bucket in members:
            members[bucket].appendleft(key)
        else:
            buckets.appendleft(bucket)
            members[bucket] = deque([key])

    def listed() -> list[str]:
        return [key for bucket in buckets for key in members[bucket]]

    for n, key in enumerate(keys):
        if n + 1 > num_buckets:  # grow (max load factor 1), then rehash in list order
            bigger = [b for b in _BUCKET_COUNTS if b >= n + 1]
            if not bigger:
                raise DGLFormatError(f"dgl_dict_order: too many keys ({len(keys)})")
            old = listed()
            num_buckets = bigger[0]
            buckets.clear()
            members.clear()
            for k in old:
                insert(k)
        insert(key)
    return listed()


# --------------------------------------------------------------------------- writing


def _check_name(name: object, what: str) -> bytes:
    if not isinstance(name, str):
        raise DGLFormatError(f"{what}: tensor names must be str, got {type(name).__name__}")
    if "\x00" in name:
        # DGL passes names to C++ as C strings, so it would cut the name at the NUL.
        raise DGLFormatError(f"{what}: tensor name {name!r} contains a NUL character")
    return name.encode("utf-8")


def _le_array(arr: object, what: str) -> tuple[np.ndarray, int, int]:
    """The array as a C-contiguous little-endian array, plus its (code, bits)."""
    a = np.asarray(arr)
    code = _DTYPE_CODES.get(a.dtype.newbyteorder("="))
    if code is None:
        supported = ", ".join(sorted({str(d) for d in _DTYPE_CODES}))
        raise DGLFormatError(f"{what}: dtype {a.dtype} cannot be stored (supported: {supported})")
    if a.ndim == 0:
        # Valid in the format, but DGL 2.1.0 converts 0-d tensors to torch unreliably.
        raise DGLFormatError(f"{what}: 0-d arrays are not supported; store scalars as shape [1]")
    if a.ndim > _MAX_NDIM:
        raise DGLFormatError(f"{what}: {a.ndim} dimensions, at most {_MAX_NDIM} supported")
    if a.dtype == np.bool_:
        a = a.view(np.uint8)
    a = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<"))
    return a, code[0], code[1]


def _ndarray_header(a: np.ndarray, code: int, bits: int) -> bytes:
    head = [
        _U64.pack(NDARRAY_MAGIC),
        _NDARRAY_HEAD.pack(0, _DEVICE_CPU, 0, a.ndim, code, bits, 1),
        struct.pack(f"<{a.ndim}q", *a.shape),
        _I64.pack(a.nbytes),
    ]
    return b"".join(head)


def _write_ndarray(f: BinaryIO, arr: object, what: str) -> None:
    a, code, bits = _le_array(arr, what)
    f.write(_ndarray_header(a, code, bits))
    if a.nbytes:
        f.write(memoryview(a).cast("B"))


def _string(data: bytes) -> bytes:
    return _U64.pack(len(data)) + data


def _prepare_named(tensors: Mapping[str, object], what: str) -> list[tuple[bytes, object]]:
    if not isinstance(tensors, Mapping):
        raise DGLFormatError(f"{what}: expected a dict of name -> array")
    for name in tensors:
        _check_name(name, what)
    return [(name.encode("utf-8"), tensors[name]) for name in dgl_dict_order(tensors)]


def _write_named(f: BinaryIO, entries: list[tuple[bytes, object]], what: str) -> None:
    f.write(_U64.pack(len(entries)))
    for name, arr in entries:
        f.write(_string(name))
        _write_ndarray(f, arr, f"{what}[{name.decode('utf-8')!r}]")


def write_tensors(f: BinaryIO, tensors: Mapping[str, np.ndarray], what: str = "tensors") -> None:
    """Write `tensors` to a binary file object, as dgl.data.utils.save_tensors does."""
    entries = _prepare_named(tensors, what)
    for name, arr in entries:  # Check every entry before writing the first byte.
        _le_array(arr, f"{what}[{name.decode('utf-8')!r}]")
    f.write(_U64.pack(TENSOR_FILE_MAGIC))
    f.write(_U64.pack(len(entries)))  # The count is written twice (docs/DGL_FORMAT.md#tensor-dict).
    _write_named(f, entries, what)


def save_tensors(path: str | os.PathLike, tensors: Mapping[str, np.ndarray]) -> None:
    """Write a DGL tensor-dictionary file (node_feat.dgl, edge_feat.dgl, orig_nids.dgl...)."""
    with open_new(os.fspath(path)) as f:
        write_tensors(f, tensors, what=os.fspath(path))


def _csr_record(num_rows: int, num_cols: int, indptr, indices, data) -> bytes:
    out = io.BytesIO()
    out.write(_U64.pack(CSR_MAGIC))
    out.write(_I64.pack(num_cols))  # num_cols before num_rows (docs/DGL_FORMAT.md#sparse)
    out.write(_I64.pack(num_rows))
    for name, arr in (("indptr", indptr), ("indices", indices), ("data", data)):
        _write_ndarray(out, np.asarray(arr, dtype=np.int64), name)
    out.write(b"\x00")  # sorted: never claimed (a false 1 crashes DGL)
    return out.getvalue()


# The type graph of a homogeneous graph, and the unit metagraph of a relation whose source
# and destination types are the same: one vertex, one edge 0 -> 0 (docs/DGL_FORMAT.md#heterograph).
_HOMO_METAGRAPH = _U64.pack(IMMUTABLE_GRAPH_MAGIC) + _csr_record(1, 1, [0, 1], [0], [0])
_NULL_ARRAY = np.zeros(0, dtype=np.int64)


def _check_graph(graph: HomoGraph, what: str) -> tuple[int, np.ndarray, np.ndarray]:
    if not isinstance(graph, HomoGraph):
        raise DGLFormatError(f"{what}: expected a HomoGraph, got {type(graph).__name__}")
    n = graph.num_nodes
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
        raise DGLFormatError(f"{what}: num_nodes must be a non-negative int, got {n!r}")
    n = int(n)
    ends = []
    for name, ids in (("src", graph.src), ("dst", graph.dst)):
        ids = np.asarray(ids)
        if ids.ndim != 1 or not (np.issubdtype(ids.dtype, np.integer) or ids.size == 0):
            raise DGLFormatError(f"{what}: {name} must be a 1-D integer array")
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise DGLFormatError(f"{what}: {name} holds node ids outside [0, {n})")
        ends.append(ids.astype(np.int64, copy=False))
    src, dst = ends
    if len(src) != len(dst):
        raise DGLFormatError(f"{what}: src has {len(src)} entries but dst has {len(dst)}")
    for kind, tensors, rows in (("ndata", graph.ndata, n), ("edata", graph.edata, len(src))):
        if not isinstance(tensors, Mapping):
            raise DGLFormatError(f"{what}: {kind} must be a dict of name -> array")
        for name, arr in tensors.items():
            label = f"{what}: {kind}[{_check_name(name, what).decode('utf-8')!r}]"
            a, _, _ = _le_array(arr, label)
            if a.shape[0] != rows:
                raise DGLFormatError(f"{label} has {a.shape[0]} rows, expected {rows}")
    return n, src, dst


def write_graph(f: BinaryIO, graph: HomoGraph, what: str = "graph") -> None:
    """Write one homogeneous graph as dgl.save_graphs([g]) does (format version 2, COO)."""
    n, src, dst = _check_graph(graph, what)
    header = _U64.pack(GRAPH_FILE_MAGIC) + struct.pack(
        "<QQQ", GRAPH_FILE_VERSION, GRAPH_TYPE_HETERO, 1
    )
    f.write(header.ljust(GRAPH_HEADER_SIZE, b"\x00"))
    labels = _U64.pack(0)  # no graph-level labels
    gdata_start = GRAPH_HEADER_SIZE + 8 + len(labels)
    f.write(_U64.pack(gdata_start))
    f.write(labels)
    # HeteroGraph (4.6): magic, metagraph, R = 1 UnitGraph, nodes per type.
    f.write(_U64.pack(HETEROGRAPH_MAGIC))
    f.write(_HOMO_METAGRAPH)
    f.write(_U64.pack(1))
    f.write(_U64.pack(UNIT_GRAPH_MAGIC))
    f.write(_I64.pack(_FORMAT_FLAG | _COO))  # saved formats: COO only
    f.write(_I64.pack(_FORMAT_FLAG | _ALL_FORMATS))  # allowed formats: all
    f.write(_HOMO_METAGRAPH)
    f.write(_U64.pack(COO_MAGIC))
    f.write(_I64.pack(n))  # num_cols
    f.write(_I64.pack(n))  # num_rows
    _write_ndarray(f, src, "src")
    _write_ndarray(f, dst, "dst")
    _write_ndarray(f, _NULL_ARRAY, "data")  # null: edge id = position
    f.write(b"\x00\x00")  # row_sorted, col_sorted
    f.write(_U64.pack(1) + _I64.pack(n))  # seq<i64> nodes per type
    # HeteroGraphData (4.5): one node frame, one edge frame, type names.
    f.write(_U64.pack(1))
    _write_named(f, _prepare_named(graph.ndata, f"{what}: ndata"), f"{what}: ndata")
    f.write(_U64.pack(1))
    _write_named(f, _prepare_named(graph.edata, f"{what}: edata"), f"{what}: edata")
    f.write(_U64.pack(1) + _string(b"_N"))
    f.write(_U64.pack(1) + _string(b"_E"))
    # Trailer (4.4): seq<u64> of graph offsets, written as a string, then its size.
    index = _U64.pack(1) + _U64.pack(gdata_start)
    f.write(_string(index) + _U64.pack(len(index)))


def save_graph(path: str | os.PathLike, graph: HomoGraph) -> None:
    """Write a DGL graph file holding exactly `graph` (a partition's graph.dgl)."""
    what = os.fspath(path)
    _check_graph(graph, what)  # Fail before creating the file.
    with open_new(os.fspath(path)) as f:
        write_graph(f, graph, what=what)
