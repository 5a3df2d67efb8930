"""Golden tests: small hand-made graphs whose sampled subgraphs are fully determined.

Every sample_size is at least the out-degree it meets (or the strategy is TOP_K with
distinct weights, or RANDOM_WEIGHTED with k >= the number of positive weights), so the
expected subgraphs below are computed by hand from the contract, never by the sampler:

  * edge aggregation keeps exactly the traversed edges;
  * node aggregation keeps every edge of every edge set whose endpoints are both present;
  * the seed is node 0 of its node set, nodes and edges are never duplicated, parallel
    input edges are distinct edges, features are the input rows' values.

Graphs are written with `write_table` (CSV, TFRecord, Parquet) and sampled both by the
in-memory sampler (records encoded and decoded again) and by the Beam CLI.
"""

from __future__ import annotations

import collections
import glob
import os

import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_gnn.proto import graph_schema_pb2

from pipelines import sample as sample_cli
from sampler.features import FeatureSpec
from sampler.io.writers import write_table
from sampler.sample import in_memory
from sampler.sample.adjacency import make_seeds
from sampler.sample.encode import decode_subgraph, encode_specs, output_schema
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from tests.encode_oracle import encode_subgraph

FORMATS = ["csv", "tfrecord", "parquet"]


# --------------------------------------------------------------------------- helpers


def write(directory, name: str, fmt: str, columns: dict, specs: dict[str, FeatureSpec]) -> None:
    """Writes one table `<name>.<fmt>` from plain Python columns (ids given as str)."""
    arrays = {}
    for column, values in columns.items():
        if column.startswith("#"):
            arrays[column] = pa.array([v.encode() for v in values], pa.binary())
        else:
            spec = specs[column]
            if spec.kind == "bytes":
                values = [[x.encode() for x in v] if spec.shape else v.encode() for v in values]
            arrays[column] = pa.array(values, spec.arrow_type)
    write_table(os.path.join(directory, f"{name}.{fmt}"), pa.table(arrays), fmt, specs)


