"""Tests of the synthetic OGBN-MAG-shaped graph generator and its CLI."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import tensorflow_gnn as tfgnn
from google.protobuf import text_format
from tensorflow.core.framework import types_pb2
from tensorflow_gnn.proto import graph_schema_pb2
from tensorflow_gnn.sampler import sampling_spec_pb2

from pipelines import generate
from sampler.errors import UserError
from sampler.features import feature_specs
from sampler.io.files import expand_files
from sampler.io.readers import read_table
from sampler.tools.synthetic import (
    EDGE_SETS,
    ID_PREFIX,
    MAG_COUNTS,
    generate_mag,
    mag_sampling_spec,
    write_graph,
    write_sampling_spec,
)

STORED_EDGE_SETS = ("cites", "writes", "affiliated_with", "has_topic")
N = 20_000


@pytest.fixture(scope="module")
def graph():
    return generate_mag(N, seed=3)


def indices(column, node_set: str) -> np.ndarray:
    """Node indices parsed from ids such as b"p17" (checking the prefix)."""
    text = column.cast(pa.string())
    prefix = ID_PREFIX[node_set].decode()
    assert pc.all(pc.starts_with(text, prefix)).as_py(), f"{node_set} id without prefix {prefix}"
    return pc.cast(pc.utf8_slice_codeunits(text, len(prefix)), pa.int64()).to_numpy()


def in_degrees(graph, edge_set: str) -> np.ndarray:
    target = EDGE_SETS[edge_set][1]
    targets = indices(graph.tables[edge_set]["#target"], target)
    return np.bincount(targets, minlength=graph.num_nodes[target])


def intra_fraction(graph, edge_set: str) -> float:
    source, target = EDGE_SETS[edge_set]
    table = graph.tables[edge_set]
    src = indices(table["#source"], source)
    tgt = indices(table["#target"], target)
    return float(np.mean(graph.clusters[source][src] == graph.clusters[target][tgt]))


def test_same_arguments_give_identical_graphs():
    a = generate_mag(3000, seed=7, edge_weights=True, hub_fraction=0.1, all_node_features=True)
    b = generate_mag(3000, seed=7, edge_weights=True, hub_fraction=0.1, all_node_features=True)
    assert a.schema == b.schema
    assert sorted(a.tables) == sorted(b.tables)
    for name in a.tables:
        assert a.tables[name].equals(b.tables[name]), name
    for name in a.clusters:
        np.testing.assert_array_equal(a.clusters[name], b.clusters[name])
    c = generate_mag(3000, seed=8, edge_weights=True, hub_fraction=0.1, all_node_features=True)
    assert not a.tables["cites"].equals(c.tables["cites"])


def test_feature_options_do_not_change_the_topology():
    plain = generate_mag(2000, seed=1)
    rich = generate_mag(2000, seed=1, feature_dim=3, all_node_features=True, edge_weights=True)
    for name in STORED_EDGE_SETS:
        for column in ("#source", "#target"):
            assert plain.tables[name][column].equals(rich.tables[name][column]), name
    assert plain.tables["paper"]["label"].equals(rich.tables["paper"]["label"])


def test_node_counts_follow_mag(graph):
    for name in ("author", "institution", "field_of_study"):
        expected = N * MAG_COUNTS[name] / MAG_COUNTS["paper"]
        assert graph.num_nodes[name] == pytest.approx(expected, abs=1)
    assert graph.num_nodes["paper"] == N
    assert graph.tables["paper"].num_rows == N
    assert graph.num_nodes["author"] / N == pytest.approx(1.54, abs=0.01)
    tiny = generate_mag(5)
    assert min(tiny.num_nodes.values()) == 1  # institution/field_of_study at least 1


def test_edge_counts_roughly_follow_mag(graph):
    counts = graph.counts()
    per_paper = {name: counts[name] / N for name in STORED_EDGE_SETS}
    assert 6.0 <= per_paper["cites"] <= 7.5  # MAG 7.36 (self-loops/duplicates removed)
    assert 8.5 <= per_paper["writes"] <= 10.0  # MAG 9.70
    assert 8.0 <= per_paper["has_topic"] <= 10.5  # MAG 10.19
    assert 0.7 <= counts["affiliated_with"] / counts["author"] <= 0.95  # MAG 0.92
    assert counts["written"] == counts["writes"]
    for name in STORED_EDGE_SETS:
        assert graph.schema.edge_sets[name].metadata.cardinality == counts[name]


def test_tables_are_canonical(graph):
    for name, table in graph.tables.items():
        where = graph.schema.node_sets if name in graph.schema.node_sets else graph.schema.edge_sets
        specs = feature_specs(where[name].features, name)
        ids = ["#id"] if name in graph.schema.node_sets else ["#source", "#target"]
        assert table.column_names == ids + sorted(specs), name
        for column in ids:
            assert table.schema.field(column).type == pa.binary()
        for feature, spec in specs.items():
            assert table.schema.field(feature).type == spec.arrow_type, (name, feature)
    assert sorted(graph.tables) == ["affiliated_with", "cites", "has_topic", "paper", "writes"]
    feat = graph.tables["paper"].schema.field("feat").type
    assert feat == pa.list_(pa.float32(), 16)


def test_ids_are_unique_and_well_formed(graph):
    ids = graph.tables["paper"]["#id"]
    assert pc.count_distinct(ids).as_py() == N
    np.testing.assert_array_equal(np.sort(indices(ids, "paper")), np.arange(N))
    rich = generate_mag(500, all_node_features=True)
    for name in ("paper", "author", "institution", "field_of_study"):
        column = rich.tables[name]["#id"]
        assert pc.count_distinct(column).as_py() == rich.num_nodes[name] == len(column)
        np.testing.assert_array_equal(np.sort(indices(column, name)), np.arange(len(column)))


def test_edge_endpoints_exist_and_edges_are_simple(graph):
    for name in STORED_EDGE_SETS:
        source, target = EDGE_SETS[name]
        table = graph.tables[name]
        for column, node_set in (("#source", source), ("#target", target)):
            idx = indices(table[column], node_set)
            assert idx.min() >= 0 and idx.max() < graph.num_nodes[node_set], (name, column)
        pairs = pc.binary_join_element_wise(table["#source"], table["#target"], b"|")
        assert pc.count_distinct(pairs).as_py() == table.num_rows, f"{name} has multi-edges"
    cites = graph.tables["cites"]
    assert not pc.any(pc.equal(cites["#source"], cites["#target"])).as_py()


def test_written_is_the_reverse_of_writes(graph):
    written = graph.schema.edge_sets["written"]
    assert (written.source, written.target) == ("paper", "author")
    assert {e.key: e.value for e in written.metadata.extra} == {"edge_type": "reversed"}
    assert not written.metadata.filename
    assert "written" not in graph.tables
    for name in ("author", "institution", "field_of_study"):
        node_set = graph.schema.node_sets[name]
        assert not node_set.features and not node_set.metadata.filename  # latent


def test_degrees_are_heavy_tailed(graph):
    cites = in_degrees(graph, "cites")
    assert cites.max() >= 30 * cites.mean()
    assert np.sort(cites)[-20:].min() >= 10 * cites.mean()  # many hubs, not one
    assert in_degrees(graph, "has_topic").max() >= 5 * in_degrees(graph, "has_topic").mean()
    papers_per_author = np.bincount(
        indices(graph.tables["writes"]["#source"], "author"), minlength=graph.num_nodes["author"]
    )
    assert papers_per_author.max() >= 10 * papers_per_author.mean()


@pytest.mark.parametrize("intra", [0.9, 0.5])
def test_most_edges_stay_inside_their_cluster(intra):
    g = generate_mag(10_000, seed=2, intra_cluster=intra)
    assert g.num_clusters >= 10
    for name in STORED_EDGE_SETS:
        assert intra - 0.04 <= intra_fraction(g, name) <= intra + 0.02, name


def test_labels_follow_clusters(graph):
    labels = graph.tables["paper"]["label"].to_numpy()
    cluster = graph.clusters["paper"][indices(graph.tables["paper"]["#id"], "paper")]
    assert labels.min() >= 0 and labels.max() < 349
    agree = 0
    for c in range(graph.num_clusters):
        agree += np.bincount(labels[cluster == c]).max()
    assert agree / N >= 0.75
    years = graph.tables["paper"]["year"].to_numpy()
    assert years.min() >= 2010 and years.max() <= 2019


def test_hub_paper_is_cited_by_the_fraction():
    plain = generate_mag(5000, seed=4)
    hub = generate_mag(5000, seed=4, hub_fraction=0.2)
    before, after = in_degrees(plain, "cites")[0], in_degrees(hub, "cites")[0]
    assert before < 200
    assert 1000 <= after <= 1000 + before
    assert in_degrees(hub, "cites")[1:].max() < 500


def test_edge_weights():
    g = generate_mag(1000, edge_weights=True)
    weight = g.tables["cites"]["weight"]
    assert weight.type == pa.float32()
    values = weight.to_numpy()
    assert values.min() > 0 and values.max() <= 1 and len(np.unique(values)) > 0.9 * len(values)
    assert g.schema.edge_sets["cites"].features["weight"].dtype == types_pb2.DT_FLOAT
    assert "weight" not in generate_mag(1000).tables["cites"].column_names


@pytest.mark.parametrize("options", [{}, {"all_node_features": True, "edge_weights": True}])
def test_schema_is_a_valid_graph_spec(options):
    g = generate_mag(100, feature_dim=5, **options)
    spec = tfgnn.create_graph_spec_from_schema_pb(g.schema)
    assert spec.node_sets_spec["paper"].features_spec["feat"].shape.as_list() == [None, 5]
    assert set(spec.edge_sets_spec) == set(EDGE_SETS)
    if options:
        assert spec.node_sets_spec["author"].features_spec["feat"].shape.as_list() == [None, 4]


def test_bad_arguments_raise_user_errors():
    for kwargs in (
        {"num_papers": 0},
        {"num_papers": 100, "hub_fraction": 1.5},
        {"num_papers": 100, "intra_cluster": -0.1},
        {"num_papers": 1000, "num_clusters": 1000},  # only 12 institutions
        {"num_papers": 100, "feature_dim": 0},
    ):
        with pytest.raises(UserError):
            generate_mag(**kwargs)


def read_back(schema_path: str, schema, name: str) -> pa.Table:
    where = schema.node_sets if name in schema.node_sets else schema.edge_sets
    filename = where[name].metadata.filename
    ids = ("#id",) if name in schema.node_sets else ("#source", "#target")
    specs = feature_specs(where[name].features, name)
    fmt = filename.split("@")[0].rsplit(".", 1)[1]
    paths = expand_files(os.path.join(os.path.dirname(schema_path), filename))
    batches = [t for path in paths for t in read_table(path, fmt, ids, specs)]
    return pa.concat_tables(batches)


@pytest.mark.parametrize("fmt", ["csv", "tfrecord", "parquet"])
@pytest.mark.parametrize("num_shards", [1, 3])
def test_write_graph_round_trips(tmp_path, fmt, num_shards):
    g = generate_mag(300, all_node_features=True, edge_weights=True)
    path = write_graph(g, str(tmp_path), fmt=fmt, num_shards=num_shards)
    assert path == os.path.join(str(tmp_path), "graph_schema.pbtxt")
    schema = text_format.Parse(open(path).read(), graph_schema_pb2.GraphSchema())
    suffix = f"@{num_shards}" if num_shards > 1 else ""
    for name, table in g.tables.items():
        where = schema.node_sets if name in schema.node_sets else schema.edge_sets
        assert where[name].metadata.filename == f"{name}.{fmt}{suffix}"
        assert read_back(path, schema, name).equals(table), name
    assert schema.edge_sets["written"].metadata.filename == f"writes.{fmt}{suffix}"
    tfgnn.create_graph_spec_from_schema_pb(schema)


def test_write_graph_leaves_latent_sets_without_files(tmp_path):
    g = generate_mag(200)
    path = write_graph(g, str(tmp_path / "out"), fmt="parquet")
    schema = text_format.Parse(open(path).read(), graph_schema_pb2.GraphSchema())
    assert not schema.node_sets["author"].metadata.filename
    assert schema.node_sets["paper"].metadata.filename == "paper.parquet"
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        ["graph_schema.pbtxt"] + [f"{name}.parquet" for name in g.tables]
    )
    assert not g.schema.node_sets["paper"].metadata.filename  # the graph's schema is untouched
    with pytest.raises(UserError):
        write_graph(g, str(tmp_path / "bad"), fmt="json")


def test_mag_sampling_spec(tmp_path):
    spec = mag_sampling_spec()
    assert (spec.seed_op.op_name, spec.seed_op.node_set_name) == ("seed", "paper")
    ops = {
        op.op_name: (list(op.input_op_names), op.edge_set_name, op.sample_size)
        for op in spec.sampling_ops
    }
    assert ops == {
        "seed->paper": (["seed"], "cites", 32),
        "paper->author": (["seed", "seed->paper"], "written", 8),
        "author->paper": (["paper->author"], "writes", 16),
        "author->institution": (["paper->author"], "affiliated_with", 16),
        "paper->field_of_study": (["seed", "seed->paper", "author->paper"], "has_topic", 16),
    }
    assert all(op.strategy == sampling_spec_pb2.RANDOM_UNIFORM for op in spec.sampling_ops)
    path = write_sampling_spec(spec, str(tmp_path / "spec.pbtxt"))
    parsed = text_format.Parse(open(path).read(), sampling_spec_pb2.SamplingSpec())  # TF-GNN's
    assert parsed.SerializeToString(deterministic=True) == spec.SerializeToString(
        deterministic=True
    )
    schema = generate_mag(10).schema
    for op in spec.sampling_ops:
        assert op.edge_set_name in schema.edge_sets
    with pytest.raises(UserError):
        mag_sampling_spec("author")


def test_cli(tmp_path, capsys):
    out = tmp_path / "mag"
    argv = ["--num_papers", "500", "--output_dir", str(out), "--format", "parquet"]
    assert generate.main([*argv, "--num_shards", "2", "--edge_weights", "--write_spec"]) == 0
    printed = capsys.readouterr().out
    assert f"schema: {out / 'graph_schema.pbtxt'}" in printed
    assert "cites" in printed and "latent" in printed
    schema = text_format.Parse(
        (out / "graph_schema.pbtxt").read_text(), graph_schema_pb2.GraphSchema()
    )
    assert schema.edge_sets["cites"].metadata.filename == "cites.parquet@2"
    assert "weight" in schema.edge_sets["cites"].features
    spec = text_format.Parse(
        (out / "sampling_spec.pbtxt").read_text(), sampling_spec_pb2.SamplingSpec()
    )
    ours = mag_sampling_spec()
    assert spec.SerializeToString(deterministic=True) == ours.SerializeToString(deterministic=True)
    assert generate.main(["--num_papers", "0", "--output_dir", str(out)]) == 2
    assert "error: num_papers" in capsys.readouterr().err
