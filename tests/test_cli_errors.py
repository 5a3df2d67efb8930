"""User mistakes end in one readable line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  metadata { filename: "paper.csv" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper" metadata { filename: "cites.csv" } } }
"""
GOOD_SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2 strategy: RANDOM_UNIFORM }
"""


@pytest.fixture()
def graph(tmp_path):
    (tmp_path / "graph_schema.pbtxt").write_text(SCHEMA)
    (tmp_path / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;4\n")
    (tmp_path / "cites.csv").write_text("#source,#target\np0,p1\n")
    (tmp_path / "spec.pbtxt").write_text(GOOD_SPEC)
    return tmp_path


def run_cli(*args):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.sample", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_good_run_succeeds(graph):
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "out" / "s.tfr"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "subgraphs: 2" in result.stdout


@pytest.mark.parametrize(
    "spec_text, fragments",
    [
        ("seed_op { op_name: 'seed' node_set_name: 'paper' \n oops }", ["bad.pbtxt:2"]),
        (GOOD_SPEC.replace('edge_set_name: "cites"', 'edge_set_name: "nope"'), ["'nope'", "hop"]),
        (
            GOOD_SPEC.replace('node_set_name: "paper"', 'node_set_name: "x"'),
            ["node_set_name", "'x'"],
        ),
        (
            GOOD_SPEC.replace('input_op_names: "seed"', 'input_op_names: "zz"'),
            ["'zz'", "not defined"],
        ),
        (GOOD_SPEC.replace("sample_size: 2", "sample_size: 0"), ["sample_size", "hop"]),
        (GOOD_SPEC.replace("strategy: RANDOM_UNIFORM", ""), ["TOP_K", "weight", "cites"]),
    ],
)
def test_bad_spec_is_one_line(graph, spec_text, fragments):
    (graph / "bad.pbtxt").write_text(spec_text)
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "bad.pbtxt"),
        "--output_samples", str(graph / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, *fragments)


def test_missing_table_is_one_line(graph):
    os.remove(graph / "cites.csv")
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "cites.csv")


def test_missing_schema_is_one_line(graph):
    result = run_cli(
        "--graph_schema", str(graph / "nowhere"), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "nowhere")


def test_bad_cell_found_by_a_worker_is_one_line(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\n")
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "paper.csv", "row 2")
