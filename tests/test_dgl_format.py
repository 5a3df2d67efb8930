"""sampler.partition.dgl_format: pure round trips and corruption checks, then the real DGL 2.1.0.

The oracle tests run DGL in its own venv (scripts/setup_dgl_oracle.sh, $DGL_VENV, default
<repo>/.venv-dgl) through tests/oracle/dgl_oracle.py. They are never skipped: the fixture
builds the venv when it is missing and fails the tests if that does not work.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from sampler.partition.dgl_format import (
    DGLFormatError,
    HomoGraph,
    dgl_dict_order,
    save_graph,
    save_tensors,
    write_graph,
    write_tensors,
)
from sampler.partition.dgl_read import load_graph_file, load_tensors, read_graph, read_tensors

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / "tests" / "oracle" / "dgl_oracle.py"

# Bytes dgl.data.utils.save_tensors({"bb": torch.tensor([1, 2, 3])}) wrote (DGL 2.1.0).
DGL_TENSORS_BB = bytes.fromhex(
    "3f44a23fbe9f5add01000000000000000100000000000000020000000000000062623fa1b496f040"
    "5edd0000000000000000010000000000000001000000004001000300000000000000180000000000"
    "0000010000000000000002000000000000000300000000000000"
)
# Bytes [4096:] of dgl.save_graphs for dgl.graph(([0, 1], [1, 2]), num_nodes=3) with
# ndata["x"] = torch.tensor([True, False, True]); bytes [0:32] are magic, 2, 2, 1.
DGL_GRAPH_TAIL = bytes.fromhex(
    "10100000000000000000000000000000bf4a2235be9f58ddbf6a0420fe5f3cdd27f1df0512d36cdd"
    "010000000000000001000000000000003fa1b496f0405edd00000000000000000100000000000000"
    "01000000004001000200000000000000100000000000000000000000000000000100000000000000"
    "3fa1b496f0405edd0000000000000000010000000000000001000000004001000100000000000000"
    "080000000000000000000000000000003fa1b496f0405edd00000000000000000100000000000000"
    "01000000004001000100000000000000080000000000000000000000000000000001000000000000"
    "0027a1b4f6f0602edd01000000010000000700000001000000bf6a0420fe5f3cdd27f1df0512d36c"
    "dd010000000000000001000000000000003fa1b496f0405edd000000000000000001000000000000"
    "00010000000040010002000000000000001000000000000000000000000000000001000000000000"
    "003fa1b496f0405edd00000000000000000100000000000000010000000040010001000000000000"
    "00080000000000000000000000000000003fa1b496f0405edd000000000000000001000000000000"
    "0001000000004001000100000000000000080000000000000000000000000000000027f1df05d3ff"
    "61dd030000000000000003000000000000003fa1b496f0405edd0000000000000000010000000000"
    "00000100000000400100020000000000000010000000000000000000000000000000010000000000"
    "00003fa1b496f0405edd000000000000000001000000000000000100000000400100020000000000"
    "00001000000000000000010000000000000002000000000000003fa1b496f0405edd000000000000"
    "00000100000000000000010000000040010000000000000000000000000000000000000001000000"
    "000000000300000000000000010000000000000001000000000000000100000000000000783fa1b4"
    "96f0405edd0000000000000000010000000000000001000000010801000300000000000000030000"
    "00000000000100010100000000000000000000000000000001000000000000000200000000000000"
    "5f4e010000000000000002000000000000005f451000000000000000010000000000000010100000"
    "000000001000000000000000"
)

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "bool", "float16", "float32", "float64"]


def sample_array(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)


def all_dtype_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    tensors = {f"_N/{dt}": sample_array(rng, dt, (7,)) for dt in DTYPES}
    tensors["_N:_E:_N/feat"] = sample_array(rng, "float32", (5, 3, 2))
    tensors["empty"] = np.zeros((0, 4), dtype=np.float32)
    tensors["scalar_as_1"] = np.array([3.5], dtype=np.float64)
    tensors["ünïcode name"] = np.arange(3, dtype=np.int64)
    tensors["big_endian"] = np.arange(4, dtype=">i4")
    tensors["strided"] = np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2]
    return tensors


def sample_graph(rng: np.random.Generator, num_nodes: int, num_edges: int) -> HomoGraph:
    src = rng.integers(0, max(num_nodes, 1), size=num_edges, dtype=np.int64)
    dst = rng.integers(0, max(num_nodes, 1), size=num_edges, dtype=np.int64)
    # Insertion order as DGL's partitioner builds a P > 1 partition (docs/DGL_FORMAT.md#partition-graph).
    ndata = {
        "_ID": rng.permutation(num_nodes).astype(np.int64),
        "inner_node": (rng.random(num_nodes) < 0.7).astype(np.uint8),
        "part_id": rng.integers(0, 2, size=num_nodes, dtype=np.int64),
        "_TYPE": np.zeros(num_nodes, dtype=np.int32),
        "feat": rng.standard_normal((num_nodes, 3)).astype(np.float32),
        "mask": rng.random(num_nodes) < 0.5,
    }
    edata = {
        "_ID": np.arange(num_edges, dtype=np.int64),
        "inner_edge": np.ones(num_edges, dtype=np.uint8),
        "_TYPE": np.zeros(num_edges, dtype=np.int32),
        "w": rng.standard_normal(num_edges),
        "h": rng.standard_normal((num_edges, 2)).astype(np.float16),
    }
    return HomoGraph(num_nodes=num_nodes, src=src, dst=dst, ndata=ndata, edata=edata)


def stored(a: np.ndarray) -> np.ndarray:
    """What a tensor reads back as: native byte order, bool as uint8."""
    a = np.asarray(a)
    a = a.astype(a.dtype.newbyteorder("="))
    return a.view(np.uint8) if a.dtype == np.bool_ else a


def assert_same_dict(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert sorted(got) == sorted(want)
    for name, arr in want.items():
        expected = stored(arr)
        assert got[name].dtype == expected.dtype, name
        assert got[name].shape == expected.shape, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)


def assert_same_graph(got: HomoGraph, want: HomoGraph) -> None:
    assert got.num_nodes == want.num_nodes
    assert got.src.dtype == np.int64 and got.dst.dtype == np.int64
    np.testing.assert_array_equal(got.src, want.src)
    np.testing.assert_array_equal(got.dst, want.dst)
    assert_same_dict(got.ndata, want.ndata)
    assert_same_dict(got.edata, want.edata)


def tensors_bytes(tensors: dict[str, np.ndarray]) -> bytes:
    f = io.BytesIO()
    write_tensors(f, tensors)
    return f.getvalue()


def graph_bytes(graph: HomoGraph) -> bytes:
    f = io.BytesIO()
    write_graph(f, graph)
    return f.getvalue()


# --------------------------------------------------------------------------- pure tests


def test_tensor_round_trip_all_dtypes(tmp_path):
    tensors = all_dtype_tensors(np.random.default_rng(0))
    save_tensors(tmp_path / "t.dgl", tensors)
    got = load_tensors(tmp_path / "t.dgl")
    assert_same_dict(got, tensors)
    assert got["_N/bool"].dtype == np.uint8  # DGL stores bool as uint8
    assert list(got) == dgl_dict_order(tensors)  # file order is DGL's map order


def test_tensor_bytes_match_dgl_recording():
    assert tensors_bytes({"bb": np.array([1, 2, 3], dtype=np.int64)}) == DGL_TENSORS_BB
    # An empty dict is the magic and two zero counts (docs/DGL_FORMAT.md#tensor-dict).
    assert tensors_bytes({}) == bytes.fromhex("3f44a23fbe9f5add" + "00" * 16)
    assert read_tensors(bytes.fromhex("3f44a23fbe9f5add" + "00" * 16)) == {}


def test_graph_bytes_match_dgl_recording(tmp_path):
    graph = HomoGraph(3, np.array([0, 1]), np.array([1, 2]), ndata={"x": np.array([1, 0, 1], bool)})
    data = graph_bytes(graph)
    assert data[:32] == struct.pack("<QQQQ", 0xDD2E4FF046B4A13F, 2, 2, 1)
    assert data[32:4096] == bytes(4064)
    assert data[4096:] == DGL_GRAPH_TAIL
    save_graph(tmp_path / "g.dgl", graph)
    assert (tmp_path / "g.dgl").read_bytes() == data


@pytest.mark.parametrize("num_nodes,num_edges", [(0, 0), (5, 0), (1, 1), (50, 200)])
def test_graph_round_trip(tmp_path, num_nodes, num_edges):
    graph = sample_graph(np.random.default_rng(num_edges), num_nodes, num_edges)
    save_graph(tmp_path / "g.dgl", graph)
    got = load_graph_file(tmp_path / "g.dgl")
    assert_same_graph(got, graph)
    assert list(got.ndata) == dgl_dict_order(graph.ndata)


def test_graph_without_features_and_int32_ids():
    graph = HomoGraph(4, np.array([3, 0], np.int32), np.array([1, 1], np.int32))
    got = read_graph(graph_bytes(graph))
    np.testing.assert_array_equal(got.src, [3, 0])
    assert got.src.dtype == np.int64 and got.ndata == {} and got.edata == {}


def test_dgl_dict_order_is_a_permutation():
    assert dgl_dict_order([]) == []
    for n in (1, 2, 13, 14, 30, 100, 300):
        keys = [f"k{i}" for i in range(n)]
        order = dgl_dict_order(keys)
        assert sorted(order) == sorted(keys)
    # Byte-identity with DGL depends on this order; the oracle test checks it against DGL.
    assert dgl_dict_order(["_ID", "inner_node", "part_id", "_TYPE"]) == [
        "_TYPE",
        "part_id",
        "inner_node",
        "_ID",
    ]
    assert dgl_dict_order(["_ID", "_TYPE", "inner_node"]) == ["inner_node", "_TYPE", "_ID"]


@pytest.mark.parametrize(
    "tensors,message",
    [
        ({"a": np.arange(3, dtype=np.uint16)}, "dtype uint16"),
        ({"a": np.array(["x"], dtype=object)}, "dtype object"),
        ({"a": np.ones(2, dtype=np.complex64)}, "dtype complex64"),
        ({"a": np.float32(1.0)}, "0-d arrays"),
        ({1: np.arange(2)}, "names must be str"),
        ({"a\x00b": np.arange(2)}, "contains a NUL character"),
    ],
)
def test_save_tensors_rejects_what_dgl_cannot_load(tmp_path, tensors, message):
    with pytest.raises(DGLFormatError, match=message):
        save_tensors(tmp_path / "t.dgl", tensors)


@pytest.mark.parametrize(
    "change,message",
    [
        (dict(src=np.array([0, 5])), r"src holds node ids outside \[0, 3\)"),
        (dict(dst=np.array([-1, 0])), "dst holds node ids outside"),
        (dict(dst=np.array([0])), "src has 2 entries but dst has 1"),
        (dict(src=np.array([0.0, 1.0])), "src must be a 1-D integer array"),
        (dict(num_nodes=-1), "num_nodes must be a non-negative int"),
        (dict(ndata={"x": np.zeros(2)}), r"ndata\['x'\] has 2 rows, expected 3"),
        (dict(edata={"x": np.zeros(3)}), r"edata\['x'\] has 3 rows, expected 2"),
        (dict(edata={"x": np.zeros(2, np.uint32)}), "dtype uint32"),
    ],
)
def test_save_graph_rejects_inconsistent_graphs(tmp_path, change, message):
    base = dict(num_nodes=3, src=np.array([0, 1]), dst=np.array([1, 2]), ndata={}, edata={})
    with pytest.raises(DGLFormatError, match=message):
        save_graph(tmp_path / "g.dgl", HomoGraph(**{**base, **change}))
    assert not (tmp_path / "g.dgl").exists()


def small_files() -> dict[str, tuple[bytes, object]]:
    rng = np.random.default_rng(7)
    tensors = {"a": np.arange(6, dtype=np.int32).reshape(2, 3), "b/c": np.ones(2, bool)}
    graph = sample_graph(rng, 4, 5)
    return {
        "tensors": (tensors_bytes(tensors), read_tensors),
        "graph": (graph_bytes(graph), read_graph),
    }


@pytest.mark.parametrize("kind", ["tensors", "graph"])
def test_every_truncation_is_a_clear_error(kind):
    data, reader = small_files()[kind]
    reader(data)  # the whole file is fine
    for n in range(len(data)):
        with pytest.raises(ValueError, match=r"byte \d+: "):
            reader(data[:n])


@pytest.mark.parametrize("kind", ["tensors", "graph"])
def test_trailing_bytes_are_an_error(kind):
    data, reader = small_files()[kind]
    with pytest.raises(ValueError, match="unexpected bytes after the end"):
        reader(data + b"\x00")


@pytest.mark.parametrize("kind", ["tensors", "graph"])
def test_any_flipped_byte_is_caught_or_harmless(kind):
    """A corrupted byte either raises DGLFormatError or lands in data the format can't check."""
    data, reader = small_files()[kind]
    skip = range(32, 4096) if kind == "graph" else range(0)  # reserved header bytes
    errors = 0
    for i in range(len(data)):
        if i in skip:
            continue
        corrupt = bytearray(data)
        corrupt[i] ^= 0xFF
        try:
            reader(bytes(corrupt))
        except DGLFormatError:
            errors += 1
    # Magics, counts, lengths, shapes and dtype fields are all checked; only data is not.
    assert errors >= {"tensors": 100, "graph": 1000}[kind]


