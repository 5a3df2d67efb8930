"""What a user sees on stderr when a CLI stops on their mistake: one `error:` line, first.

No TensorFlow/absl start-up noise before it (TF_CPP_MIN_LOG_LEVEL is left unset here), and
no worker tracebacks when the mistake is found by a separate worker process: those go to the
log file the line names.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  metadata { filename: "paper.csv" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper"
  metadata { filename: "cites.csv" } } }
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2 strategy: RANDOM_UNIFORM }
"""  # noqa: E501


@pytest.fixture()
def graph(tmp_path):
    folder = tmp_path / "graph"
    folder.mkdir()
    (folder / "graph_schema.pbtxt").write_text(SCHEMA)
    rows = "".join(f"p{i},{i};1\n" for i in range(40))
    (folder / "paper.csv").write_text("#id,feat\n" + rows + "p40,3;x\n")
    (folder / "cites.csv").write_text(
        "#source,#target\n" + "".join(f"p{i},p{i + 1}\n" for i in range(40))
    )
    (folder / "spec.pbtxt").write_text(SPEC)
    return folder


def run(module: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    env.update(PYTHONPATH=str(ROOT), TF_USE_LEGACY_KERAS="1")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def the_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_broken_file_found_by_a_worker_process_is_one_line_and_the_traces_go_to_a_file(graph):
    # An unterminated quote makes the rest of the file unreadable: the worker reading it fails
    # (bad rows, by contrast, are counted and judged by the driver after the run).
    rows = "".join(f"p{i},{i};1\n" for i in range(40))
    more = "".join(f"p{i},{i};1\n" for i in range(41, 50))
    (graph / "paper.csv").write_text("#id,feat\n" + rows + 'p40,"3;1\n' + more)
    result = run(
        "pipelines.sample",
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s@2"),
        "--direct_running_mode=multi_processing", "--direct_num_workers=2",
        "--progress_interval", "0",  # no progress lines on a slow machine
    )  # fmt: skip
    line = the_error_line(result)
    assert "paper.csv" in line and "quote" in line and "line 42" in line, line
    match = re.search(r"\(worker logs: (?P<path>\S+)\)$", line)
    assert match, line
    log = Path(match.group("path"))
    try:
        assert "Traceback" in log.read_text()
    finally:
        log.unlink()


@pytest.mark.parametrize(
    "command", ["sample", "partition", "validate", "estimate", "stats", "show"]
)
def test_first_stderr_line_of_a_failing_cli_is_its_error(graph, command):
    missing = str(graph / "nowhere")
    spec = str(graph / "spec.pbtxt")
    out = str(graph.parent / "out")
    args = {
        "sample": [
            "--graph_schema", missing, "--sampling_spec", spec, "--output_samples", out,
            "--progress_interval", "0",
        ],
        "partition": [
            "--graph_schema", missing, "--output_dir", out, "--graph_name", "g", "--num_parts", "2",
        ],
        "validate": ["--graph_schema", missing, "--sampling_spec", spec],
        "estimate": ["--graph_schema", missing, "--sampling_spec", spec],
        "stats": ["--samples", missing],
        "show": ["--samples", missing],
    }[command]  # fmt: skip
    result = run(f"pipelines.{command}", *args)
    if command == "validate":  # a report on stdout, exit 1, nothing on stderr
        assert result.returncode == 1 and result.stderr == "", result.stderr
        assert "nowhere" in result.stdout
        return
    line = the_error_line(result)
    assert "nowhere" in line, line