def write_text(path, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return str(path)


def to_python(value):
    if isinstance(value, np.ndarray):
        return tuple(to_python(v) for v in value.tolist())
    if isinstance(value, bytes):
        return value.decode()
    if isinstance(value, np.generic):
        return value.item()
    return value


def summarize(subgraph, schema):
    """(nodes, edges, node feature rows) of a decoded subgraph, as plain Python values.

    nodes: node set -> list of ids in output order.
    edges: edge set -> sorted list of (source id, target id, *features sorted by name).
    rows:  node set -> list of {feature: value} in output order.
    """
    nodes = {name: [to_python(i) for i in rows.ids] for name, rows in subgraph.node_sets.items()}
    rows = {
        name: [
            {f: to_python(col[i]) for f, col in node_rows.features.items()}
            for i in range(len(node_rows.ids))
        ]
        for name, node_rows in subgraph.node_sets.items()
    }
    edges = {}
    for name, edge_rows in subgraph.edge_sets.items():
        es = schema.edge_sets[name]
        src_ids, dst_ids = nodes[es.source], nodes[es.target]
        names = sorted(edge_rows.features)
        edges[name] = sorted(
            (
                src_ids[int(s)],
                dst_ids[int(t)],
                *(to_python(edge_rows.features[f][j]) for f in names),
            )
            for j, (s, t) in enumerate(zip(edge_rows.source, edge_rows.target, strict=True))
        )
    return nodes, edges, rows


def sample_in_memory(schema_path, spec_path, aggregation, seed_ids, seed=0):
    """{sample_id: decoded Subgraph} from the in-memory sampler, through encode/decode."""
    graph = load_graph(str(schema_path))
    plan = make_plan(graph, load_sampling_spec(str(spec_path)), aggregation)
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(np.array([s.encode() for s in seed_ids], dtype=object))
    specs = encode_specs(output_schema(graph.schema))
    out = {}
    for subgraph in in_memory.sample_in_memory(
        graph, plan, mem, seeds, Randomness(seed), collections.Counter()
    ):
        decoded = decode_subgraph(encode_subgraph(subgraph, specs), specs)
        assert decoded.sample_id.decode() not in out, "two subgraphs with one sample id"
        out[decoded.sample_id.decode()] = decoded
    return out, graph.schema


def sample_cli_run(tmp_path, schema_path, spec_path, aggregation, seed_ids=None, seed=0):
    """{sample_id: decoded Subgraph} from `python -m pipelines.sample` (Beam, local runner)."""
    # Beside the input folder, not inside it (the CLI refuses that).
    out_dir = tmp_path.with_name(f"{tmp_path.name}-out-{aggregation}-{seed}-{seed_ids is None}")
    argv = [
        "--graph_schema",
        str(schema_path),
        "--sampling_spec",
        str(spec_path),
        "--output_samples",
        str(out_dir / "samples@2"),
        "--edge_aggregation_method",
        aggregation,
        "--seed",
        str(seed),
        "--num_shards",
        "3",
        "--num_buckets",
        "2",
    ]
    if seed_ids is not None:
        seeds_path = tmp_path / f"seeds-{aggregation}-{seed}.csv"
        write(tmp_path, seeds_path.stem, "csv", {"#id": seed_ids}, {})
        argv += ["--input_seeds", str(seeds_path)]
    assert sample_cli.main(argv) == 0
    files = sorted(glob.glob(str(out_dir / "samples-*-of-00002")))
    assert len(files) == 2, os.listdir(out_dir)
    schema_file = out_dir / "schema.pbtxt"
    out_schema = text_format.Parse(schema_file.read_text(), graph_schema_pb2.GraphSchema())
    specs = encode_specs(out_schema)
    out = {}
    for record in tf.data.TFRecordDataset(files).as_numpy_iterator():
        decoded = decode_subgraph(record, specs)
        assert decoded.sample_id.decode() not in out, "two subgraphs with one sample id"
        out[decoded.sample_id.decode()] = decoded
    return out, out_schema


def check(result, schema, seed_set, expected_seed_of, expected, node_features):
    """Compares decoded subgraphs with hand-written expectations.

    expected: sample id -> (nodes: {set: ids}, edges: {set: [(src, dst, *features)]}).
    Node sets / edge sets left out of an expectation must be empty.
    """
    assert sorted(result) == sorted(expected)
    for sample_id, (exp_nodes, exp_edges) in expected.items():
        subgraph = result[sample_id]
        seed_id = expected_seed_of[sample_id]
        assert subgraph.seed_id.decode() == seed_id, sample_id
        nodes, edges, rows = summarize(subgraph, schema)
        assert set(nodes) == set(schema.node_sets)
        assert set(edges) == set(schema.edge_sets)
        assert nodes[seed_set][0] == seed_id, (sample_id, nodes[seed_set])
        for name in schema.node_sets:
            got = nodes[name]
            assert len(got) == len(set(got)), (sample_id, name, got)
            assert sorted(got) == sorted(exp_nodes.get(name, [])), (sample_id, name)
            for node_id, row in zip(got, rows[name], strict=True):
                assert row == node_features.get(name, {}).get(node_id, {}), (name, node_id)
        for name in schema.edge_sets:
            assert edges[name] == sorted(exp_edges.get(name, [])), (sample_id, name)


# --------------------------------------------------------------------------- (a) homogeneous

V_SPECS = {
    "label": FeatureSpec("label", "bytes", ()),
    "score": FeatureSpec("score", "float", ()),
    "tags": FeatureSpec("tags", "int", (2,)),
}
V_ROWS = {
    "A": {"label": "alpha", "score": 0.5, "tags": (1, 2)},
    "B": {"label": "beta", "score": 1.5, "tags": (3, 4)},
    "C": {"label": 'gamma, "quoted"', "score": -2.0, "tags": (5, 6)},
    "D": {"label": "délta", "score": 4.25, "tags": (7, 8)},
    "E": {"label": "eps", "score": 0.0, "tags": (9, -10)},
    "F": {"label": "phi", "score": 8.0, "tags": (11, 12)},
    "G": {"label": "gee", "score": -0.75, "tags": (13, 14)},
}
# (source, target, w). Parallel edges are distinct edges: A->B twice with different
# features, F->G twice as identical rows.
E_ROWS = [
    ("A", "B", 1.0),
    ("A", "B", 2.0),
    ("A", "C", 3.0),
    ("B", "C", 4.0),
    ("B", "D", 5.0),
    ("C", "A", 6.0),
    ("C", "E", 7.0),
    ("D", "F", 8.0),
    ("D", "B", 9.0),
    ("E", "E", 10.0),
    ("F", "G", 11.0),
    ("F", "G", 11.0),
]
# Out-degrees: A 3, B 2, C 2, D 2, E 1, F 2, G 0; both hops have sample_size 3.
HOMOGENEOUS_SCHEMA = """
node_sets {{
  key: "v"
  value {{
    features {{ key: "label" value {{ dtype: DT_STRING }} }}
    features {{ key: "score" value {{ dtype: DT_FLOAT }} }}
    features {{ key: "tags" value {{ dtype: DT_INT64 shape {{ dim {{ size: 2 }} }} }} }}
    metadata {{ filename: "v.{fmt}" }}
  }}
}}
edge_sets {{
  key: "e"
  value {{
    source: "v"
    target: "v"
    features {{ key: "w" value {{ dtype: DT_FLOAT }} }}
    metadata {{ filename: "e.{fmt}" }}
  }}
}}
"""
HOMOGENEOUS_SPEC = """
seed_op { op_name: "seed" node_set_name: "v" }
sampling_ops {
  op_name: "hop1" input_op_names: "seed" edge_set_name: "e" sample_size: 3
  strategy: RANDOM_UNIFORM
}
sampling_ops {
  op_name: "hop2" input_op_names: "hop1" edge_set_name: "e" sample_size: 3
  strategy: RANDOM_UNIFORM
}
"""


def edges_of(*names: str) -> list[tuple]:
    """E_ROWS selected by 'A>B:1' (source, target, w) labels."""
    out = []
    for label in names:
        pair, w = label.split(":")
        src, dst = pair.split(">")
        row = (src, dst, float(w))
        assert row in E_ROWS, label
        out.append(row)
    return out


# Hand-computed. hop1 samples from the seed, hop2 from hop1's nodes (not the seed).
HOMOGENEOUS_EDGE = {
    # hop1 A: A>B:1 A>B:2 A>C:3 -> {B, C}; hop2: B>C B>D C>A C>E.
    "A": ("ABCDE", ["A>B:1", "A>B:2", "A>C:3", "B>C:4", "B>D:5", "C>A:6", "C>E:7"]),
    # hop1 B: B>C B>D -> {C, D}; hop2: C>A C>E D>F D>B.
    "B": ("ABCDEF", ["B>C:4", "B>D:5", "C>A:6", "C>E:7", "D>F:8", "D>B:9"]),
    # hop1 C: C>A C>E -> {A, E}; hop2: A>B A>B A>C E>E.
    "C": ("ABCE", ["C>A:6", "C>E:7", "A>B:1", "A>B:2", "A>C:3", "E>E:10"]),
    # hop1 D: D>F D>B -> {F, B}; hop2: F>G B>C B>D.
    "D": ("BCDFG", ["D>F:8", "D>B:9", "F>G:11", "F>G:11", "B>C:4", "B>D:5"]),
    # hop1 and hop2 both traverse the self-loop E>E: it is written once.
    "E": ("E", ["E>E:10"]),
    "F": ("FG", ["F>G:11", "F>G:11"]),
    "G": ("G", []),
}
# Node aggregation: same nodes, every input edge with both endpoints among them.
HOMOGENEOUS_NODE = {
    "A": (
        "ABCDE",
        ["A>B:1", "A>B:2", "A>C:3", "B>C:4", "B>D:5", "C>A:6", "C>E:7", "D>B:9", "E>E:10"],
    ),
    "B": (
        "ABCDEF",
        ["A>B:1", "A>B:2", "A>C:3", "B>C:4", "B>D:5", "C>A:6", "C>E:7", "D>F:8", "D>B:9", "E>E:10"],
    ),
    "C": ("ABCE", ["A>B:1", "A>B:2", "A>C:3", "B>C:4", "C>A:6", "C>E:7", "E>E:10"]),
    "D": ("BCDFG", ["B>C:4", "B>D:5", "D>F:8", "D>B:9", "F>G:11", "F>G:11"]),
    "E": ("E", ["E>E:10"]),
    "F": ("FG", ["F>G:11", "F>G:11"]),
    "G": ("G", []),
}
HOMOGENEOUS = {"edge": HOMOGENEOUS_EDGE, "node": HOMOGENEOUS_NODE}
# Repeated seeds: one subgraph per occurrence, sample ids X, X:1, X:2.
SEED_LIST = ["C", "A", "G", "A", "B", "D", "E", "F", "A"]
SAMPLE_SEED = {"A": "A", "A:1": "A", "A:2": "A", **{x: x for x in "BCDEFG"}}


def homogeneous_expected(aggregation: str, sample_ids) -> dict:
    table = HOMOGENEOUS[aggregation]
    return {
        sid: ({"v": list(table[SAMPLE_SEED[sid]][0])}, {"e": edges_of(*table[SAMPLE_SEED[sid]][1])})
        for sid in sample_ids
    }


def write_homogeneous(directory, fmt: str):
    write(
        directory,
        "v",
        fmt,
        {"#id": list(V_ROWS), **{f: [V_ROWS[i][f] for i in V_ROWS] for f in V_SPECS}},
        V_SPECS,
    )
    src, dst, w = zip(*E_ROWS, strict=True)
    write(
        directory,
        "e",
        fmt,
        {"#source": src, "#target": dst, "w": w},
        {"w": FeatureSpec("w", "float", ())},
    )
    schema = write_text(directory / "graph_schema.pbtxt", HOMOGENEOUS_SCHEMA.format(fmt=fmt))
    spec = write_text(directory / "spec.pbtxt", HOMOGENEOUS_SPEC)
    return schema, spec


def test_golden_expectations_are_consistent():
    """Guards the hand-written tables: edge-aggregation edges are a subset of node's."""
    for seed_id, (nodes, edges) in HOMOGENEOUS_EDGE.items():
        node_nodes, node_edges = HOMOGENEOUS_NODE[seed_id]
        assert nodes == node_nodes
        assert set(edges) <= set(node_edges)
        induced = [f"{s}>{t}:{w:g}" for s, t, w in E_ROWS if s in nodes and t in nodes]
        assert sorted(induced) == sorted(node_edges), seed_id


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_homogeneous_golden_in_memory(tmp_path, fmt, aggregation):
    schema, spec = write_homogeneous(tmp_path, fmt)
    for seed in (0, 987654321):
        result, schema_pb = sample_in_memory(schema, spec, aggregation, SEED_LIST, seed)
        expected = homogeneous_expected(aggregation, SAMPLE_SEED)
        check(result, schema_pb, "v", SAMPLE_SEED, expected, {"v": V_ROWS})


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_homogeneous_golden_cli(tmp_path, aggregation):
    schema, spec = write_homogeneous(tmp_path, "csv")
    result, schema_pb = sample_cli_run(tmp_path, schema, spec, aggregation, SEED_LIST, seed=3)
    expected = homogeneous_expected(aggregation, SAMPLE_SEED)
    check(result, schema_pb, "v", SAMPLE_SEED, expected, {"v": V_ROWS})
    # The output schema describes the records: #id added, filenames cleared.
    assert "#id" in schema_pb.node_sets["v"].features
    assert not schema_pb.node_sets["v"].metadata.filename


def test_homogeneous_golden_cli_default_seeds_are_every_node(tmp_path):
    schema, spec = write_homogeneous(tmp_path, "parquet")
    result, schema_pb = sample_cli_run(tmp_path, schema, spec, "edge", seed_ids=None)
    ids = list(V_ROWS)
    check(
        result,
        schema_pb,
        "v",
        {x: x for x in ids},
        homogeneous_expected("edge", ids),
        {"v": V_ROWS},
    )


# --------------------------------------------------------------------------- (b) heterogeneous

USER_ROWS = {"u1": {"age": 30}, "u2": {"age": 41}, "u3": {"age": 25}, "u4": {"age": 50}}
ITEM_ROWS = {
    "i1": {"price": 9.5, "title": "lamp"},
    "i2": {"price": 20.0, "title": "desk, oak"},
    "i3": {"price": 3.25, "title": "pen"},
    "i4": {"price": 100.0, "title": "sofa"},
}
SHOPS = ["s1", "s2"]  # a stored node set without features
# `tag` is latent: its ids only appear in the `tagged` edge table.
# follows: (source, target, note); buys: (source, target, dims, qty), features by name.
FOLLOWS = [
    ("u1", "u2", "old friend"),
    ("u2", "u1", ""),
    ("u2", "u3", "work"),
    ("u3", "u3", "self"),
    ("u4", "u1", "x;y"),
]
BUYS = [
    ("u1", "i1", (0.5, 1.0), 1),
    ("u2", "i2", (2.0, -1.0), 2),
    ("u2", "i3", (0.0, 0.25), 5),
    ("u3", "i3", (1.5, 1.5), 1),
    ("u4", "i4", (-3.0, 8.0), 7),
    ("u4", "i1", (4.0, 0.125), 3),
]
TAGGED = [("i1", "t1"), ("i1", "t2"), ("i2", "t2"), ("i3", "t3"), ("i4", "t1")]
SOLD_BY = [("i1", "s1"), ("i2", "s1"), ("i3", "s2"), ("i4", "s2")]
# `likes` is used by no op: only node aggregation writes its (induced) edges.
LIKES = [("u1", "i2"), ("u3", "i1"), ("u2", "i4"), ("u4", "i4")]
HETERO_FEATURES = {"user": USER_ROWS, "item": ITEM_ROWS}

HETERO_SCHEMA = """
node_sets {{
  key: "user"
  value {{
    features {{ key: "age" value {{ dtype: DT_INT64 }} }}
    metadata {{ filename: "users.{fmt}" }}
  }}
}}
node_sets {{
  key: "item"
  value {{
    features {{ key: "price" value {{ dtype: DT_FLOAT }} }}
    features {{ key: "title" value {{ dtype: DT_STRING }} }}
    metadata {{ filename: "items.{fmt}" }}
  }}
}}
node_sets {{ key: "tag" value {{ description: "latent" }} }}
node_sets {{ key: "shop" value {{ metadata {{ filename: "shops.{fmt}" }} }} }}
edge_sets {{
  key: "follows"
  value {{
    source: "user"
    target: "user"
    features {{ key: "note" value {{ dtype: DT_STRING }} }}
    metadata {{ filename: "follows.{fmt}" }}
  }}
}}
edge_sets {{
  key: "buys"
  value {{
    source: "user"
    target: "item"
    features {{ key: "dims" value {{ dtype: DT_FLOAT shape {{ dim {{ size: 2 }} }} }} }}
    features {{ key: "qty" value {{ dtype: DT_INT64 }} }}
    metadata {{ filename: "buys.{fmt}" }}
  }}
}}
edge_sets {{
  key: "bought_by"
  value {{
    source: "item"
    target: "user"
    features {{ key: "qty" value {{ dtype: DT_INT64 }} }}
    metadata {{
      filename: "buys.{fmt}"
      extra {{ key: "edge_type" value: "reversed" }}
    }}
  }}
}}
edge_sets {{
  key: "tagged"
  value {{ source: "item" target: "tag" metadata {{ filename: "tagged.{fmt}" }} }}
}}
edge_sets {{
  key: "sold_by"
  value {{ source: "item" target: "shop" metadata {{ filename: "sold_by.{fmt}" }} }}
}}
edge_sets {{
  key: "likes"
  value {{ source: "user" target: "item" metadata {{ filename: "likes.{fmt}" }} }}
}}
"""
HETERO_SPEC = """
seed_op { op_name: "seed" node_set_name: "user" }
sampling_ops {
  op_name: "friends" input_op_names: "seed" edge_set_name: "follows" sample_size: 5
  strategy: RANDOM_UNIFORM
}
sampling_ops {
  op_name: "items" input_op_names: ["seed", "friends"] edge_set_name: "buys" sample_size: 5
  strategy: RANDOM_UNIFORM
}
sampling_ops {
  op_name: "buyers" input_op_names: "items" edge_set_name: "bought_by" sample_size: 5
  strategy: RANDOM_UNIFORM
}
sampling_ops {
  op_name: "tags" input_op_names: "items" edge_set_name: "tagged" sample_size: 5
  strategy: RANDOM_UNIFORM
}
sampling_ops {
  op_name: "shops" input_op_names: "items" edge_set_name: "sold_by" sample_size: 5
  strategy: RANDOM_UNIFORM
}
"""


def write_hetero(directory, fmt: str):
    age = {"age": FeatureSpec("age", "int", ())}
    item_specs = {
        "price": FeatureSpec("price", "float", ()),
        "title": FeatureSpec("title", "bytes", ()),
    }
    buys_specs = {
        "dims": FeatureSpec("dims", "float", (2,)),
        "qty": FeatureSpec("qty", "int", ()),
    }
    write(
        directory,
        "users",
        fmt,
        {"#id": list(USER_ROWS), "age": [r["age"] for r in USER_ROWS.values()]},
        age,
    )
    write(
        directory,
        "items",
        fmt,
        {"#id": list(ITEM_ROWS), **{f: [r[f] for r in ITEM_ROWS.values()] for f in item_specs}},
        item_specs,
    )
    write(directory, "shops", fmt, {"#id": SHOPS}, {})
    for name, rows, specs in (
        ("follows", FOLLOWS, {"note": FeatureSpec("note", "bytes", ())}),
        ("buys", BUYS, buys_specs),
        ("tagged", TAGGED, {}),
        ("sold_by", SOLD_BY, {}),
        ("likes", LIKES, {}),
    ):
        columns = list(zip(*rows, strict=True))
        data = {"#source": columns[0], "#target": columns[1]}
        for position, feature in enumerate(sorted(specs), start=2):
            data[feature] = columns[position]
        write(directory, name, fmt, data, specs)
    schema = write_text(directory / "graph_schema.pbtxt", HETERO_SCHEMA.format(fmt=fmt))
    spec = write_text(directory / "spec.pbtxt", HETERO_SPEC)
    return schema, spec


def rev(rows):
    """bought_by rows: buys rows swapped; bought_by declares only `qty`, not `dims`."""
    return [(t, s, qty) for s, t, _, qty in rows]


def buys(*pairs):
    out = [row for row in BUYS if f"{row[0]}>{row[1]}" in pairs]
    assert len(out) == len(pairs), pairs
    return out


def follows(*pairs):
    out = [row for row in FOLLOWS if f"{row[0]}>{row[1]}" in pairs]
    assert len(out) == len(pairs), pairs
    return out


# Hand-computed: friends = follows from the seed; items = buys from seed + friends (union);
# buyers = bought_by (reversed buys) from the items; tags and shops from the items.
HETERO_EDGE = {
    "u1": (
        {
            "user": ["u1", "u2", "u3", "u4"],
            "item": ["i1", "i2", "i3"],
            "tag": ["t1", "t2", "t3"],
            "shop": ["s1", "s2"],
        },
        {
            "follows": follows("u1>u2"),
            "buys": buys("u1>i1", "u2>i2", "u2>i3"),
            "bought_by": rev(buys("u1>i1", "u4>i1", "u2>i2", "u2>i3", "u3>i3")),
            "tagged": [("i1", "t1"), ("i1", "t2"), ("i2", "t2"), ("i3", "t3")],
            "sold_by": [("i1", "s1"), ("i2", "s1"), ("i3", "s2")],
        },
    ),
    # The self-loop u3>u3 makes u3 an output of both `seed` and `friends`: one frontier node.
    "u3": (
        {"user": ["u3", "u2"], "item": ["i3"], "tag": ["t3"], "shop": ["s2"]},
        {
            "follows": follows("u3>u3"),
            "buys": buys("u3>i3"),
            "bought_by": rev(buys("u2>i3", "u3>i3")),
            "tagged": [("i3", "t3")],
            "sold_by": [("i3", "s2")],
        },
    ),
    # u1 is reached by `friends` and again by `buyers`; i1 from u4 and from u1.
    "u4": (
        {"user": ["u4", "u1"], "item": ["i4", "i1"], "tag": ["t1", "t2"], "shop": ["s1", "s2"]},
        {
            "follows": follows("u4>u1"),
            "buys": buys("u4>i4", "u4>i1", "u1>i1"),
            "bought_by": rev(buys("u1>i1", "u4>i1", "u4>i4")),
            "tagged": [("i1", "t1"), ("i1", "t2"), ("i4", "t1")],
            "sold_by": [("i1", "s1"), ("i4", "s2")],
        },
    ),
}
HETERO_NODE = {
    "u1": (
        HETERO_EDGE["u1"][0],
        {
            "follows": FOLLOWS,  # all five: every user is present
            "buys": buys("u1>i1", "u2>i2", "u2>i3", "u3>i3", "u4>i1"),
            "bought_by": rev(buys("u1>i1", "u2>i2", "u2>i3", "u3>i3", "u4>i1")),
            "tagged": [("i1", "t1"), ("i1", "t2"), ("i2", "t2"), ("i3", "t3")],
            "sold_by": [("i1", "s1"), ("i2", "s1"), ("i3", "s2")],
            "likes": [("u1", "i2"), ("u3", "i1")],
        },
    ),
    "u3": (
        HETERO_EDGE["u3"][0],
        {
            "follows": follows("u2>u3", "u3>u3"),
            "buys": buys("u2>i3", "u3>i3"),
            "bought_by": rev(buys("u2>i3", "u3>i3")),
            "tagged": [("i3", "t3")],
            "sold_by": [("i3", "s2")],
        },
    ),
    "u4": (
        HETERO_EDGE["u4"][0],
        {
            "follows": follows("u4>u1"),
            "buys": buys("u1>i1", "u4>i4", "u4>i1"),
            "bought_by": rev(buys("u1>i1", "u4>i4", "u4>i1")),
            "tagged": [("i1", "t1"), ("i1", "t2"), ("i4", "t1")],
            "sold_by": [("i1", "s1"), ("i4", "s2")],
            "likes": [("u4", "i4")],
        },
    ),
}
HETERO = {"edge": HETERO_EDGE, "node": HETERO_NODE}
HETERO_SEEDS = ["u4", "u1", "u3"]


def test_hetero_expectations_are_consistent():
    for seed_id, (nodes, edges) in HETERO_NODE.items():
        assert nodes == HETERO_EDGE[seed_id][0]
        for name, rows in HETERO_EDGE[seed_id][1].items():
            assert set(rows) <= set(edges[name]), (seed_id, name)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_hetero_golden_in_memory(tmp_path, fmt, aggregation):
    schema, spec = write_hetero(tmp_path, fmt)
    result, schema_pb = sample_in_memory(schema, spec, aggregation, HETERO_SEEDS, seed=11)
    check(
        result,
        schema_pb,
        "user",
        {s: s for s in HETERO_SEEDS},
        HETERO[aggregation],
        HETERO_FEATURES,
    )


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_hetero_golden_cli(tmp_path, aggregation):
    schema, spec = write_hetero(tmp_path, "csv")
    result, schema_pb = sample_cli_run(tmp_path, schema, spec, aggregation, HETERO_SEEDS, seed=5)
    check(
        result,
        schema_pb,
        "user",
        {s: s for s in HETERO_SEEDS},
        HETERO[aggregation],
        HETERO_FEATURES,
    )
    # Every node set carries #id in the output schema, latent and feature-less ones too.
    for name in ("user", "item", "tag", "shop"):
        assert "#id" in schema_pb.node_sets[name].features, name
    extra = schema_pb.edge_sets["bought_by"].metadata.extra
    assert [(kv.key, kv.value) for kv in extra] == [("edge_type", "reversed")]


# --------------------------------------------------------------------------- (c) TOP_K

# (source, target, weight): distinct weights per source, one negative, one zero.
LINKS = [
    ("h", "a", 0.5),
    ("h", "b", 2.0),
    ("h", "c", -1.0),
    ("h", "d", 3.5),
    ("h", "e", 1.0),
    ("h", "f", 0.25),
    ("h", "g", 0.0),
    ("a", "x", 1.0),
    ("a", "y", 2.0),
    ("b", "x", 5.0),
    ("b", "z", 4.0),
    ("b", "h", 0.125),
    ("d", "y", 0.75),
    ("d", "z", 0.875),
    ("d", "h", 0.8125),
]
WEIGHTED_SCHEMA = """
node_sets { key: "n" value { } }
edge_sets {
  key: "links"
  value {
    source: "n"
    target: "n"
    features { key: "weight" value { dtype: DT_FLOAT } }
    metadata { filename: "links.%s" }
  }
}
"""
TOP_K_SPEC = """
seed_op { op_name: "seed" node_set_name: "n" }
sampling_ops {
  op_name: "top1" input_op_names: "seed" edge_set_name: "links" sample_size: 2 strategy: TOP_K
}
sampling_ops {
  op_name: "top2" input_op_names: "top1" edge_set_name: "links" sample_size: 1 strategy: TOP_K
}
"""
WEIGHTED_ALL_SPEC = """
seed_op { op_name: "seed" node_set_name: "n" }
sampling_ops {
  op_name: "w" input_op_names: "seed" edge_set_name: "links" sample_size: 10
  strategy: RANDOM_WEIGHTED
}
"""


def links(*pairs):
    out = [row for row in LINKS if f"{row[0]}>{row[1]}" in pairs]
    assert len(out) == len(pairs), pairs
    return out


def write_links(directory, fmt: str, rows=LINKS) -> str:
    src, dst, w = zip(*rows, strict=True)
    weight = {"weight": FeatureSpec("weight", "float", ())}
    write(directory, "links", fmt, {"#source": src, "#target": dst, "weight": w}, weight)
    return write_text(directory / "graph_schema.pbtxt", WEIGHTED_SCHEMA % fmt)


TOP_K_EDGE = {
    # top1 from h: d (3.5), b (2.0); top2 from {d, b}: d>z (0.875), b>x (5.0).
    "h": ("hdbzx", links("h>d", "h>b", "d>z", "b>x")),
    # top1 from a: both edges; top2 from {x, y}: no out-edges.
    "a": ("axy", links("a>x", "a>y")),
    # top1 from d: z (0.875), h (0.8125); top2 from {z, h}: h>d (3.5).
    "d": ("dzh", links("d>z", "d>h", "h>d")),
    "c": ("c", []),
}
TOP_K_NODE = {
    "h": ("hdbzx", links("h>d", "h>b", "d>z", "b>x", "b>z", "b>h", "d>h")),
    "a": ("axy", links("a>x", "a>y")),
    "d": ("dzh", links("d>z", "d>h", "h>d")),
    "c": ("c", []),
}


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_top_k_golden(tmp_path, fmt, aggregation):
    schema = write_links(tmp_path, fmt)
    spec = write_text(tmp_path / "spec.pbtxt", TOP_K_SPEC)
    table = TOP_K_EDGE if aggregation == "edge" else TOP_K_NODE
    expected = {s: ({"n": list(nodes)}, {"links": rows}) for s, (nodes, rows) in table.items()}
    for seed in (0, 42):
        result, schema_pb = sample_in_memory(schema, spec, aggregation, list(table), seed)
        check(result, schema_pb, "n", {s: s for s in table}, expected, {})


def test_random_weighted_takes_every_positive_weight_when_k_is_large(tmp_path):
    """k >= number of positive weights: all of them, never weight <= 0 (h>c, h>g)."""
    schema = write_links(tmp_path, "tfrecord")
    spec = write_text(tmp_path / "spec.pbtxt", WEIGHTED_ALL_SPEC)
    expected = {
        "h": ({"n": list("habdef")}, {"links": links("h>a", "h>b", "h>d", "h>e", "h>f")}),
        "d": ({"n": list("dyzh")}, {"links": links("d>y", "d>z", "d>h")}),
    }
    for seed in range(5):
        result, schema_pb = sample_in_memory(schema, spec, "edge", ["h", "d"], seed)
        check(result, schema_pb, "n", {"h": "h", "d": "d"}, expected, {})


def test_top_k_ties_do_not_depend_on_input_order_or_seed(tmp_path):
    """Ties are broken in a canonical order: the same edges whatever the row order."""
    rows = [("s", f"t{i}", 1.0) for i in range(6)] + [("s", "top", 2.0)]
    spec_text = TOP_K_SPEC.replace("sample_size: 2", "sample_size: 3")
    chosen = set()
    for trial, order in enumerate([rows, rows[::-1], rows[3:] + rows[:3]]):
        directory = tmp_path / f"order{trial}"
        directory.mkdir()
        schema = write_links(directory, "csv", order)
        spec = write_text(directory / "spec.pbtxt", spec_text)
        for seed in (0, 1):
            result, schema_pb = sample_in_memory(schema, spec, "edge", ["s"], seed)
            _, edges, _ = summarize(result["s"], schema_pb)
            got = edges["links"]
            assert len(got) == 3 and ("s", "top", 2.0) in got, got
            chosen.add(tuple(got))
    assert len(chosen) == 1, chosen


def test_top_k_golden_cli_latent_seed_set_default_seeds(tmp_path):
    """Without --input_seeds every node of the (latent) seed set is a seed."""
    schema = write_links(tmp_path, "csv")
    spec = write_text(tmp_path / "spec.pbtxt", TOP_K_SPEC)
    table = dict(TOP_K_EDGE)
    # top1 from b: x (5.0), z (4.0), not h (0.125); x and z have no out-edges.
    table["b"] = ("bxz", links("b>x", "b>z"))
    for node in "cefgxyz":
        table[node] = (node, [])
    expected = {s: ({"n": list(nodes)}, {"links": rows}) for s, (nodes, rows) in table.items()}
    result, schema_pb = sample_cli_run(tmp_path, schema, spec, "edge", seed_ids=None, seed=8)
    check(result, schema_pb, "n", {s: s for s in table}, expected, {})