def test_length_fields_beyond_the_file_are_rejected_before_allocating():
    base = tensors_bytes({"a": np.arange(3, dtype=np.int64)})
    shape_at = 24 + 8 + 1 + 32  # magic and counts, name length, name "a", NDArray head
    huge = bytearray(base)
    huge[shape_at : shape_at + 8] = struct.pack("<q", 1 << 59)
    huge[shape_at + 8 : shape_at + 16] = struct.pack("<q", 1 << 62)
    with pytest.raises(DGLFormatError, match="needs .* bytes, only 24 remain"):
        read_tensors(bytes(huge))
    count = bytearray(base)
    count[8:24] = struct.pack("<QQ", 1 << 62, 1 << 62)
    with pytest.raises(DGLFormatError, match="says 4611686018427387904 entries"):
        read_tensors(bytes(count))
    name = bytearray(base)
    name[24:32] = struct.pack("<Q", (1 << 64) - 1)
    with pytest.raises(DGLFormatError, match="truncated: tensor name needs"):
        read_tensors(bytes(name))


@pytest.mark.parametrize(
    "offset,value,message",
    [
        (0, b"\x00", "expected tensor file magic"),
        (8, struct.pack("<Q", 2), "header says 2 entries, the list holds 1"),
        (33 + 8 + 8, struct.pack("<i", 2), r"device_type 2, only 1 \(CPU\)"),
        (33 + 28, bytes([3]), r"unsupported dtype \(code 3, bits 64"),
        (33 + 40, struct.pack("<q", 4), r"byte size 4 does not match shape \(3,\) of int64"),
        (33 + 24, struct.pack("<i", 99), "ndim 99 out of range"),
    ],
)
def test_corrupt_tensor_headers(offset, value, message):
    data = bytearray(tensors_bytes({"a": np.arange(3, dtype=np.int64)}))
    data[offset : offset + len(value)] = value
    with pytest.raises(DGLFormatError, match=message):
        read_tensors(bytes(data))


