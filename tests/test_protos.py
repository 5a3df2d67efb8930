"""The project's protobuf classes (sampler.protos) against TensorFlow's and TF-GNN's.

Same descriptors (field numbers, types, names, enum values), same bytes for every schema and
spec the tests and the synthetic generator use, Examples readable both ways, and generated code
that matches protos/sampler/protos/*.proto.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest
from google.protobuf import text_format
from google.protobuf.descriptor import FieldDescriptor
from tensorflow.core.example import example_pb2 as tf_example_pb2
from tensorflow.core.framework import types_pb2 as tf_types_pb2
from tensorflow_gnn.proto import graph_schema_pb2 as tfgnn_schema_pb2
from tensorflow_gnn.sampler import sampling_spec_pb2 as tfgnn_spec_pb2

from sampler.protos import example_pb2, graph_schema_pb2, sampling_spec_pb2, tensor_pb2
from sampler.tools.synthetic import generate_mag, mag_sampling_spec, write_graph

ROOT = Path(__file__).resolve().parents[1]
EXTENSION = 1000  # field numbers from here on are ours, never TF-GNN's
PAIRS = [
    (graph_schema_pb2.GraphSchema, tfgnn_schema_pb2.GraphSchema),
    (sampling_spec_pb2.SamplingSpec, tfgnn_spec_pb2.SamplingSpec),
    (example_pb2.Example, tf_example_pb2.Example),
]


def _bytes(message) -> bytes:
    return message.SerializeToString(deterministic=True)


def _field_differences(ours, theirs, path: str, seen: set) -> list[str]:
    """Differences in what goes on the wire or into text format, recursively."""
    if ours.full_name in seen:
        return []
    seen.add(ours.full_name)
    problems = []
    theirs_by_name = {f.name: f for f in theirs.fields}
    for field in ours.fields:
        where = f"{path}.{field.name}"
        other = theirs_by_name.get(field.name)
        if other is None and field.number >= EXTENSION:
            continue  # this project's extension (temporal sampling): TF-GNN has no such field
        if other is None:
            problems.append(f"{where}: not in {theirs.full_name}")
            continue
        for attr in ("number", "type", "is_repeated", "is_packed", "has_presence"):
            if getattr(field, attr) != getattr(other, attr):
                problems.append(f"{where}: {attr} {getattr(field, attr)} != {getattr(other, attr)}")
        if field.type == FieldDescriptor.TYPE_ENUM:
            mine = {v.name: v.number for v in field.enum_type.values}
            their = {v.name: v.number for v in other.enum_type.values}
            if any(their.get(name) != number for name, number in mine.items()):
                problems.append(f"{where}: enum values differ")
            if field.enum_type.is_closed != other.enum_type.is_closed:
                problems.append(f"{where}: enum is_closed {field.enum_type.is_closed}")
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            problems += _field_differences(field.message_type, other.message_type, where, seen)
    for name in theirs_by_name.keys() - {f.name for f in ours.fields}:
        problems.append(f"{path}.{name}: missing (in {theirs.full_name})")
    return problems


@pytest.mark.parametrize("ours, theirs", PAIRS, ids=lambda c: c.DESCRIPTOR.full_name)
def test_descriptors_match(ours, theirs):
    assert ours.DESCRIPTOR.full_name != theirs.DESCRIPTOR.full_name  # our own package
    assert _field_differences(ours.DESCRIPTOR, theirs.DESCRIPTOR, ours.__name__, set()) == []


def test_the_temporal_extension_is_ours_alone():
    """The temporal fields sit at numbers TF-GNN does not use, and a spec that sets them still
    reads in TF-GNN (as unknown fields) with its own fields unchanged."""
    spec = sampling_spec_pb2.SamplingSpec.DESCRIPTOR
    assert spec.fields_by_name["temporal_seed"].number >= EXTENSION
    op = spec.fields_by_name["sampling_ops"].message_type
    assert op.fields_by_name["temporal"].number >= EXTENSION
    theirs_numbers = {f.number for f in tfgnn_spec_pb2.SamplingOp.DESCRIPTOR.fields}
    assert max(theirs_numbers) < EXTENSION
    text = (
        'seed_op { op_name: "s" node_set_name: "p" } temporal_seed { node_time_feature: "t" }'
        ' sampling_ops { op_name: "a" input_op_names: "s" edge_set_name: "e" sample_size: 2'
        ' temporal { edge_time_feature: "t" window: 3 most_recent: true } }'
    )
    mine = text_format.Parse(text, sampling_spec_pb2.SamplingSpec())
    theirs = tfgnn_spec_pb2.SamplingSpec.FromString(_bytes(mine))
    assert theirs.sampling_ops[0].sample_size == 2 and theirs.seed_op.node_set_name == "p"
    assert _bytes(theirs) == _bytes(mine)  # unknown fields kept, in place


def test_data_types_match_tensorflow():
    ours = {v.name: v.number for v in tensor_pb2.DataType.DESCRIPTOR.values}
    theirs = {v.name: v.number for v in tf_types_pb2.DataType.DESCRIPTOR.values}
    assert ours == {name: number for name, number in theirs.items() if number < 100}


def _pbtxt_constants() -> list[tuple[str, str]]:
    """(where, text) of every string constant in the tests that looks like a schema or spec."""
    found = []
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "node_sets {" in node.value or "seed_op {" in node.value:
                    found.append((f"{path.name}:{node.lineno}", node.value))
    return found


def test_schemas_and_specs_of_the_tests_give_the_same_bytes():
    checked = {"schema": 0, "spec": 0}
    for where, text in _pbtxt_constants():
        for kind, ours, theirs in [
            ("schema", graph_schema_pb2.GraphSchema, tfgnn_schema_pb2.GraphSchema),
            ("spec", sampling_spec_pb2.SamplingSpec, tfgnn_spec_pb2.SamplingSpec),
        ]:
            try:
                reference = text_format.Parse(text, theirs())
            except text_format.ParseError:
                continue  # broken on purpose, or the other kind
            mine = text_format.Parse(text, ours())
            assert _bytes(mine) == _bytes(reference), where
            assert text_format.MessageToString(mine) == text_format.MessageToString(reference)
            checked[kind] += 1
    assert checked["schema"] >= 10 and checked["spec"] >= 5, checked


@pytest.mark.parametrize("all_node_features, edge_weights", [(False, False), (True, True)])
def test_synthetic_schema_and_spec_give_the_same_bytes(tmp_path, all_node_features, edge_weights):
    graph = generate_mag(
        200, all_node_features=all_node_features, edge_weights=edge_weights, seed=3
    )
    path = write_graph(graph, str(tmp_path))
    text = Path(path).read_text()
    for ours, theirs, mine in [
        (graph_schema_pb2.GraphSchema, tfgnn_schema_pb2.GraphSchema, graph.schema),
        (sampling_spec_pb2.SamplingSpec, tfgnn_spec_pb2.SamplingSpec, mag_sampling_spec()),
    ]:
        assert isinstance(mine, ours)
        reference = theirs.FromString(_bytes(mine))
        assert _bytes(reference) == _bytes(mine)
        printed = text_format.MessageToString(mine)
        assert text_format.MessageToString(text_format.Parse(printed, theirs())) == printed
    written = text_format.Parse(text, tfgnn_schema_pb2.GraphSchema())
    assert _bytes(text_format.Parse(text, graph_schema_pb2.GraphSchema())) == _bytes(written)
    assert written.node_sets["paper"].metadata.filename


def _fill(example):
    fmap = example.features.feature
    fmap["b"].bytes_list.value.extend([b"", b"x", bytes(range(256))])
    fmap["f"].float_list.value.extend([0.5, -1.25, 3e38, float("inf")])
    fmap["i"].int64_list.value.extend([0, -1, 2**63 - 1, -(2**63)])
    fmap["empty_f"].float_list.SetInParent()
    fmap["unset"].SetInParent()
    return example


def test_examples_read_both_ways():
    ours = _fill(example_pb2.Example())
    theirs = _fill(tf_example_pb2.Example())
    assert _bytes(ours) == _bytes(theirs)
    assert tf_example_pb2.Example.FromString(_bytes(ours)) == theirs
    assert example_pb2.Example.FromString(_bytes(theirs)) == ours
    assert ours.features.feature["unset"].WhichOneof("kind") is None


def test_generated_code_matches_the_protos(tmp_path):
    import scripts.gen_protos as gen

    protos = [p.stem for p in gen.proto_files()]
    assert sorted(protos) == ["example", "graph_schema", "sampling_spec", "tensor"]
    fresh = {p.name: p.read_bytes() for p in gen.generate(tmp_path)}
    committed = {p.name: p.read_bytes() for p in gen.OUT_DIR.glob("*_pb2.py")}
    assert sorted(fresh) == sorted(committed) == [f"{name}_pb2.py" for name in sorted(protos)]
    for name in fresh:
        assert fresh[name] == committed[name], (
            f"sampler/protos/{name} is out of date: run python scripts/gen_protos.py"
        )


def test_protoc_pin_is_in_requirements():
    import scripts.gen_protos as gen

    pins = gen.pins()
    assert pins[0].startswith("grpcio-tools==") and pins[1].startswith("protobuf==")
    assert os.path.exists(ROOT / "protos" / "sampler" / "protos" / "graph_schema.proto")
