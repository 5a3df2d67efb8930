"""The in-memory build (sampler.sample.in_memory): read once, built lean, the same graph.

`build_dense_graph` must give what `densify(build_tables(...))` of the tables read one edge set
at a time gives (the graph the records come from); `node_table` what build_node_table of the
concatenated pieces gives; `dense_adjacency` what the re-indexing by lookups and masks gives.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sampler.batches import EdgeBatch, NodeBatch, bytes_array
from sampler.features import FeatureSpec
from sampler.io import graph_tables
from sampler.node_table import FingerprintCollision, build_node_table
from sampler.sample import adjacency, dense, in_memory
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests import kernel_oracles as oracles


def _assert_batches_equal(a: NodeBatch, b: NodeBatch) -> None:
    np.testing.assert_array_equal(a.fp, b.fp)
    assert a.fp.dtype == b.fp.dtype
    assert a.ids.dtype == b.ids.dtype == object and a.ids.tolist() == b.ids.tolist()
    assert list(a.features) == list(b.features)
    for name in a.features:
        x, y = a.features[name], b.features[name]
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)


def _pieces(rng, sizes, duplicate=False) -> list[NodeBatch]:
    """Node pieces with a float vector, an int and a bytes feature; `duplicate`: one id in two
    pieces with different features (the content hash keeps one)."""
    out, first = [], 0
    for n in sizes:
        names = [b"n%d" % i for i in range(first, first + n)]
        first += n
        if duplicate and n and out and len(out[0]):
            names[0] = out[0].ids[0]
        fp = graph_tables.ids.fingerprint(pa.array(names, pa.binary()))
        features = {
            "feat": rng.standard_normal((n, 3)).astype(np.float32),
            "label": rng.integers(0, 9, n).astype(np.int64),
            "tag": bytes_array([b"t%d" % rng.integers(0, 5) for _ in range(n)]),
        }
        out.append(NodeBatch(fp, bytes_array(names), features))
    return out


@pytest.mark.parametrize("sizes", [[0], [5], [3, 0, 7, 1], [400, 250, 90]])
@pytest.mark.parametrize("duplicate", [False, True])
def test_node_table_is_build_node_table(sizes, duplicate):
    rng = np.random.default_rng(len(sizes) + duplicate)
    pieces = _pieces(rng, sizes, duplicate)
    specs = {
        "feat": FeatureSpec("feat", "float", (3,)),
        "label": FeatureSpec("label", "int", ()),
        "tag": FeatureSpec("tag", "bytes", ()),
    }
    want = build_node_table(NodeBatch.concat(pieces, specs))
    got = in_memory.node_table(list(pieces), specs)
    assert got.duplicates == want.duplicates
    _assert_batches_equal(got.rows, want.rows)


def test_node_table_of_latent_ids_is_their_distinct_ids():
    """Latent pieces (Arrow arrays of a batch's distinct ids): each id once, in fingerprint
    order, as build_node_table gives them from the per-batch NodeBatches."""
    batches = [[b"a1", b"a2", b"a1"], [b"a3", b"a1"], [], [b"a2", b"a4", b"a4"]]
    arrays = [pa.array(b, pa.binary()) for b in batches]
    want = build_node_table(NodeBatch.concat([graph_tables.distinct_ids(a) for a in arrays], {}))
    got = in_memory.node_table([graph_tables.pc.unique(a) for a in arrays], {})
    _assert_batches_equal(got.rows, want.rows)
    assert sorted(got.rows.ids.tolist()) == [b"a1", b"a2", b"a3", b"a4"]
    assert got.duplicates == want.duplicates


def test_latent_ids_sharing_a_fingerprint_are_an_error(monkeypatch):
    monkeypatch.setattr(graph_tables.ids, "fingerprint", lambda col: np.zeros(len(col), np.uint64))
    pieces = [pa.array([b"x", b"x"], pa.binary()), pa.array([b"x"], pa.binary())]
    assert in_memory.node_table(list(pieces), {}).rows.ids.tolist() == [b"x"]
    with pytest.raises(FingerprintCollision, match="share a 64-bit fingerprint"):
        in_memory.node_table([pa.array([b"x"], pa.binary()), pa.array([b"y"], pa.binary())], {})


def _reference_dense(adj, sources, targets):
    """The re-indexing as it was written first: every position looked up, masks applied."""
    owner = np.repeat(np.arange(len(adj.nodes)), adj.degrees)
    positions = np.concatenate(
        [np.arange(s, s + d) for s, d in zip(adj.starts, adj.degrees, strict=True)]
        or [np.zeros(0, np.int64)]
    ).astype(np.int64)
    src_rows, src_ok = oracles.lookup_numpy(sources.rows.fp, adj.nodes)
    dst_rows, dst_ok = oracles.lookup_numpy(targets.rows.fp, adj.targets[positions])
    keep = src_ok[owner] & dst_ok
    kept = positions[keep]
    degrees = np.bincount(owner[keep], minlength=len(adj.nodes)).astype(np.int64)
    starts = np.cumsum(degrees) - degrees
    out_starts = np.zeros(len(sources.rows), np.int64)
    out_degrees = np.zeros(len(sources.rows), np.int64)
    out_starts[src_rows[src_ok]] = starts[src_ok]
    out_degrees[src_rows[src_ok]] = degrees[src_ok]
    return (out_starts, out_degrees, dst_rows[keep], adj.edge_keys[kept],
            adj.weights[kept], int(len(keep) - keep.sum()))  # fmt: skip


@pytest.mark.parametrize("missing", [False, True])
@pytest.mark.parametrize("shards", [1, 3])
def test_dense_adjacency_is_the_reference(missing, shards):
    """In node order (one shard: build_adjacency's CSR) or not (shards merged), with or
    without edges whose endpoint is missing."""
    rng = np.random.default_rng(11 + shards)
    nodes = rng.integers(0, 2**63, 300).astype(np.uint64)
    src, dst = rng.choice(nodes, 3000), rng.choice(nodes, 3000)
    weights = {"weight": rng.random(3000).astype(np.float32)}
    edges = EdgeBatch(src, dst, weights)
    if shards == 1:
        adj = adjacency.build_adjacency(edges, "weight")
    else:
        part = (src % np.uint64(shards)).astype(np.int64)
        adj = adjacency.merge_adjacency(
            [adjacency.build_adjacency(edges.take(np.flatnonzero(part == s)), "weight")
             for s in range(shards)], {"weight": FeatureSpec("weight", "float", ())},
        )  # fmt: skip
    present = nodes[::2] if missing else nodes
    # nodes without edges too: a source's row is not its rank among the sources
    present = np.unique(np.concatenate([present, rng.integers(0, 2**63, 200).astype(np.uint64)]))
    table = build_node_table(NodeBatch(present, bytes_array([b""] * len(present)), {}))
    got, dropped = dense.dense_adjacency(adj, table, table)
    want = _reference_dense(adj, table, table)
    for name, a, b in zip(("starts", "degrees", "targets", "edge_keys", "weights"),
                          (got.starts, got.degrees, got.targets, got.edge_keys, got.weights),
                          want, strict=False):  # fmt: skip
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    assert dropped == want[-1]
    assert (dropped > 0) == missing
    assert dense._in_node_order(adj) == (shards == 1)
    if shards == 1 and not missing:  # the CSR's edge keys kept as they are, not copied
        assert np.shares_memory(got.edge_keys, adj.edge_keys)


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    """A MAG-shaped graph in 3 Parquet files per table: `written` reads `writes`' files."""
    root = tmp_path_factory.mktemp("mag")
    graph = synthetic.generate_mag(3000, seed=4, feature_dim=8, all_node_features=False)
    schema = synthetic.write_graph(graph, str(root), fmt="parquet", num_shards=3)
    spec = root / "spec.pbtxt"
    synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(spec))
    info = load_graph(schema)
    return info, make_plan(info, load_sampling_spec(str(spec)), "edge")


def _one_set_at_a_time(graph):
    """The parts as each edge set's files read for it alone, latent ends as NodeBatches."""
    return [(kind, name, list(graph_tables.read_graph_file(graph, kind, name, path, fmt)))
            for kind, name, path, fmt in graph_tables.graph_files(graph)]  # fmt: skip


def test_build_dense_graph_is_densify_of_the_tables(mag, monkeypatch):
    """The graph built lean from files read once equals the graph densified from the tables
    of every file read for each edge set (build_node_table of the concatenated pieces), and
    `writes`' files are read once for `writes` and `written`."""
    graph, plan = mag
    reads = []
    read_edge_file = graph_tables.read_edge_file

    def counted(path, *args, **kwargs):
        reads.append(path)
        return read_edge_file(path, *args, **kwargs)

    monkeypatch.setattr(graph_tables, "read_edge_file", counted)
    got = in_memory.build_dense_graph(graph, plan, in_memory.read_tables(graph))
    writes = [p for p in reads if "writes" in p]
    assert len(writes) == len(set(writes)) == 3
    monkeypatch.setattr(graph_tables, "read_edge_file", read_edge_file)

    parts = _one_set_at_a_time(graph)
    node_parts = {name: [] for name in graph.node_sets}
    for kind, name, pieces in parts:
        if kind == "node":
            node_parts[name] += pieces
            continue
        ends = graph_tables.latent_ends(graph, graph.edge_sets[name])
        for _, end_ids in pieces:
            for column, rows in end_ids.items():
                node_parts[ends[column]].append(rows)
    for name, info in graph.node_sets.items():
        want = build_node_table(NodeBatch.concat(node_parts[name], info.features))
        _assert_batches_equal(got.nodes[name].rows, want.rows)
    want = dense.densify(graph, *in_memory.build_tables(graph, plan, parts))
    assert got.dropped_edges == want.dropped_edges
    for name in graph.edge_sets:
        a, b = got.adjacency[name], want.adjacency[name]
        for field in ("starts", "degrees", "targets", "edge_keys"):
            np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=name)
        assert len(a.targets) > 0


