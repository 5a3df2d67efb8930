"""The dense graph as files that every process of a machine maps once (numpy only).

`save_graph` writes a DenseGraph (sampler.sample.dense) to a folder: one `.npy` file per
array and a JSON manifest. `open_graph` maps it back read-only (numpy memory maps),
so the worker processes of one machine share one copy of the graph in the page cache
instead of each building its own. Byte strings (node ids, bytes features) are stored as
offsets and data and read through `ByteColumn`, which gathers rows into the object arrays
the kernels use.

A snapshot on a remote filesystem (gs://...) is copied once per machine to local disk,
under a file lock (`machine_copy`), and mapped from there by every process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile

import numpy as np

from sampler.batches import NodeBatch
from sampler.io import files
from sampler.node_table import NodeTable
from sampler.sample.dense import DenseAdjacency, DenseGraph

MANIFEST = "graph.json"
_WIDE = 256  # ids longer than this are gathered one by one


class ByteColumn:
    """A read-only column of byte strings (offsets and data), indexed like an object array.

    `column[index]` (an integer array, a boolean mask or a slice) is an object array of
    `bytes`, of shape (len(index),) or (len(index), width) for a 2-D bytes feature.
    """

    def __init__(self, offsets: np.ndarray, data: np.ndarray, width: int = 0):
        self._offsets = offsets
        self._data = data
        self._width = width
        n = len(offsets) - 1
        self._len = n // width if width else n
        ends = offsets[1:]
        nonempty = ends > offsets[:-1]
        # Fixed-width gathers drop trailing NUL bytes: such columns take the slow path.
        self._nul_tail = bool(np.any(data[ends[nonempty] - 1] == 0)) if nonempty.any() else False

    @classmethod
    def from_objects(cls, values: np.ndarray) -> ByteColumn:
        width = values.shape[1] if values.ndim == 2 else 0
        flat = values.reshape(-1).tolist()
        lengths = np.fromiter(map(len, flat), dtype=np.int64, count=len(flat))
        offsets = np.zeros(len(flat) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        data = np.frombuffer(b"".join(flat), dtype=np.uint8)
        return cls(offsets, data, width)

    @property
    def shape(self) -> tuple[int, ...]:
        return (self._len, self._width) if self._width else (self._len,)

    @property
    def dtype(self):
        return np.dtype(object)

    def __len__(self) -> int:
        return self._len

    def __array__(self, dtype=None, copy=None):
        return self[np.arange(self._len)]

    def tolist(self) -> list:
        return self[np.arange(self._len)].tolist()

    def __iter__(self):
        return iter(self.tolist())

    def __getitem__(self, index) -> np.ndarray:
        if isinstance(index, (int, np.integer)):
            return self[np.array([index])][0]
        if isinstance(index, slice):
            index = np.arange(self._len)[index]
        index = np.asarray(index)
        if index.dtype == bool:
            index = np.flatnonzero(index)
        index = index.astype(np.int64, copy=False)
        if not self._width:
            return self._gather(index)
        flat = (index[:, None] * self._width + np.arange(self._width)).reshape(-1)
        return self._gather(flat).reshape(len(index), self._width)

    def _gather(self, flat: np.ndarray) -> np.ndarray:
        starts = self._offsets[flat]
        lengths = self._offsets[flat + 1] - starts
        longest = int(lengths.max()) if len(flat) else 0
        if longest == 0:
            out = np.empty(len(flat), dtype=object)
            out[:] = [b""] * len(flat)
            return out
        if self._nul_tail or longest > _WIDE:
            data = self._data
            out = np.empty(len(flat), dtype=object)
            ends = (starts + lengths).tolist()
            out[:] = [data[s:e].tobytes() for s, e in zip(starts.tolist(), ends, strict=True)]
            return out
        columns = np.arange(longest)
        inside = columns < lengths[:, None]
        matrix = np.zeros((len(flat), longest), np.uint8)
        matrix[inside] = self._data[(starts[:, None] + columns)[inside]]
        return matrix.view(f"S{longest}").reshape(-1).astype(object)

    def save(self, folder: str, name: str) -> dict:
        _save(folder, f"{name}.offsets", self._offsets)
        _save(folder, f"{name}.data", self._data)
        return {"bytes": name, "width": self._width}


def _save(folder: str, name: str, array: np.ndarray) -> None:
    """`array` as an .npy file (np.save's bytes), its memory written as it is: numpy's own
    save copies it through a buffer 16 MiB at a time (twice the CPU for a graph's GBs)."""
    array = np.ascontiguousarray(array)
    if array.dtype.hasobject:
        raise TypeError(f"{name}: object arrays are stored as ByteColumns")
    with files.write_output(files.join(folder, f"{name}.npy")) as f:
        np.lib.format.write_array_header_1_0(f, np.lib.format.header_data_from_array_1_0(array))
        if array.size:
            f.write(memoryview(array.reshape(-1).view(np.uint8)))


def _save_column(folder: str, name: str, column) -> dict:
    """A numeric array as `name.npy`, a bytes column as offsets and data; its manifest entry."""
    if isinstance(column, ByteColumn):
        return column.save(folder, name)
    if column.dtype == object:
        return ByteColumn.from_objects(column).save(folder, name)
    _save(folder, name, column)
    return {"array": name}


def save_graph(graph: DenseGraph, folder: str) -> None:
    """Writes `graph` under `folder` (local or remote); the manifest is written last."""
    manifest = {"nodes": {}, "edges": {}, "dropped_edges": dict(graph.dropped_edges)}
    for i, (name, table) in enumerate(graph.nodes.items()):
        rows = table.rows
        manifest["nodes"][name] = {
            "duplicates": int(table.duplicates),
            "fp": _save_column(folder, f"n{i}.fp", rows.fp),
            "ids": _save_column(folder, f"n{i}.ids", rows.ids),
            "features": {
                f: _save_column(folder, f"n{i}.f{j}", col)
                for j, (f, col) in enumerate(rows.features.items())
            },
        }
    for i, (name, adj) in enumerate(graph.adjacency.items()):
        arrays = {"starts": adj.starts, "degrees": adj.degrees, "targets": adj.targets}
        arrays["edge_keys"] = adj.edge_keys
        entry = {key: _save_column(folder, f"e{i}.{key}", a) for key, a in arrays.items()}
        entry["weights"] = (
            None if adj.weights is None else _save_column(folder, f"e{i}.w", adj.weights)
        )
        entry["features"] = {
            f: _save_column(folder, f"e{i}.f{j}", col)
            for j, (f, col) in enumerate(adj.features.items())
        }
        manifest["edges"][name] = entry
    with files.write_output(files.join(folder, MANIFEST)) as f:
        f.write(json.dumps(manifest, sort_keys=True).encode())


def _mapped(folder: str, name: str) -> np.ndarray:
    path = os.path.join(folder, name + ".npy")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def _load(folder: str, entry: dict | None):
    if entry is None:
        return None
    if "bytes" in entry:
        name = entry["bytes"]
        offsets, data = _mapped(folder, name + ".offsets"), _mapped(folder, name + ".data")
        return ByteColumn(offsets, data, entry["width"])
    return _mapped(folder, entry["array"])


def open_graph(folder: str) -> DenseGraph:
    """The DenseGraph that save_graph wrote in the local `folder`, memory-mapped read-only."""
    with open(os.path.join(folder, MANIFEST)) as f:
        manifest = json.load(f)
    nodes = {}
    for name, entry in manifest["nodes"].items():
        features = {f: _load(folder, e) for f, e in entry["features"].items()}
        rows = NodeBatch(_load(folder, entry["fp"]), _load(folder, entry["ids"]), features)
        nodes[name] = NodeTable(rows, entry["duplicates"])
    adjacency = {}
    for name, entry in manifest["edges"].items():
        adjacency[name] = DenseAdjacency(
            _load(folder, entry["starts"]),
            _load(folder, entry["degrees"]),
            _load(folder, entry["targets"]),
            _load(folder, entry["edge_keys"]),
            {f: _load(folder, e) for f, e in entry["features"].items()},
            _load(folder, entry["weights"]),
        )
    return DenseGraph(nodes, adjacency, dict(manifest["dropped_edges"]))


def _machine_copy_path(folder: str, root: str | None = None) -> str:
    root = root or os.path.join(tempfile.gettempdir(), "beam-graph-snapshots")
    return os.path.join(root, hashlib.sha256(folder.encode()).hexdigest()[:20])


def remove_machine_copy(folder: str, root: str | None = None) -> None:
    """Removes this machine's copy of the remote snapshot `folder` (and its lock file), if any:
    once the run has sampled, nothing maps it again (a mapping already open stays valid)."""
    if not files.has_scheme(folder):
        return
    local = _machine_copy_path(folder, root)
    shutil.rmtree(local, ignore_errors=True)
    with contextlib.suppress(OSError):
        os.remove(local + ".lock")
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(local))  # the snapshots folder, when no other run's is there


def machine_copy(folder: str, root: str | None = None) -> str:
    """A local folder holding the snapshot `folder`: itself when it is local, else a copy made
    once per machine (under a file lock) in `root` (default: the temp dir)."""
    if not files.has_scheme(folder):
        return folder
    import fasteners  # Beam's own dependency; only remote snapshots need it

    local = _machine_copy_path(folder, root)
    os.makedirs(os.path.dirname(local), exist_ok=True)
    with fasteners.InterProcessLock(local + ".lock"):
        if os.path.exists(os.path.join(local, MANIFEST)):
            return local
        shutil.rmtree(local, ignore_errors=True)
        os.makedirs(local)
        names = [p.rsplit("/", 1)[-1] for p in files.match(files.join(folder, "*.npy"))]
        for name in sorted(names) + [MANIFEST]:  # the manifest last: it marks a whole copy
            target = os.path.join(local, name)
            with (
                files.open_file(files.join(folder, name)) as src,
                open(target + ".tmp", "wb") as dst,
            ):
                shutil.copyfileobj(src, dst, 1 << 24)
            os.replace(target + ".tmp", target)
    return local