def test_corrupt_graph_headers(tmp_path):
    data = graph_bytes(HomoGraph(3, np.array([0, 1]), np.array([1, 2])))
    cases = [
        (8, struct.pack("<Q", 1), "graph file version 1"),
        (16, struct.pack("<Q", 0), "graph type 0"),
        (24, struct.pack("<Q", 2), "holds 2 graphs"),
        (4096, struct.pack("<Q", 4120), "graph data offset says 4120"),
        (len(data) - 16, struct.pack("<Q", 4113), "bad graph index trailer"),
        (4112, b"\x00", "expected HeteroGraph magic"),
    ]
    for offset, value, message in cases:
        corrupt = bytearray(data)
        corrupt[offset : offset + len(value)] = value
        path = tmp_path / f"bad{offset}.dgl"
        path.write_bytes(bytes(corrupt))
        with pytest.raises(DGLFormatError, match=message) as info:
            load_graph_file(path)
        assert str(path) in str(info.value)
    with pytest.raises(DGLFormatError, match="expected graph file magic"):
        read_graph(tensors_bytes({}))


# --------------------------------------------------------------------------- DGL oracle


class Oracle:
    """Queues jobs for tests/oracle/dgl_oracle.py and runs them in one DGL process."""

    def __init__(self, python: Path, workdir: Path):
        self.python = python
        self.dir = workdir
        self.jobs: list[dict] = []

    def _name(self, stem: str) -> str:
        return f"{len(self.jobs):03d}_{stem}"

    def save_tensors(self, tensors: dict[str, np.ndarray]) -> Path:
        src, out = self._name("in.npz"), self._name("dgl.dgl")
        np.savez(self.dir / src, **dict_arrays(tensors))
        self.jobs.append({"op": "save_tensors", "tensors": src, "out": out})
        return self.dir / out

    def load_tensors(self, path: Path) -> tuple[Path, Path]:
        out, meta = self._name("out.npz"), self._name("out.json")
        self.jobs.append({"op": "load_tensors", "path": str(path), "out": out, "meta": meta})
        return self.dir / out, self.dir / meta

    def save_graph(self, graph: HomoGraph, formats: list[str] | None = None) -> Path:
        src, out = self._name("graph.npz"), self._name("dgl.dgl")
        np.savez(self.dir / src, **graph_arrays(graph))
        self.jobs.append({"op": "save_graph", "graph": src, "out": out, "formats": formats})
        return self.dir / out

    def load_graph(self, path: Path) -> tuple[Path, Path]:
        out, meta = self._name("graph_out.npz"), self._name("graph_out.json")
        self.jobs.append({"op": "load_graph", "path": str(path), "out": out, "meta": meta})
        return self.dir / out, self.dir / meta

    def run(self) -> None:
        jobs = self.dir / "jobs.json"
        jobs.write_text(json.dumps(self.jobs))
        proc = subprocess.run(
            [str(self.python), str(ORACLE), str(jobs)], capture_output=True, text=True
        )
        assert proc.returncode == 0, f"DGL oracle failed:\n{proc.stderr[-5000:]}"
        assert json.loads(proc.stdout.strip().splitlines()[-1])["dgl"] == "2.1.0"
        self.jobs = []


