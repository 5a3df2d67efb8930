"""Validation of a SamplingSpec against a GraphSchema: one-line UserErrors naming the field.

The schema is only parsed (load_graph does not open tables), so no table files are written.
"""

from __future__ import annotations

import re

import pytest

from pipelines import sample as sample_cli
from sampler.errors import UserError
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph

SCHEMA = """
node_sets {
  key: "paper"
  value {
    features { key: "year" value { dtype: DT_INT64 } }
    metadata { filename: "paper.csv" }
  }
}
node_sets { key: "author" value { } }
edge_sets {
  key: "cites"
  value {
    source: "paper" target: "paper"
    features { key: "weight" value { dtype: DT_FLOAT } }
    metadata { filename: "cites.csv" }
  }
}
edge_sets {
  key: "int_cites"
  value {
    source: "paper" target: "paper"
    features { key: "weight" value { dtype: DT_INT32 } }
    metadata { filename: "cites.csv" }
  }
}
edge_sets {
  key: "plain"
  value { source: "paper" target: "paper" metadata { filename: "cites.csv" } }
}
edge_sets {
  key: "text_weight"
  value {
    source: "paper" target: "paper"
    features { key: "weight" value { dtype: DT_STRING } }
    metadata { filename: "cites.csv" }
  }
}
edge_sets {
  key: "vector_weight"
  value {
    source: "paper" target: "paper"
    features { key: "weight" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
    metadata { filename: "cites.csv" }
  }
}
edge_sets {
  key: "score_only"
  value {
    source: "paper" target: "paper"
    features { key: "score" value { dtype: DT_FLOAT } }
    metadata { filename: "cites.csv" }
  }
}
edge_sets {
  key: "writes"
  value { source: "author" target: "paper" metadata { filename: "writes.csv" } }
}
edge_sets {
  key: "written"
  value {
    source: "paper" target: "author"
    metadata { filename: "writes.csv" extra { key: "edge_type" value: "reversed" } }
  }
}
"""
SEED = 'seed_op { op_name: "seed" node_set_name: "paper" }\n'


def op(name, inputs, edge_set, size=2, strategy="RANDOM_UNIFORM") -> str:
    inputs = ", ".join(f'"{i}"' for i in ([inputs] if isinstance(inputs, str) else inputs))
    strategy = f" strategy: {strategy}" if strategy else ""
    return (
        f'sampling_ops {{ op_name: "{name}" input_op_names: [{inputs}]'
        f' edge_set_name: "{edge_set}" sample_size: {size}{strategy} }}\n'
    )


@pytest.fixture
def schema_path(tmp_path):
    path = tmp_path / "graph_schema.pbtxt"
    path.write_text(SCHEMA)
    return str(path)


def plan_of(tmp_path, schema_path, spec_text: str, aggregation: str = "edge"):
    spec_path = tmp_path / "spec.pbtxt"
    spec_path.write_text(spec_text)
    return make_plan(load_graph(schema_path), load_sampling_spec(str(spec_path)), aggregation)


def error_of(tmp_path, schema_path, spec_text: str, aggregation: str = "edge") -> str:
    with pytest.raises(UserError) as info:
        plan_of(tmp_path, schema_path, spec_text, aggregation)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def assert_names(message: str, *words: str) -> None:
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"


# --------------------------------------------------------------------------- valid plans


def test_valid_spec_is_accepted(tmp_path, schema_path):
    spec = (
        SEED
        + op("cited", "seed", "cites", 3, "TOP_K")
        + op("authors", ["seed", "cited", "seed"], "written", 2)
        + op("papers", "authors", "writes", 4, "RANDOM_UNIFORM")
        + op("more", ["papers", "cited"], "int_cites", 1, "RANDOM_WEIGHTED")
    )
    plan = plan_of(tmp_path, schema_path, spec, "node")
    assert [o.name for o in plan.ops] == ["cited", "authors", "papers", "more"]
    assert plan.seed_set == "paper" and plan.aggregation == "node"
    authors = plan.ops[1]
    assert (authors.source, authors.target, authors.sample_size) == ("paper", "author", 2)
    assert sorted(authors.inputs) == ["cited", "seed"]  # duplicates in the union dropped
    assert [o.strategy for o in plan.ops] == [
        "TOP_K",
        "RANDOM_UNIFORM",
        "RANDOM_UNIFORM",
        "RANDOM_WEIGHTED",
    ]


# --------------------------------------------------------------------------- errors


def test_unknown_seed_node_set(tmp_path, schema_path):
    spec = 'seed_op { op_name: "seed" node_set_name: "venue" }\n' + op("hop", "seed", "cites")
    assert_names(error_of(tmp_path, schema_path, spec), "node_set_name", "venue")


