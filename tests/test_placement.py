"""`--graph_placement auto` picks by --worker_memory_mb and says why, on stdout."""

from __future__ import annotations

import argparse
import os

import pytest

from pipelines import sample as sample_cli
from sampler.errors import UserError
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic


@pytest.fixture(scope="module")
def featured_graph(tmp_path_factory):
    """300 papers with 128-dim features: the paper table is most of the bytes."""
    out = tmp_path_factory.mktemp("graph")
    synthetic.write_graph(synthetic.generate_mag(300, seed=2, feature_dim=128), str(out), "parquet")
    sizes = {f: os.path.getsize(out / f) for f in os.listdir(out) if f.endswith(".parquet")}
    return load_graph(str(out)), sum(sizes.values()) / 2**20, sizes["paper.parquet"] / 2**20


@pytest.mark.parametrize(
    "budget, expected",
    [
        (lambda whole, paper: whole * 1.01, "worker"),
        (lambda whole, paper: whole - paper / 2, "topology"),  # features are ~95% of papers
        (lambda whole, paper: (whole - paper) / 2, "sharded"),  # not even the edges fit
    ],
)
def test_auto_picks_the_largest_placement_within_the_budget(
    featured_graph, capsys, budget, expected
):
    graph, whole, paper = featured_graph
    args = argparse.Namespace(graph_placement="auto", worker_memory_mb=budget(whole, paper))
    assert sample_cli.placement(graph, args) == expected
    out, err = capsys.readouterr()
    assert out.startswith(f"graph placement: {expected}: ") and "--worker_memory_mb" in out
    assert err == ""


def test_an_explicit_placement_is_kept_whatever_the_budget(featured_graph, capsys):
    graph, _, _ = featured_graph
    args = argparse.Namespace(graph_placement="worker", worker_memory_mb=0.001)
    assert sample_cli.placement(graph, args) == "worker"
    assert capsys.readouterr().out == ""


LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
"""


@pytest.mark.parametrize(
    "budget, expected",
    [
        (lambda whole, paper: whole * 1.01, "worker"),
        (lambda whole, paper: whole - paper / 2, "topology"),
        (lambda whole, paper: (whole - paper) / 2, None),  # only sharded would fit: refused
    ],
)
def test_auto_with_link_seeds_picks_worker_or_topology_or_fails_in_one_line(
    featured_graph, tmp_path, capsys, budget, expected
):
    graph, whole, paper = featured_graph
    spec = tmp_path / "link.pbtxt"
    spec.write_text(LINK_SPEC)
    plan = make_plan(graph, load_sampling_spec(str(spec)), "edge", "writes")
    args = argparse.Namespace(graph_placement="auto", worker_memory_mb=budget(whole, paper))
    if expected is None:
        with pytest.raises(UserError) as error:
            sample_cli.placement(graph, args, plan)
        message = str(error.value)
        assert "\n" not in message and "--worker_memory_mb" in message
        assert "link seeds (symmetric_link_seed_op) do not support the sharded placement" in message
        assert capsys.readouterr().out == ""
        return
    assert sample_cli.placement(graph, args, plan) == expected
    assert capsys.readouterr().out.startswith(f"graph placement: {expected}: ")