def dict_arrays(d: dict[str, np.ndarray], prefix: str = "") -> dict[str, np.ndarray]:
    out = {f"{prefix}names": np.array(list(d), dtype=str)}
    for i, arr in enumerate(d.values()):
        out[f"{prefix}{i}" if prefix else f"t{i}"] = arr
    return out


def read_dict(npz, prefix: str = "") -> dict[str, np.ndarray]:
    names = [str(n) for n in npz[f"{prefix}names"]]
    return {name: npz[f"{prefix}{i}" if prefix else f"t{i}"] for i, name in enumerate(names)}


def graph_arrays(graph: HomoGraph) -> dict[str, np.ndarray]:
    return {
        "num_nodes": np.array([graph.num_nodes], dtype=np.int64),
        "src": np.asarray(graph.src, dtype=np.int64),
        "dst": np.asarray(graph.dst, dtype=np.int64),
        **dict_arrays(graph.ndata, "ndata_"),
        **dict_arrays(graph.edata, "edata_"),
    }


TORCH_DTYPES = {
    "int8": "torch.int8",
    "int16": "torch.int16",
    "int32": "torch.int32",
    "int64": "torch.int64",
    "uint8": "torch.uint8",
    "float16": "torch.float16",
    "float32": "torch.float32",
    "float64": "torch.float64",
}


