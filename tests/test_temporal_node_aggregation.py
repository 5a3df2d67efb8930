"""Node aggregation of a temporal spec: the edges induced among a subgraph's nodes are kept
only when eligible at its seed time under the rule of an op on their edge set (a set of no
temporal op keeps them all), the same bytes on every runner and placement, checked by the
independent checker (tests/temporal_checker.py, `check_induced`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tests.temporal_checker import Checker, Op
from tests.test_temporal import CHECKED, PAPERS, SPEC, _run, _seeds, _spec, _tables, _write
from tests.test_temporal_estimate import _compare
from tests.test_temporal_links import LINK_SPEC

NODE = ("--edge_aggregation_method", "node")
RULES = {op.edge_set: [op] for op in CHECKED}
NO_NODE_TIME = SPEC.replace('node_time_feature: "year" most_recent', "most_recent")


def _file(tmp_path, name: str, text: str) -> str:
    (tmp_path / name).write_text(text)
    return str(tmp_path / name)


@pytest.fixture(scope="module")
def node_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("temporal_node")
    schema, nodes, edges = _write(tmp_path)
    seeds = _seeds(tmp_path, 2)
    out = str(tmp_path / "mem" / "samples")
    records = _run(tmp_path, schema, _spec(tmp_path), out, "--runner", "InMemory", *NODE,
                   "--input_seeds", seeds)  # fmt: skip
    return tmp_path, schema, seeds, records, Checker(nodes, edges)


def test_induced_edges_respect_the_seed_time(node_run):
    *_, records, checker = node_run
    assert len(records) == 2 * PAPERS
    for record in records:
        checker.check_induced(record, RULES)


def test_the_checker_catches_a_leak_and_a_loss(node_run):
    """The checker can fail: the records checked against a stricter rule show an induced
    edge at the seed time (a leak), and against a looser one an eligible edge missing."""
    tmp_path, *_, records, _ = node_run
    checker = Checker(*_tables(tmp_path))
    strict = {"cites": [dataclasses.replace(CHECKED[0], strict=True)]}
    with pytest.raises(AssertionError, match="cites edge .* is not eligible"):
        for record in records:
            checker.check_induced(record, strict)
    loose = {"writes": [dataclasses.replace(CHECKED[2], window=None)]}
    with pytest.raises(AssertionError, match="writes edge .* is missing"):
        for record in records:
            checker.check_induced(record, loose)


def test_float_times_filter_the_induced_edges(tmp_path):
    schema, nodes, edges = _write(tmp_path, "float")
    out = str(tmp_path / "out" / "samples")
    records = _run(tmp_path, schema, _spec(tmp_path), out, "--runner", "InMemory", *NODE)
    checker = Checker(nodes, edges)
    for record in records:
        checker.check_induced(record, RULES)
    assert len(records) == PAPERS


@pytest.mark.parametrize("placement", ["worker", "topology"])
def test_the_placements_write_the_in_memory_records(node_run, placement):
    tmp_path, schema, seeds, records, _ = node_run
    out = str(tmp_path / placement / "samples")
    got = _run(tmp_path, schema, _spec(tmp_path), out, "--graph_placement", placement, *NODE,
               "--input_seeds", seeds)  # fmt: skip
    assert got == records


def test_sharded_writes_the_in_memory_records(node_run):
    """`sharded` filters the induced edges where it assembles them (node times it refuses)."""
    tmp_path, schema, seeds, _, checker = node_run
    spec = _file(tmp_path, "no_node_time.pbtxt", NO_NODE_TIME)
    records = {}
    for placement in ("InMemory", "sharded"):
        flag = (
            ["--runner", "InMemory"]
            if placement == "InMemory"
            else ["--graph_placement", placement]
        )
        out = str(tmp_path / f"{placement}_no_node_time" / "samples")
        records[placement] = _run(tmp_path, schema, spec, out, *flag, *NODE,
                                  "--input_seeds", seeds)  # fmt: skip
    assert records["sharded"] == records["InMemory"]
    rules = {op.edge_set: [dataclasses.replace(op, node_time=None)] for op in CHECKED}
    for record in records["sharded"]:
        checker.check_induced(record, rules)


def test_edge_sets_of_no_temporal_op_keep_every_induced_edge(node_run):
    """An untimed op's edge set keeps every edge among the nodes; two temporal ops on one
    edge set keep an edge eligible under either rule."""
    tmp_path, schema, _, _, checker = node_run
    spec = SPEC.replace("temporal { edge_time_feature: \"year\" window: 3 strictly_before: true }",
                        "")  # fmt: skip
    spec += """sampling_ops { op_name: "cited2" input_op_names: "papers" edge_set_name: "cites"
  sample_size: 2 strategy: RANDOM_UNIFORM
  temporal { edge_time_feature: "year" strictly_before: true window: 2 } }
"""
    path = _file(tmp_path, "untimed.pbtxt", spec)
    out = str(tmp_path / "untimed" / "samples")
    records = _run(tmp_path, schema, path, out, "--runner", "InMemory", *NODE)
    cites = [CHECKED[0], Op("cites", 2, "any", "year", strict=True, window=2, first_hop=False)]
    rules = {"cites": cites, "written": [CHECKED[1]], "writes": []}
    for record in records:
        checker.check_induced(record, rules)
    with pytest.raises(AssertionError, match="writes edge .* is not eligible"):
        for record in records:
            checker.check_induced(record, {"writes": [CHECKED[2]]})


def test_link_seeds_filter_their_induced_edges(node_run):
    """Link seeds: the induced edges are filtered at the positive's edge time (strictly
    before), the same bytes on `worker`."""
    tmp_path, schema, _, _, checker = node_run
    spec = _file(tmp_path, "link.pbtxt", LINK_SPEC)
    flags = ("--seed_edge_set", "cites", "--negatives_per_seed", "1", *NODE)
    out = str(tmp_path / "link_mem" / "samples")
    records = _run(tmp_path, schema, spec, out, "--runner", "InMemory", *flags)
    assert len(records) == 2 * 40 * 12
    rules = {
        "cites": [Op("cites", 4, "any", "year", strict=True)],
        "written": [Op("written", 2, "any", "year", strict=True)],
    }
    for record in records:  # the seed edge is hidden: not complete
        checker.check_induced(record, rules, complete=False)
    out = str(tmp_path / "link_worker" / "samples")
    assert _run(tmp_path, schema, spec, out, "--graph_placement", "worker", *flags) == records


@pytest.mark.parametrize("spec_text", [SPEC, NO_NODE_TIME], ids=["node_times", "edge_times"])
def test_estimate_counts_the_induced_edges_the_runs_keep(tmp_path, spec_text):
    """The probe filters the induced edges by each sample's seed time as the runs do: every
    seed probed, its sizes are the records' within 1% (tests/test_temporal_estimate.py's
    check); the untimed count of induced edges would be well above."""
    schema, _, _ = _write(tmp_path)
    spec = _file(tmp_path, "spec.pbtxt", spec_text)
    estimated, records = _compare(tmp_path, schema, spec, list(NODE), 0.01)
    assert len(records) == PAPERS
    cites = np.mean([r["edges/cites.#size"][0] for r in records])
    assert estimated["edges_per_subgraph"]["cites"] == pytest.approx(cites, rel=0.01)