def test_one_chunk_columns_are_read_without_a_copy():
    """A table's one-chunk columns (what the readers give) become a batch without a copy in
    Arrow's memory (`combine_chunks` copied every id and feature read once more); a column that
    is a slice of larger buffers (a BigQuery batch's rows) is copied, so that its features
    do not keep the whole batch alive; the batches are the same either way."""
    n, width = 20_000, 8
    specs = {"feat": FeatureSpec("feat", "float", (width,))}
    values = pa.array(np.arange(n * width, dtype=np.float32))
    feat = pa.FixedSizeListArray.from_arrays(values, width)
    node_ids = pa.array([b"n%d" % i for i in range(n)], pa.binary())
    table = pa.table({"#id": node_ids, "feat": feat})
    edges = pa.table({"#source": node_ids, "#target": node_ids[::-1]})
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    before = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    try:
        nodes = NodeBatch.from_table(table, specs)
        edge_batch = EdgeBatch.from_table(edges, {}, False)
    finally:
        pa.set_memory_pool(before)
    assert pool.max_memory() == 0  # nothing allocated in Arrow's memory: no copy
    assert np.shares_memory(nodes.features["feat"], np.frombuffer(values.buffers()[1], np.float32))
    np.testing.assert_array_equal(nodes.fp, graph_tables.ids.fingerprint(node_ids))
    np.testing.assert_array_equal(edge_batch.dst, nodes.fp[::-1])
    assert nodes.ids.tolist() == node_ids.to_pylist()
    np.testing.assert_array_equal(nodes.features["feat"], np.arange(n * width).reshape(n, width))
    part = NodeBatch.from_table(table.slice(100, 50), specs)  # a slice: its rows copied
    assert not np.shares_memory(part.features["feat"], nodes.features["feat"])
    np.testing.assert_array_equal(part.features["feat"], nodes.features["feat"][100:150])
    assert part.ids.tolist() == node_ids.to_pylist()[100:150]
