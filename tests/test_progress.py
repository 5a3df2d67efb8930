"""Progress lines during a sampling run and the counter summary at its end."""

from __future__ import annotations

import io
import time

import pytest

from pipelines.reporting import progress as progress_mod
from pipelines.reporting.progress import Progress, stage_label, summary_lines
from sampler.tools import synthetic
from tests.pipeline_helpers import oracle_records, read_records, run_pipeline


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    schema = synthetic.write_graph(synthetic.generate_mag(300, seed=2), str(root / "graph"))
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return root, schema, spec


def test_run_prints_progress_and_a_counter_summary_and_records_are_unchanged(mag, capsys):
    root, schema, spec = mag
    out = root / "out"
    run_pipeline(schema, spec, f"{out}/samples@2", "--progress_interval", "0.05")
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.startswith("progress:")]
    assert lines, "no progress line"
    stages = {line.split("stage ", 1)[1].split()[0] for line in lines}
    assert stages & {s for s in stages if s.startswith(("ReadGraph/", "Sample/", "Write"))}
    assert all("subgraphs " in line and "/s)" in line for line in lines)
    summary = captured.out.splitlines()
    assert "subgraphs: 300 in" in captured.out
    nodes = next(line for line in summary if line.startswith("nodes per subgraph (mean):"))
    edges = next(line for line in summary if line.startswith("edges per subgraph (mean):"))
    assert "paper " in nodes and "cites " in edges and "has_topic " in edges
    assert "bad records: 0" in summary
    assert any(line.startswith("time per stage (runner-reported): ") for line in summary)
    # The pass-through counter changes nothing in the output.
    assert sorted(read_records(f"{out}/samples-*")) == sorted(oracle_records(schema, spec))
    # Its per-set counters agree with the records themselves.
    from tensorflow.core.example import example_pb2

    examples = [example_pb2.Example.FromString(r) for r in read_records(f"{out}/samples-*")]
    total = sum(e.features.feature["nodes/paper.#size"].int64_list.value[0] for e in examples)
    assert f"paper {total:,}" in next(line for line in summary if line.startswith("nodes in total"))


def test_progress_zero_interval_prints_nothing(mag, capsys):
    root, schema, spec = mag
    run_pipeline(schema, spec, f"{root}/quiet/samples", "--progress_interval", "0")
    assert "progress:" not in capsys.readouterr().err


class FakeTerminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_redraws_one_line_on_a_terminal_and_counts_records():
    stream = FakeTerminal()
    with Progress(0.05, stream=stream) as progress:
        progress.stage = "Sample/Assemble"
        progress_mod.LOCAL_COUNT.add(42)
        time.sleep(1.3)
    text = stream.getvalue()
    assert text.startswith("\r") and text.endswith("\n")
    assert text.count("\n") == 1  # redrawn in place, one final newline
    assert "stage Sample/Assemble  subgraphs 42 (" in text


def test_progress_lines_on_a_pipe():
    stream = io.StringIO()
    with Progress(0.05, stream=stream):
        time.sleep(0.3)
    lines = stream.getvalue().splitlines()
    assert len(lines) >= 2 and all(line.startswith("progress: ") for line in lines)


def test_stage_label_and_summary_lines():
    fused = (
        "((((ref_AppliedPTransform_Sample-Op-seed--paper-Join_141)"
        "+(Sample/Op/seed->paper/Join/CoGroupByKeyImpl/Flatten/Write/1))"
    )
    assert stage_label(fused) == "Sample/Op/seed->paper"
    assert stage_label("ref_AppliedPTransform_x_1") is None
    counters = {
        "subgraphs": 4,
        "output_nodes/paper": 10,
        "output_edges/cites": 6,
        "seeds_not_in_node_set": 2,
        "nodes_not_in_node_set/author": 1,
        "bad_records/paper": 5,
        "self_loops/cites": 7,
        "sampled_edges/x": 9,
    }
    lines = summary_lines(counters, {"Sample/Assemble": 2.5, "Write": 0.01})
    assert lines[0] == "nodes per subgraph (mean): paper 2.5"
    assert lines[1] == "nodes in total: paper 10"
    assert lines[2] == "edges per subgraph (mean): cites 1.5"
    assert "bad records: 5 (paper 5)" in lines
    assert "graph issues: 3 (nodes_not_in_node_set/author 1, seeds_not_in_node_set 2)" in lines
    assert lines[-1] == "time per stage (runner-reported): Sample/Assemble 2.5s"


def test_progress_says_when_the_kernels_compile(tmp_path, monkeypatch):
    """While a process of this machine holds the compile lock (a worker compiling the kernels
    into a cold cache), the line says so instead of "subgraphs 0 (0/s)"."""
    import fcntl

    from sampler import jit_cache

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    stream = io.StringIO()
    p = Progress(5, stream=stream)
    assert "stage starting  subgraphs 0" in p.line()  # no lock file yet
    with open(jit_cache.lock_path(), "a") as held:
        assert "stage starting" in p.line()  # the lock is there, free
        fcntl.flock(held, fcntl.LOCK_EX)
        assert p.line().endswith("compiling the kernels (once per machine)")
        fcntl.flock(held, fcntl.LOCK_UN)
    assert "stage starting  subgraphs 0" in p.line()