@pytest.mark.parametrize("end", ["source", "target"])
def test_schema_edge_set_with_unknown_node_set(tmp_path, end):
    other = "target" if end == "source" else "source"
    path = tmp_path / "graph_schema.pbtxt"
    path.write_text(
        'node_sets { key: "paper" value { } }\n'
        f'edge_sets {{ key: "cites" value {{ {end}: "venue" {other}: "paper"'
        ' metadata { filename: "cites.csv" } } }\n'
    )
    with pytest.raises(UserError) as info:
        load_graph(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert_names(message, "cites", end, "venue")


def test_unknown_edge_set(tmp_path, schema_path):
    message = error_of(tmp_path, schema_path, SEED + op("hop", "seed", "likes"))
    assert_names(message, "hop", "edge_set_name", "likes")


@pytest.mark.parametrize(
    "ops, op_name, missing",
    [
        ([("hop", "nope", "cites")], "hop", "nope"),
        ([("hop", "hop", "cites")], "hop", "hop"),  # its own output
        ([("first", ["seed", "second"], "cites"), ("second", "seed", "cites")], "first", "second"),
    ],
    ids=["undefined", "self", "defined-later"],
)
def test_input_op_not_defined_earlier(tmp_path, schema_path, ops, op_name, missing):
    spec = SEED + "".join(op(*o) for o in ops)
    message = error_of(tmp_path, schema_path, spec)
    assert_names(message, f"'{op_name}'", "input_op_names", f"'{missing}'")


@pytest.mark.parametrize("size", [0, -1, -50])
def test_sample_size_must_be_positive(tmp_path, schema_path, size):
    spec = SEED + op("ok", "seed", "cites", 2) + op("hop", "ok", "cites", size)
    message = error_of(tmp_path, schema_path, spec)
    assert_names(message, "'hop'", "sample_size", str(size))


def test_sample_size_unset(tmp_path, schema_path):
    spec = SEED + 'sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" }'
    assert_names(error_of(tmp_path, schema_path, spec), "'hop'", "sample_size")


def test_edge_set_source_must_match_input(tmp_path, schema_path):
    message = error_of(tmp_path, schema_path, SEED + op("hop", "seed", "writes"))
    assert_names(message, "'hop'", "writes", "author", "paper", "'seed'")


def test_edge_set_source_must_match_every_input(tmp_path, schema_path):
    """A multi-input op: the second input yields author nodes, cites starts at paper."""
    spec = SEED + op("authors", "seed", "written") + op("mix", ["seed", "authors"], "cites")
    message = error_of(tmp_path, schema_path, spec)
    assert_names(message, "'mix'", "'authors'", "cites", "author", "paper")


def test_duplicate_op_name(tmp_path, schema_path):
    spec = SEED + op("hop", "seed", "cites") + op("hop", "seed", "cites")
    message = error_of(tmp_path, schema_path, spec)
    assert_names(message, "'hop'", "op_name", "sampling_ops[1]")


def test_op_name_same_as_seed_op(tmp_path, schema_path):
    message = error_of(tmp_path, schema_path, SEED + op("seed", "seed", "cites"))
    assert_names(message, "'seed'", "op_name")


@pytest.mark.parametrize("strategy", ["TOP_K", "RANDOM_WEIGHTED", None])
@pytest.mark.parametrize("edge_set", ["plain", "score_only", "text_weight", "vector_weight"])
def test_weighted_strategies_need_a_scalar_numeric_weight(
    tmp_path, schema_path, strategy, edge_set
):
    """None: strategy unset, which is TOP_K in the proto (enum value 0)."""
    message = error_of(tmp_path, schema_path, SEED + op("hop", "seed", edge_set, 2, strategy))
    assert_names(message, "'hop'", "'weight'", edge_set, strategy or "TOP_K")


def test_invalid_spec_pbtxt_names_file_and_line(tmp_path, schema_path):
    spec_path = tmp_path / "broken_spec.pbtxt"
    spec_path.write_text(SEED + 'sampling_ops {\n  op_name: "hop"\n  bogus_field: 3\n}\n')
    with pytest.raises(UserError) as info:
        load_sampling_spec(str(spec_path))
    message = str(info.value)
    assert "\n" not in message
    assert re.search(re.escape(str(spec_path)) + r":4\b", message), message
    assert "bogus_field" in message


def test_invalid_schema_pbtxt_names_file_and_line(tmp_path):
    path = tmp_path / "graph_schema.pbtxt"
    path.write_text('node_sets {\n  key: "paper"\n  value {\n    features { key "x" }\n  }\n}\n')
    with pytest.raises(UserError) as info:
        load_graph(str(path))
    message = str(info.value)
    assert "\n" not in message
    assert re.search(re.escape(str(path)) + r":4\b", message), message


def test_bad_aggregation(tmp_path, schema_path):
    message = error_of(tmp_path, schema_path, SEED + op("hop", "seed", "cites"), "nodes")
    assert_names(message, "edge_aggregation_method", "nodes")


def test_cli_reports_plan_errors_in_one_line(tmp_path, schema_path, capsys):
    spec_path = tmp_path / "spec.pbtxt"
    spec_path.write_text(SEED + op("hop", "seed", "cites", 0))
    argv = [
        "--graph_schema",
        schema_path,
        "--sampling_spec",
        str(spec_path),
        "--output_samples",
        str(tmp_path / "out" / "samples"),
    ]
    assert sample_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:"), err
    assert_names(err[0], "'hop'", "sample_size")


@pytest.mark.parametrize("strategy", ["TOP_K", "RANDOM_WEIGHTED", None])
def test_default_strategy_is_named_only_when_strategy_is_unset(tmp_path, schema_path, strategy):
    """The proto's default (unset) is TOP_K: only then does the message say so."""
    message = error_of(tmp_path, schema_path, SEED + op("hop", "seed", "plain", 2, strategy))
    assert ("(the default when strategy is unset)" in message) == (strategy is None), message


def test_link_seed_on_one_node_set_names_it_once(tmp_path, schema_path):
    """A link seed op on `cites` (paper -> paper) yields 'paper' nodes, not 'paper and paper'."""
    spec_path = tmp_path / "spec.pbtxt"
    spec_path.write_text(
        'symmetric_link_seed_op { op_name: "link" }\n' + op("hop", "link", "writes")
    )
    graph = load_graph(schema_path)
    with pytest.raises(UserError) as info:
        make_plan(graph, load_sampling_spec(str(spec_path)), "edge", "cites")
    message = str(info.value)
    assert "yields 'paper' nodes" in message and "'paper and paper'" not in message, message
    assert "edge set 'writes' starts at 'author'" in message, message
