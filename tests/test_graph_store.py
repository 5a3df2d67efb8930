"""The graph snapshot (sampler.sample.graph_store): what every SDK process of a machine maps.

Checked against plain Python and numpy indexing of the arrays the snapshot was made from,
not against the store's own output.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from sampler.sample import graph_store, in_memory
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic


def _objects(values: list[bytes]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


@pytest.mark.parametrize(
    "values",
    [
        [b"p1", b"", b"author-17", b"x" * 40, b"\xff\x00mid", b"z"],
        [b"tail\x00", b"a", b"\x00", b""],  # trailing NUL bytes: the one-by-one path
        [b"w" * 300, b"short"],  # longer than the fixed-width gather takes
        [b"", b""],
    ],
)
def test_byte_column_gathers_what_python_indexing_gives(values):
    column = graph_store.ByteColumn.from_objects(_objects(values))
    rng = np.random.default_rng(3)
    index = rng.integers(0, len(values), size=50)
    got = column[index]
    assert got.dtype == object and got.shape == (50,)
    assert [type(v) for v in got] == [bytes] * 50
    assert got.tolist() == [values[i] for i in index]
    assert column[1:].tolist() == values[1:]
    mask = np.arange(len(values)) % 2 == 0
    assert column[mask].tolist() == values[::2]
    assert len(column) == len(values) and column[np.zeros(0, np.int64)].shape == (0,)


def test_byte_column_of_a_2d_bytes_feature():
    values = np.array([[b"a", b"bb"], [b"", b"ccc"], [b"dd\x00", b"e"]], dtype=object)
    column = graph_store.ByteColumn.from_objects(values)
    assert column.shape == (3, 2)
    got = column[np.array([2, 0, 2])]
    assert got.shape == (3, 2)
    assert got.tolist() == [values[2].tolist(), values[0].tolist(), values[2].tolist()]


def _equal(a, b) -> bool:
    if isinstance(a, graph_store.ByteColumn) or isinstance(b, graph_store.ByteColumn):
        a, b = np.asarray(a[np.arange(len(a))]), np.asarray(b[np.arange(len(b))])
    return a.dtype == b.dtype and a.shape == b.shape and a.tolist() == b.tolist()


def test_a_saved_graph_maps_back_to_the_same_arrays(tmp_path):
    graph_data = synthetic.generate_mag(
        120, seed=4, feature_dim=3, edge_weights=True, all_node_features=True
    )
    schema = synthetic.write_graph(graph_data, str(tmp_path / "graph"), fmt="parquet")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    graph = load_graph(schema)
    dense = in_memory.load_dense_graph(graph, make_plan(graph, load_sampling_spec(spec), "edge"))
    graph_store.save_graph(dense, str(tmp_path / "snapshot"))
    mapped = graph_store.open_graph(str(tmp_path / "snapshot"))

    assert mapped.dropped_edges == dense.dropped_edges
    assert list(mapped.nodes) == list(dense.nodes)
    for name, table in dense.nodes.items():
        got = mapped.nodes[name]
        assert got.duplicates == table.duplicates
        assert isinstance(got.rows.fp, np.memmap)  # mapped, not read into this process
        assert _equal(got.rows.fp, table.rows.fp)
        assert _equal(got.rows.ids, table.rows.ids)
        assert sorted(got.rows.features) == sorted(table.rows.features)
        for feature, column in table.rows.features.items():
            assert _equal(got.rows.features[feature], column)
    assert list(mapped.adjacency) == list(dense.adjacency)
    for name, adj in dense.adjacency.items():
        got = mapped.adjacency[name]
        for attr in ("starts", "degrees", "targets", "edge_keys"):
            assert _equal(getattr(got, attr), getattr(adj, attr)), (name, attr)
        assert (got.weights is None) == (adj.weights is None)
        if adj.weights is not None:
            assert _equal(got.weights, adj.weights)
        for feature, column in adj.features.items():
            assert _equal(got.features[feature], column)


def test_a_local_snapshot_is_mapped_where_it_is(tmp_path):
    assert graph_store.machine_copy(str(tmp_path)) == str(tmp_path)


@pytest.mark.parametrize(
    "array",
    [
        np.arange(10, dtype=np.int64),
        np.zeros((0,), np.float32),
        np.zeros((4, 0), np.int32),
        np.arange(21, dtype=np.float32).reshape(7, 3),
        np.array([b"ab", b"c"], dtype="S2"),
        np.arange(12, dtype=">i4").reshape(3, 4),
        np.asfortranarray(np.arange(15, dtype=np.float64).reshape(3, 5)),
        np.arange(40, dtype=np.uint16)[::3],
    ],
)
def test_an_array_file_holds_the_bytes_numpy_save_writes(tmp_path, array):
    graph_store._save(str(tmp_path), "a", array)
    expected = io.BytesIO()
    np.save(expected, np.ascontiguousarray(array), allow_pickle=False)
    assert (tmp_path / "a.npy").read_bytes() == expected.getvalue()
    np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), array)
