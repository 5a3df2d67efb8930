"""The protobuf encoder (tests/encode_oracle.py: the chunk encoder's oracle) and
sampler.sample.encode's specs and decoding, read back by real TF-GNN."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn
from google.protobuf import text_format
from tensorflow_gnn.proto import graph_schema_pb2

from sampler.errors import UserError
from sampler.sample.encode import decode_subgraph, encode_specs, output_schema
from sampler.sample.subgraph import EdgeSetRows, NodeSetRows, Subgraph
from tests.encode_oracle import encode_subgraph

SCHEMA = """
context { metadata { filename: "context.csv" cardinality: 1 } }
node_sets {
  key: "paper"
  value {
    features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 3 } } } }
    features { key: "year" value { dtype: DT_INT64 } }
    features { key: "counts" value { dtype: DT_INT32 shape { dim { size: 2 } } } }
    features { key: "big" value { dtype: DT_INT64 shape { dim { size: 2 } } } }
    features { key: "tags" value { dtype: DT_STRING shape { dim { size: 2 } } } }
    metadata {
      filename: "papers.parquet"
      cardinality: 1000
      extra { key: "owner" value: "team-a" }
    }
  }
}
node_sets {
  key: "author"
  value { metadata { filename: "authors.csv" } }
}
edge_sets {
  key: "writes"
  value {
    source: "author"
    target: "paper"
    features { key: "weight" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
    metadata { filename: "writes.csv" cardinality: 5000 }
  }
}
edge_sets {
  key: "cites"
  value { source: "paper" target: "paper" metadata { filename: "cites.csv" } }
}
edge_sets {
  key: "reviews"
  value {
    source: "paper"
    target: "author"
    features { key: "score" value { dtype: DT_FLOAT } }
    metadata { filename: "reviews.csv" }
  }
}
"""


def _schema(text: str = SCHEMA) -> graph_schema_pb2.GraphSchema:
    return text_format.Parse(text, graph_schema_pb2.GraphSchema())


def _objects(*values: bytes) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _full_subgraph() -> Subgraph:
    """Three papers, two authors; 'reviews' absent (an empty edge set)."""
    papers = NodeSetRows(
        ids=_objects(b"p2", b"p0", b"p7"),
        features={
            "feat": np.array([[0.5, 1.0, -2.0], [3.25, 0.0, 1e-3], [7.0, -8.5, 9.0]], np.float32),
            "year": np.array([2001, 1999, 2020], np.int64),
            "counts": np.array([[1, 2], [3, 4], [-5, 6]], np.int64),
            "big": np.array([[2**40, -(2**62)], [0, 2**63 - 1], [-1, 7]], np.int64),
            "tags": np.array([[b"ml", b"gnn"], [b"", b"x\x00y"], [b"db", b"\xff"]], dtype=object),
        },
    )
    authors = NodeSetRows(ids=_objects(b"a9", b"a1"), features={})
    writes = EdgeSetRows(
        source=np.array([0, 1, 1, 0], np.int64),
        target=np.array([0, 0, 2, 1], np.int64),
        features={"weight": np.array([[1, 2], [3, 4], [5, 6], [7, 8.5]], np.float32)},
    )
    cites = EdgeSetRows(
        source=np.array([0, 2], np.int64), target=np.array([1, 0], np.int64), features={}
    )
    return Subgraph(
        sample_id=b"sample-42",
        seed_id=b"p2",
        node_sets={"paper": papers, "author": authors},
        edge_sets={"writes": writes, "cites": cites},
    )


def _parse(schema, data: bytes) -> tfgnn.GraphTensor:
    spec = tfgnn.create_graph_spec_from_schema_pb(output_schema(schema))
    graph = tfgnn.parse_example(spec, tf.constant([data]))
    return graph.merge_batch_to_components()


def test_tfgnn_parses_every_value():
    schema = _schema()
    sg = _full_subgraph()
    graph = _parse(schema, encode_subgraph(sg, encode_specs(schema)))

    assert graph.context["seed_id"].numpy().tolist() == [b"p2"]
    assert graph.context["sample_id"].numpy().tolist() == [b"sample-42"]

    paper = graph.node_sets["paper"]
    assert paper.sizes.numpy().tolist() == [3]
    assert paper["#id"].numpy().tolist() == [b"p2", b"p0", b"p7"]
    for name, values in sg.node_sets["paper"].features.items():
        got = paper[name].numpy()
        assert got.shape == values.shape, name
        assert got.tolist() == values.tolist(), name
    assert paper["counts"].dtype == tf.int32
    author = graph.node_sets["author"]
    assert author.sizes.numpy().tolist() == [2]
    assert author["#id"].numpy().tolist() == [b"a9", b"a1"]
    assert set(author.features) == {"#id"}

    writes = graph.edge_sets["writes"]
    assert writes.sizes.numpy().tolist() == [4]
    assert writes.adjacency.source_name == "author"
    assert writes.adjacency.source.numpy().tolist() == [0, 1, 1, 0]
    assert writes.adjacency.target.numpy().tolist() == [0, 0, 2, 1]
    assert writes["weight"].numpy().tolist() == [[1, 2], [3, 4], [5, 6], [7, 8.5]]
    cites = graph.edge_sets["cites"]
    assert cites.sizes.numpy().tolist() == [2]
    assert cites.adjacency.source.numpy().tolist() == [0, 2]
    assert cites.adjacency.target.numpy().tolist() == [1, 0]
    assert dict(cites.features) == {}
    reviews = graph.edge_sets["reviews"]
    assert reviews.sizes.numpy().tolist() == [0]
    assert reviews.adjacency.source.numpy().tolist() == []
    assert reviews["score"].numpy().tolist() == []


def test_absent_and_empty_sets_are_written_with_size_zero():
    schema = _schema()
    specs = encode_specs(schema)
    # Only the seed author; 'paper' absent, 'reviews' present but with no edges.
    sg = Subgraph(
        sample_id=b"s2",
        seed_id=b"a1",
        node_sets={"author": NodeSetRows(_objects(b"a1"), {})},
        edge_sets={
            "reviews": EdgeSetRows(
                np.zeros(0, np.int64), np.zeros(0, np.int64), {"score": np.zeros(0, np.float32)}
            )
        },
    )
    data = encode_subgraph(sg, specs)
    example = tf.train.Example.FromString(data)
    keys = set(example.features.feature)
    assert {"nodes/paper.#size", "nodes/paper.#id", "nodes/paper.feat", "nodes/paper.tags"} <= keys
    assert {"edges/writes.#source", "edges/writes.weight", "edges/reviews.score"} <= keys
    assert example.features.feature["nodes/paper.tags"].HasField("bytes_list")
    assert example.features.feature["nodes/paper.feat"].HasField("float_list")

    graph = _parse(schema, data)
    assert graph.node_sets["paper"].sizes.numpy().tolist() == [0]
    assert graph.node_sets["paper"]["feat"].shape.as_list() == [0, 3]
    assert graph.node_sets["paper"]["tags"].shape.as_list() == [0, 2]
    assert graph.node_sets["author"]["#id"].numpy().tolist() == [b"a1"]
    for name in ("writes", "cites", "reviews"):
        assert graph.edge_sets[name].sizes.numpy().tolist() == [0], name
    assert graph.context["seed_id"].numpy().tolist() == [b"a1"]


def test_two_records_parse_as_a_batch():
    schema = _schema()
    specs = encode_specs(schema)
    first = encode_subgraph(_full_subgraph(), specs)
    second = encode_subgraph(
        Subgraph(b"s2", b"a1", {"author": NodeSetRows(_objects(b"a1"), {})}, {}), specs
    )
    spec = tfgnn.create_graph_spec_from_schema_pb(output_schema(schema))
    graph = tfgnn.parse_example(spec, tf.constant([first, second])).merge_batch_to_components()
    assert graph.node_sets["paper"].sizes.numpy().tolist() == [3, 0]
    assert graph.node_sets["author"].sizes.numpy().tolist() == [2, 1]
    assert graph.context["sample_id"].numpy().tolist() == [b"sample-42", b"s2"]


def test_decode_round_trip():
    schema = _schema()
    specs = encode_specs(schema)
    sg = _full_subgraph()
    data = encode_subgraph(sg, specs)
    back = decode_subgraph(data, specs)
    assert (back.sample_id, back.seed_id) == (sg.sample_id, sg.seed_id)
    assert set(back.node_sets) == {"paper", "author"}
    for name, rows in sg.node_sets.items():
        got = back.node_sets[name]
        assert got.ids.dtype == object
        assert got.ids.tolist() == rows.ids.tolist()
        assert set(got.features) == set(rows.features)
        for feature, values in rows.features.items():
            assert got.features[feature].shape == values.shape
            assert got.features[feature].tolist() == values.tolist()
    assert set(back.edge_sets) == {"writes", "cites", "reviews"}
    for name, edges in sg.edge_sets.items():
        got = back.edge_sets[name]
        assert got.source.tolist() == edges.source.tolist()
        assert got.target.tolist() == edges.target.tolist()
        assert set(got.features) == set(edges.features)
        for feature, values in edges.features.items():
            assert got.features[feature].tolist() == values.tolist()
    # The absent edge set comes back empty, with its feature.
    reviews = back.edge_sets["reviews"]
    assert len(reviews.source) == 0 and reviews.features["score"].shape == (0,)
    # Re-encoding the decoded subgraph gives the same bytes (output is deterministic).
    assert encode_subgraph(back, specs) == data
    assert encode_subgraph(_full_subgraph(), specs) == data


def test_float64_and_bool_inputs_are_converted():
    schema = _schema()
    specs = encode_specs(schema)
    sg = _full_subgraph()
    sg.edge_sets["writes"].features["weight"] = np.array([[1, 2], [3, 4], [5, 6], [7, 8.5]])
    sg.node_sets["paper"].features["year"] = np.array([True, False, True])
    back = decode_subgraph(encode_subgraph(sg, specs), specs)
    assert back.edge_sets["writes"].features["weight"].dtype == np.float32
    assert back.edge_sets["writes"].features["weight"][3].tolist() == [7, 8.5]
    assert back.node_sets["paper"].features["year"].tolist() == [1, 0, 1]


@pytest.mark.parametrize(
    "mutate, match",
    [
        (
            lambda sg: sg.node_sets["paper"].features.update(feat=np.zeros((3, 4), np.float32)),
            r"node set 'paper': feature 'feat' has shape \(3, 4\), expected \(3, 3\)",
        ),
        (
            lambda sg: sg.node_sets["paper"].features.update(year=np.zeros((3, 1), np.int64)),
            r"node set 'paper': feature 'year' has shape \(3, 1\), expected \(3,\)",
        ),
        (
            lambda sg: sg.node_sets["paper"].features.update(year=np.zeros(2, np.int64)),
            r"node set 'paper': feature 'year' has shape \(2,\), expected \(3,\)",
        ),
        (
            lambda sg: sg.node_sets["paper"].features.pop("tags"),
            r"node set 'paper': feature 'tags' is missing",
        ),
        (
            lambda sg: sg.node_sets["paper"].features.update(year=np.zeros(3, np.float32)),
            r"node set 'paper': feature 'year' has dtype float32",
        ),
        (
            lambda sg: sg.node_sets["paper"].features.update(
                tags=np.array([["a", "b"]] * 3, dtype=object)
            ),
            r"node set 'paper': feature 'tags' holds a non-bytes value",
        ),
        (
            lambda sg: sg.edge_sets["writes"].features.update(weight=np.zeros(4, np.float32)),
            r"edge set 'writes': feature 'weight' has shape \(4,\), expected \(4, 2\)",
        ),
        (
            lambda sg: sg.edge_sets["writes"].features.clear(),
            r"edge set 'writes': feature 'weight' is missing",
        ),
        (
            lambda sg: setattr(sg.edge_sets["cites"], "target", np.array([1, 3])),
            r"edge set 'cites': #target indices span \[1, 3\] but the node set has 3 nodes",
        ),
        (
            lambda sg: setattr(sg.edge_sets["writes"], "source", np.array([0, -1, 1, 0])),
            r"edge set 'writes': #source indices span \[-1, 1\]",
        ),
        (
            lambda sg: setattr(sg.edge_sets["cites"], "target", np.array([1])),
            r"edge set 'cites': #source \(2,\) and #target \(1,\)",
        ),
        (
            lambda sg: sg.node_sets.pop("paper"),
            r"edge set 'cites': #source indices span \[0, 2\] but the node set has 0 nodes",
        ),
        (
            lambda sg: sg.node_sets.update(venue=NodeSetRows(_objects(b"v"), {})),
            r"sets \['venue'\] not in schema",
        ),
        (
            lambda sg: setattr(sg.node_sets["author"], "ids", _objects("a9", "a1")),
            r"node set 'author': node ids must be bytes",
        ),
    ],
)
def test_encode_errors_name_set_and_feature(mutate, match):
    specs = encode_specs(_schema())
    sg = _full_subgraph()
    encode_subgraph(sg, specs)  # valid before the mutation
    mutate(sg)
    with pytest.raises(ValueError, match=match):
        encode_subgraph(sg, specs)


def test_decode_rejects_inconsistent_records():
    specs = encode_specs(_schema())
    example = tf.train.Example.FromString(encode_subgraph(_full_subgraph(), specs))
    del example.features.feature["edges/writes.weight"].float_list.value[-1]
    with pytest.raises(ValueError, match=r"edge set 'writes': feature 'weight' has 7 values"):
        decode_subgraph(example.SerializeToString(), specs)
    del example.features.feature["nodes/author.#id"]
    with pytest.raises(ValueError, match=r"node set 'author': key 'nodes/author.#id' is missing"):
        decode_subgraph(example.SerializeToString(), specs)


def test_output_schema_adds_ids_and_clears_metadata():
    schema = _schema()
    before = schema.SerializeToString()
    out = output_schema(schema)
    assert schema.SerializeToString() == before  # input untouched
    assert set(out.context.features) == {"seed_id", "sample_id"}
    for name in ("seed_id", "sample_id"):
        feature = out.context.features[name]
        assert feature.dtype == tf.string.as_datatype_enum
        assert not feature.HasField("shape")
    for name, node_set in out.node_sets.items():
        assert node_set.features["#id"].dtype == tf.string.as_datatype_enum, name
        assert set(node_set.features) - {"#id"} == set(schema.node_sets[name].features)
    for set_ in [out.context, *out.node_sets.values(), *out.edge_sets.values()]:
        assert not set_.metadata.HasField("filename")
        assert not set_.metadata.HasField("cardinality")
    assert [(kv.key, kv.value) for kv in out.node_sets["paper"].metadata.extra] == [
        ("owner", "team-a")
    ]
    assert out.edge_sets["writes"].source == "author"
    assert (
        out.edge_sets["writes"].features["weight"] == schema.edge_sets["writes"].features["weight"]
    )
    # Applying it twice changes nothing.
    assert output_schema(out) == out
    # Specs from the output schema are the same as from the input schema.
    assert encode_specs(out) == encode_specs(schema)


def test_output_schema_keeps_declared_features():
    schema = _schema(
        """
        context {
          features { key: "seed_id" value { description: "mine" dtype: DT_STRING } }
          features { key: "label" value { dtype: DT_INT64 } }
        }
        node_sets {
          key: "n"
          value { features { key: "#id" value { description: "my ids" dtype: DT_STRING } } }
        }
        node_sets { key: "m" value { } }
        """
    )
    out = output_schema(schema)
    assert set(out.context.features) == {"seed_id", "sample_id", "label"}
    assert out.context.features["seed_id"].description == "mine"
    assert out.context.features["label"].dtype == tf.int64.as_datatype_enum
    assert list(out.node_sets["n"].features) == ["#id"]
    assert out.node_sets["n"].features["#id"].description == "my ids"
    assert list(out.node_sets["m"].features) == ["#id"]
    assert not out.node_sets["m"].HasField("metadata")


def test_declared_id_feature_is_the_id_column():
    schema = _schema(
        'node_sets { key: "n" value { features { key: "#id" value { dtype: DT_STRING } } } }'
    )
    specs = encode_specs(schema)
    assert specs.node_sets["n"].features == ()
    data = encode_subgraph(
        Subgraph(b"s", b"x", {"n": NodeSetRows(_objects(b"x", b"y"), {})}, {}), specs
    )
    graph = _parse(schema, data)
    assert graph.node_sets["n"]["#id"].numpy().tolist() == [b"x", b"y"]


@pytest.mark.parametrize(
    "text, match",
    [
        (
            'context { features { key: "label" value { dtype: DT_INT64 } } }'
            ' node_sets { key: "n" value {} }',
            r"context: feature 'label' cannot be written",
        ),
        (
            'context { features { key: "seed_id" value { dtype: DT_INT64 } } }'
            ' node_sets { key: "n" value {} }',
            r"context: feature 'seed_id' must be a DT_STRING scalar",
        ),
        (
            'node_sets { key: "n" value { features { key: "#id" value { dtype: DT_INT64 } } } }',
            r"node set 'n': feature '#id' must be a DT_STRING scalar",
        ),
        (
            'node_sets { key: "n" value { features { key: "#size" value { dtype: DT_INT64 } } } }',
            r"node set 'n': feature name '#size' is reserved",
        ),
        (
            'node_sets { key: "n" value {} } edge_sets { key: "e" value { source: "n" target: "m" } }',
            r"edge set 'e': target 'm' is not a node set",
        ),
        (
            'node_sets { key: "n" value { features { key: "f" value {'
            " dtype: DT_FLOAT shape { dim { size: -1 } } } } } }",
            r"node set 'n': feature 'f' has a ragged shape",
        ),
    ],
)
def test_encode_specs_rejects_unwritable_schemas(text, match):
    with pytest.raises(UserError, match=match):
        encode_specs(_schema(text))