@pytest.fixture
def oracle(dgl_python, tmp_path) -> Oracle:
    return Oracle(dgl_python, tmp_path)


def oracle_tensor_cases() -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(1)
    native = {k: v for k, v in all_dtype_tensors(rng).items() if v.dtype.isnative}
    cases = [native, {}, {"bb": np.array([1, 2, 3], dtype=np.int64)}]
    # Random key sets of 1..300 keys exercise DGL's unordered_map order, rehashes included.
    for n in [1, 2, 5, 12, 13, 14, 15, 28, 29, 30, 45, 58, 59, 60, 128, 300]:
        keys = [
            "".join(rng.choice(list("abcxyz_/:0123456789"), size=rng.integers(1, 20)))
            for _ in range(n)
        ]
        cases.append({k: np.array([i], dtype=np.int64) for i, k in enumerate(dict.fromkeys(keys))})
    return cases


def test_dgl_loads_our_tensors_and_writes_the_same_bytes(oracle, tmp_path):
    cases = oracle_tensor_cases()
    ours, theirs, loaded = [], [], []
    for i, tensors in enumerate(cases):
        path = tmp_path / f"ours{i}.dgl"
        save_tensors(path, tensors)
        ours.append(path)
        loaded.append(oracle.load_tensors(path))
        theirs.append(oracle.save_tensors(tensors))
    oracle.run()
    for tensors, path, dgl_path, (out, meta) in zip(cases, ours, theirs, loaded, strict=True):
        info = json.loads(meta.read_text())
        with np.load(out, allow_pickle=False) as npz:
            got = read_dict(npz)
        assert_same_dict(got, tensors)  # values, shapes, dtypes as DGL/torch sees them
        for name, dtype in zip(info["names"], info["dtypes"], strict=True):
            assert dtype == TORCH_DTYPES[str(stored(tensors[name]).dtype)], name
        # Byte-identical to dgl.data.utils.save_tensors, entry order included.
        assert path.read_bytes() == dgl_path.read_bytes(), f"{len(tensors)} keys"
        assert_same_dict(load_tensors(dgl_path), tensors)


