"""The Beam pipeline end to end: equal to the in-memory oracle, deterministic, parseable."""

from __future__ import annotations

import glob
import os

import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn

from sampler.io.writers import write_table
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.pipeline_helpers import oracle_records, read_records, run_pipeline


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("mag")
    graph = synthetic.generate_mag(150, seed=3, feature_dim=4, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="tfrecord")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return graph, schema, spec, root


@pytest.mark.parametrize("placement", ["worker", "topology", "sharded"])
@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_pipeline_equals_in_memory_oracle(mag, aggregation, placement):
    _, schema, spec, root = mag
    out = root / f"out_{aggregation}_{placement}"
    run_pipeline(
        schema,
        spec,
        f"{out}/samples@3",
        "--edge_aggregation_method",
        aggregation,
        "--seed",
        "7",
        "--graph_placement",
        placement,
    )
    got = read_records(f"{out}/samples-*-of-00003")
    assert len(glob.glob(f"{out}/samples-*")) == 3
    expected = oracle_records(schema, spec, aggregation, seed=7)
    assert len(expected) == 150
    assert sorted(got) == sorted(expected)


def test_output_parses_with_tfgnn_and_schema_is_written(mag):
    _, schema, spec, root = mag
    out = root / "out_parse"
    run_pipeline(schema, spec, f"{out}/samples.tfrecord")
    assert sorted(os.listdir(out)) == [
        ".beam_graph_manifest.json",
        "run_summary.json",
        "samples.tfrecord",
        "schema.pbtxt",
    ]
    records = read_records(f"{out}/samples.tfrecord")
    out_schema = tfgnn.read_schema(str(out / "schema.pbtxt"))
    graph_spec = tfgnn.create_graph_spec_from_schema_pb(out_schema)
    graphs = tfgnn.parse_example(graph_spec, tf.constant(records[:20]))
    seed_ids = graphs.context["seed_id"].numpy().reshape(-1)
    paper_ids = graphs.node_sets["paper"]["#id"]
    # The seed is node 0 of the paper node set in every record.
    assert [ids[0] for ids in paper_ids.to_list()] == list(seed_ids)
    assert set(graphs.edge_sets) == {"cites", "writes", "written", "affiliated_with", "has_topic"}


def test_worker_count_and_input_sharding_do_not_change_records(mag, tmp_path):
    graph, schema, spec, _ = mag
    run_pipeline(
        schema, spec, f"{tmp_path}/one/samples@2", "--seed", "5", "--graph_placement", "sharded"
    )
    # Same graph written as 3 CSV shards per table, sampled by 2 worker processes.
    csv_schema = synthetic.write_graph(graph, str(tmp_path / "csv"), fmt="csv", num_shards=3)
    run_pipeline(
        csv_schema,
        spec,
        f"{tmp_path}/two/samples@5",
        "--seed",
        "5",
        "--num_shards",
        "7",
        "--num_buckets",
        "3",
        "--direct_running_mode=multi_processing",
        "--direct_num_workers=2",
        "--graph_placement",
        "worker",
    )
    one = read_records(f"{tmp_path}/one/samples-*")
    two = read_records(f"{tmp_path}/two/samples-*")
    assert len(one) == 150
    assert sorted(one) == sorted(two)


def test_seed_changes_samples(mag, tmp_path):
    _, schema, spec, _ = mag
    a = oracle_records(schema, spec, seed=1)
    b = oracle_records(schema, spec, seed=2)
    assert len(a) == len(b) == 150
    assert sorted(a) != sorted(b)


def test_input_seeds_duplicates_give_one_subgraph_each(mag, tmp_path):
    _, schema, spec, _ = mag
    seeds = pa.table({"#id": pa.array([b"p3", b"p7", b"p3", b"p3"], pa.binary())})
    seeds_path = str(tmp_path / "seeds" / "seeds.csv")
    write_table(seeds_path, seeds, "csv", {})
    run_pipeline(schema, spec, f"{tmp_path}/out/s@1", "--input_seeds", seeds_path)
    records = read_records(f"{tmp_path}/out/s-*")
    specs = encode_specs(load_graph(schema).schema)
    decoded = [decode_subgraph(r, specs) for r in records]
    assert sorted(s.sample_id for s in decoded) == [b"p3", b"p3:1", b"p3:2", b"p7"]
    assert sorted(s.seed_id for s in decoded) == [b"p3", b"p3", b"p3", b"p7"]
    for s in decoded:
        assert s.node_sets["paper"].ids[0] == s.seed_id
    expected = oracle_records(schema, spec, input_seeds=seeds_path)
    assert sorted(records) == sorted(expected)


@pytest.mark.parametrize("placement", ["worker", "topology", "sharded"])
def test_edges_with_a_missing_endpoint_are_dropped_the_same_way(tmp_path, placement):
    graph = tmp_path / "graph"  # the output goes beside the input folder, not inside
    graph.mkdir()
    (graph / "graph_schema.pbtxt").write_text(
        'node_sets { key: "n" value { features { key: "x" value { dtype: DT_INT64 } }'
        ' metadata { filename: "n.csv" } } }\n'
        'edge_sets { key: "e" value { source: "n" target: "n" metadata { filename: "e.csv" } } }\n'
    )
    (graph / "n.csv").write_text("#id,x\na,1\nb,2\nc,3\n")
    # The ghosts are in no node table: its edges must not take a sample slot from real ones.
    ghosts = "".join(f"{n},ghost{i}\n" for n in "abc" for i in range(4))
    (graph / "e.csv").write_text("#source,#target\na,b\nghost0,c\nb,c\nc,a\n" + ghosts)
    (graph / "spec.pbtxt").write_text(
        'seed_op { op_name: "s" node_set_name: "n" }\n'
        'sampling_ops { op_name: "h1" input_op_names: "s" edge_set_name: "e" sample_size: 1'
        " strategy: RANDOM_UNIFORM }\n"
        'sampling_ops { op_name: "h2" input_op_names: "h1" edge_set_name: "e" sample_size: 1'
        " strategy: RANDOM_UNIFORM }\n"
    )
    schema, spec = str(graph / "graph_schema.pbtxt"), str(graph / "spec.pbtxt")
    got = read_records(run_and_glob(schema, spec, tmp_path / "out", "--graph_placement", placement))
    assert sorted(got) == sorted(oracle_records(schema, spec))
    specs = encode_specs(load_graph(schema).schema)
    for record in got:
        subgraph = decode_subgraph(record, specs)
        ids = list(subgraph.node_sets["n"].ids)
        edges = subgraph.edge_sets["e"]
        pairs = {(ids[s], ids[t]) for s, t in zip(edges.source, edges.target, strict=True)}
        assert not any(i.startswith(b"ghost") for i in ids)
        # Each node has exactly one real out-edge, so with sample_size 1 it is always taken.
        expected = {b"a": {(b"a", b"b"), (b"b", b"c")}, b"b": {(b"b", b"c"), (b"c", b"a")},
                    b"c": {(b"c", b"a"), (b"a", b"b")}}[ids[0]]  # fmt: skip
        assert pairs == expected


def run_and_glob(schema, spec, out, *extra):
    run_pipeline(schema, spec, f"{out}/samples@1", *extra)
    return f"{out}/samples-*"
