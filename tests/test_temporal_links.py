"""Temporal sampling of link seeds: each seed's time is its edge's, temporal ops keep only
edges strictly before it (the default for link seeds), the seed edge is hidden, negatives
take their positive's time; checked by tests/temporal_checker.py on every placement that
samples by time."""

from __future__ import annotations

import pytest

from pipelines import sample as sample_cli
from sampler.errors import UserError
from sampler.sample.plan import make_plan
from sampler.schema import load_graph
from tests.pipeline_helpers import read_records
from tests.temporal_checker import Checker, Op
from tests.test_temporal import _parsed, _tables, _write

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
temporal_seed { edge_time_feature: "year" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 4
  strategy: RANDOM_UNIFORM temporal { edge_time_feature: "year" } }
sampling_ops { op_name: "recent" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  temporal { edge_time_feature: "year" most_recent: true } }
"""
OPS = [
    Op("cites", 4, "any", "year", strict=True, first_hop=False),
    Op("written", 2, "any", "year", strict=True, first_hop=False),
]


@pytest.fixture(scope="module")
def link_graph(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("temporal_links")
    schema, _, _ = _write(tmp_path)
    (tmp_path / "link.pbtxt").write_text(LINK_SPEC)
    return tmp_path, schema, str(tmp_path / "link.pbtxt")


def _run(schema, spec, out, *extra) -> list[bytes]:
    argv = [
        "--graph_schema", schema, "--sampling_spec", spec, "--output_samples", out,
        "--seed_edge_set", "cites", "--negatives_per_seed", "1", *extra,
    ]  # fmt: skip
    assert sample_cli.main(argv) == 0
    return read_records(out + "*")


@pytest.fixture(scope="module")
def in_memory_links(link_graph):
    tmp_path, schema, spec = link_graph
    return _run(schema, spec, str(tmp_path / "mem" / "samples"), "--runner", "InMemory")


def test_link_records_pass_the_checker(link_graph, in_memory_links):
    tmp_path = link_graph[0]
    checker = Checker(*_tables(tmp_path))
    assert len(in_memory_links) == 2 * 40 * 12  # every cites edge, and one negative each
    for record in in_memory_links:
        checker.check_link(record, "cites", "year", OPS)


def test_the_checker_sees_a_leak_at_equal_times(link_graph, in_memory_links):
    """At-or-before records checked against strictly-before fail: the checker can fail."""
    tmp_path, schema, _ = link_graph
    spec = tmp_path / "loose.pbtxt"
    loose = LINK_SPEC.replace(
        'temporal { edge_time_feature: "year" }',
        'temporal { edge_time_feature: "year" strictly_before: false }',
    )
    spec.write_text(loose)
    records = _run(schema, str(spec), str(tmp_path / "loose" / "samples"), "--runner", "InMemory")
    checker = Checker(*_tables(tmp_path))
    with pytest.raises(AssertionError, match="not eligible"):
        for record in records:
            checker.check_link(record, "cites", "year", OPS)


@pytest.mark.parametrize("placement", ["worker", "topology"])
def test_link_placements_write_the_in_memory_records(link_graph, in_memory_links, placement):
    tmp_path, schema, spec = link_graph
    out = str(tmp_path / placement / "samples")
    got = _run(schema, spec, out, "--graph_placement", placement)
    assert got == in_memory_links


def test_sharded_refuses_temporal_link_seeds_in_one_line(link_graph, capsys):
    tmp_path, schema, spec = link_graph
    argv = [
        "--graph_schema",
        schema,
        "--sampling_spec",
        spec,
        "--seed_edge_set",
        "cites",
        "--output_samples",
        str(tmp_path / "sharded" / "s"),
        "--graph_placement",
        "sharded",
    ]
    assert sample_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "temporal link seeds" in err[0], err


def test_link_seed_time_fields_are_checked(link_graph):
    _, schema, _ = link_graph
    graph = load_graph(schema)
    with pytest.raises(UserError, match="temporal_seed.node_time_feature does not apply to link"):
        make_plan(
            graph,
            _parsed(LINK_SPEC.replace("edge_time_feature: \"year\" }\nsampling",
                                      "node_time_feature: \"year\" }\nsampling", 1)),
            seed_edge_set="cites",
        )  # fmt: skip
    with pytest.raises(UserError, match="'weight' is float"):
        make_plan(
            graph,
            _parsed(LINK_SPEC.replace('temporal_seed { edge_time_feature: "year" }',
                                      'temporal_seed { edge_time_feature: "weight" }')),
            seed_edge_set="cites",
        )  # fmt: skip