def oracle_graphs() -> list[HomoGraph]:
    rng = np.random.default_rng(3)
    plain = HomoGraph(6, np.array([5, 0, 0, 3]), np.array([0, 5, 5, 3]))  # multi-edge, loop
    many = sample_graph(rng, 40, 150)
    many.ndata.update({f"f{i}": rng.standard_normal(40) for i in range(12)})  # a rehash
    return [
        sample_graph(rng, 30, 80),
        sample_graph(rng, 0, 0),
        sample_graph(rng, 7, 0),
        plain,
        many,
    ]


def test_dgl_loads_our_graphs(oracle, tmp_path):
    graphs = oracle_graphs()
    outs = []
    for i, graph in enumerate(graphs):
        save_graph(tmp_path / f"g{i}.dgl", graph)
        outs.append(oracle.load_graph(tmp_path / f"g{i}.dgl"))
    oracle.run()
    for graph, (out, meta_path) in zip(graphs, outs, strict=True):
        meta = json.loads(meta_path.read_text())
        assert meta["num_graphs"] == 1 and meta["labels"] == []
        assert meta["ntypes"] == ["_N"] and meta["etypes"] == ["_E"]
        assert meta["canonical_etypes"] == [["_N", "_E", "_N"]]
        assert meta["idtype"] == "torch.int64"
        assert meta["by_index_same_edges"]  # load_graphs(path, [0]) reads the trailer
        for kind, tensors in (("ndata", graph.ndata), ("edata", graph.edata)):
            for name, arr in tensors.items():
                assert meta[f"{kind}_dtypes"][name] == TORCH_DTYPES[str(stored(arr).dtype)]
        with np.load(out, allow_pickle=False) as npz:
            got = HomoGraph(
                int(npz["num_nodes"][0]),
                npz["src"],
                npz["dst"],
                read_dict(npz, "ndata_"),
                read_dict(npz, "edata_"),
            )
            n = graph.num_nodes
            np.testing.assert_array_equal(npz["in_degrees"], np.bincount(graph.dst, minlength=n))
            np.testing.assert_array_equal(npz["out_degrees"], np.bincount(graph.src, minlength=n))
            # CSC built by DGL from our COO lists every edge once under its own edge id.
            eids = npz["csc_eids"]
            np.testing.assert_array_equal(np.sort(eids), np.arange(graph.num_edges))
            np.testing.assert_array_equal(npz["csc_indices"], graph.src[eids])
        assert_same_graph(got, graph)


def test_dgl_writes_the_same_graph_bytes(oracle, tmp_path):
    graphs = oracle_graphs()
    theirs = [oracle.save_graph(graph) for graph in graphs]
    oracle.run()
    for graph, dgl_path in zip(graphs, theirs, strict=True):
        ours = graph_bytes(graph)
        dgl_bytes = dgl_path.read_bytes()
        # Bytes 32..4095 of DGL's header are uninitialised stack memory (docs/DGL_FORMAT.md#graph-file;
        # #dict-order): DGL writes garbage there, we write zeros; no loader reads them.
        assert len(ours) == len(dgl_bytes)
        assert ours[:32] == dgl_bytes[:32]
        assert ours[4096:] == dgl_bytes[4096:]
        assert_same_graph(load_graph_file(dgl_path), graph)


@pytest.mark.parametrize("formats", [["csr"], ["csc"], ["coo", "csc"], ["coo", "csr", "csc"]])
def test_we_read_dgl_graphs_saved_in_other_formats(oracle, formats):
    graph = oracle_graphs()[0]
    dgl_path = oracle.save_graph(graph, formats=formats)
    oracle.run()
    assert_same_graph(load_graph_file(dgl_path), graph)
