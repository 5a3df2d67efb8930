"""Standard streams that cannot be written: closed by the shell (`>&-`, `2>&-`) or a full device
(`>/dev/full`), for every CLI, as a user runs it (`sh -c 'python -m pipelines.X ... >&-'`).

Each run does its work, writes every output and exits with its own code, without a traceback;
when stderr can be written, one note says that standard output could not be. A descriptor
closed at exec is /dev/null from the start: the files the run opens never take descriptor 1 or
2, so no report line lands in a shard or a summary (the shards' records are read back whole).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

import pytest

from sampler.io import tfrecord
from tests.test_bad_inputs_round2 import write_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=ROOT)


def run_as_user(args: list[str], redirect: str) -> subprocess.CompletedProcess:
    """`python -m args REDIRECT` in a shell; stderr is a pipe unless REDIRECT names it."""
    line = shlex.join([sys.executable, "-m", *args]) + " " + redirect
    return subprocess.run(["sh", "-c", line], cwd=ROOT, env=ENV, stdin=subprocess.DEVNULL,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=300)  # fmt: skip


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("std_streams") / "graph")


@pytest.fixture(scope="module")
def samples(graph, tmp_path_factory):
    out = tmp_path_factory.mktemp("std_streams_samples")
    args = ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec",
            str(graph / "spec.pbtxt"), "--output_samples", f"{out}/s@2", "--runner", "InMemory"]  # fmt: skip
    assert run_as_user(args, "").returncode == 0
    return out


def sample_args(graph, out, *extra) -> list[str]:
    return ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec",
            str(graph / "spec.pbtxt"), "--output_samples", f"{out}/s@2", *extra]  # fmt: skip


def check_samples(out) -> None:
    """The complete output: shards whose records read back whole, schema, summary, manifest."""
    summary = json.loads((out / "run_summary.json").read_text())
    json.loads((out / ".beam_graph_manifest.json").read_text())
    assert (out / "schema.pbtxt").read_text().startswith(("node_sets", "context"))
    count = 0
    for shard in sorted(out.glob("s-0000?-of-00002")):
        with open(shard, "rb") as f:
            count += sum(1 for _ in tfrecord.records(str(shard), f))
    assert count == summary["counters"]["subgraphs"] > 0


STDOUT_MODES = [">&-", ">/dev/full"]
STDERR_MODES = ["2>&-", "2>/dev/full"]


def check_run(done: subprocess.CompletedProcess, redirect: str) -> None:
    err = done.stderr.decode()
    assert done.returncode == 0, (redirect, done.returncode, err[-3000:])
    assert "Traceback" not in err and "Error" not in err, (redirect, err[-3000:])
    if redirect in STDOUT_MODES:
        notes = [line for line in err.splitlines() if line.startswith("note: standard output")]
        why = "was closed" if redirect == ">&-" else "could not be written (no space left"
        assert len(notes) == 1 and why in notes[0], (redirect, err)


@pytest.mark.parametrize("redirect", STDOUT_MODES + STDERR_MODES)
def test_sample_in_memory_with_a_stream_that_cannot_be_written(graph, tmp_path, redirect):
    # a progress line per chunk: with 2>&- at exec it must not land in a shard opened on fd 2
    args = sample_args(graph, tmp_path, "--runner", "InMemory", "--progress_interval", "1e-9")
    check_run(run_as_user(args, redirect), redirect)
    check_samples(tmp_path)


def test_sample_on_beam_with_a_full_stdout(graph, tmp_path):
    args = sample_args(graph, tmp_path, "--direct_running_mode=multi_processing",
                       "--direct_num_workers=2")  # fmt: skip
    check_run(run_as_user(args, ">/dev/full"), ">/dev/full")
    check_samples(tmp_path)


@pytest.mark.parametrize("runner, redirect", [("InMemory", ">/dev/full"), ("Beam", "2>&-")])
def test_partition_with_a_stream_that_cannot_be_written(graph, tmp_path, runner, redirect):
    out = tmp_path / "parts"
    args = ["pipelines.partition", "--graph_schema", str(graph), "--output_dir", str(out),
            "--graph_name", "g", "--num_parts", "2"] + (["--runner", "InMemory"] if runner == "InMemory" else [])  # fmt: skip
    check_run(run_as_user(args, redirect), redirect)
    for name in ("run_summary.json", "g.json", "cut_report.json", ".beam_graph_manifest.json"):
        json.loads((out / name).read_text())
    assert (out / "part1" / "graph.dgl").stat().st_size > 0


@pytest.mark.parametrize("tool, redirect", [("validate", ">/dev/full"), ("estimate", ">&-"),
                                            ("stats", "2>/dev/full"), ("show", ">/dev/full"),
                                            ("generate", ">&-"), ("demo", "2>&-")])  # fmt: skip
def test_tools_with_a_stream_that_cannot_be_written(graph, samples, tmp_path, tool, redirect):
    spec = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt")]
    args, outputs = {
        "validate": (spec, []),
        "estimate": ([*spec, "--json", str(tmp_path / "e.json")], ["e.json"]),
        "stats": (["--samples", f"{samples}/s@2", "--output_dir", str(tmp_path)],
                  ["summary.json"]),
        "show": (["--samples", f"{samples}/s@2", "--graph_schema", str(samples / "schema.pbtxt")],
                 []),
        "generate": (["--num_papers", "20", "--output_dir", str(tmp_path)],
                     ["graph_schema.pbtxt"]),
        "demo": (["--num_papers", "20", "--output_dir", str(tmp_path), "--runner", "InMemory"],
                 ["samples/run_summary.json"]),
    }[tool]  # fmt: skip
    check_run(run_as_user([f"pipelines.{tool}", *args], redirect), redirect)
    for name in outputs:
        assert (tmp_path / name).stat().st_size > 0, name
