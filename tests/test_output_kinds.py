"""What is at the name of a file a run or a tool writes: a regular file, or nothing.

* A named pipe (FIFO) at a name the run opens (the manifest, the run marker, schema.pbtxt, the
  stats outputs, estimate's statistics cache, the compile lock) is refused in one line; the run
  never waits on it. A CLI that waited would block forever, so those runs are subprocesses with
  a deadline far above their few seconds (a hang is the fault, not slowness).
* A directory at an output name (run_summary.json, schema.pbtxt, a shard, part<i>/graph.dgl) is
  refused before anything is written, not once the records are.
* A tool never writes over its own inputs (estimate --json and --stats_cache, show --png).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import estimate, partition, sample, show
from pipelines.outputs.output_lock import MARKER_NAME
from pipelines.reporting.accounting import MANIFEST_NAME
from sampler import jit_cache
from sampler.errors import UserError
from sampler.io import no_follow
from tests.test_bad_inputs_round2 import one_line, partition_args, sample_args, write_graph

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))
HANG = 300  # seconds: a run refused at its output check ends in a few; this is a hang
RUNNERS = {"InMemory": ["--runner", "InMemory"], "Beam": []}


def cli(module: str, *argv: str, env=None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            [sys.executable, "-m", module, *map(str, argv)], cwd=ROOT, env=env or ENV,
            capture_output=True, text=True, timeout=HANG,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"python -m {module} waited on a FIFO for {HANG} s")


def refused(result: subprocess.CompletedProcess, *fragments: str) -> str:
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def fifo(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    return path


# ----------------------------------------------------------------------------- FIFOs


@pytest.mark.parametrize("runner, name", [("InMemory", MANIFEST_NAME), ("Beam", "schema.pbtxt")])
def test_sample_refuses_a_fifo_at_a_name_it_writes(tmp_path, runner, name):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    pipe = fifo(out / name)
    result = cli("pipelines.sample", *sample_args(graph, out / "s", *RUNNERS[runner]))
    refused(result, str(pipe), "named pipe (FIFO)", "--output_samples")
    assert sorted(p.name for p in out.iterdir()) == [name]


def test_partition_refuses_a_fifo_at_its_marker(tmp_path):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    pipe = fifo(out / MARKER_NAME)
    result = cli("pipelines.partition", *partition_args(graph, out, "--num_parts", "2",
                                                       "--runner", "InMemory"))  # fmt: skip
    refused(result, str(pipe), "named pipe (FIFO)", "--output_dir")


def test_stats_and_estimate_refuse_a_fifo_at_their_outputs(tmp_path):
    graph = write_graph(tmp_path / "graph")
    samples = tmp_path / "samples"
    assert sample.main(sample_args(graph, samples / "s", "--runner", "InMemory")) == 0
    pipe = fifo(tmp_path / "report" / "summary.json")
    result = cli("pipelines.stats", "--samples", samples / "s", "--output_dir", pipe.parent)
    refused(result, str(pipe), "named pipe (FIFO)", "--output_dir")
    cache = fifo(Path(str(graph / "graph_schema.pbtxt") + ".degree_stats.json"))
    result = cli("pipelines.estimate", "--graph_schema", graph / "graph_schema.pbtxt",
                 "--sampling_spec", graph / "spec.pbtxt", "--probe_seeds", "0")  # fmt: skip
    refused(result, str(cache), "named pipe (FIFO)", "--stats_cache auto")


def test_stats_of_a_partition_folder_does_not_open_a_fifo_named_like_its_config(tmp_path):
    graph = write_graph(tmp_path / "graph")
    parts = tmp_path / "parts"
    argv = partition_args(graph, parts, "--num_parts", "2", "--runner", "InMemory")
    assert partition.main(argv) == 0
    fifo(parts / "other.json")
    result = cli("pipelines.stats", "--partition", parts, "--no_plots")
    assert result.returncode == 0, result.stderr[-3000:]
    assert (parts / "stats" / "partition_stats.json").is_file()


def test_a_fifo_swapped_in_after_the_check_is_refused_without_waiting(tmp_path):
    """The open itself refuses what is not a regular file (the check before it can be raced).
    The test holds the pipe open for reading, so an open that did not check would succeed and
    write into it, not wait."""
    pipe = fifo(tmp_path / "run_summary.json")
    reader = os.open(pipe, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with pytest.raises(UserError, match="named pipe"):
            no_follow.open_new(str(pipe)).close()
        os.close(os.open(pipe, os.O_WRONLY | os.O_NONBLOCK))  # (a writer, so reads end)
        with pytest.raises(UserError, match="named pipe"):
            no_follow.read_regular(str(pipe))
    finally:
        os.close(reader)


def test_a_fifo_at_the_compile_lock_is_one_line_and_the_progress_line_does_not_wait(tmp_path):
    cache = tmp_path / "numba"
    pipe = fifo(cache / jit_cache.LOCK_NAME)
    env = dict(ENV, NUMBA_CACHE_DIR=str(cache))
    probe = "from sampler import jit_cache; print(jit_cache.compiling())"
    try:
        result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=HANG)  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail("jit_cache.compiling() waited on a FIFO")
    assert result.returncode == 0 and result.stdout.strip() == "False", result.stderr
    os.environ["NUMBA_CACHE_DIR"], saved = str(cache), os.environ.get("NUMBA_CACHE_DIR")
    try:
        with pytest.raises(UserError, match=f"{pipe} is a named pipe"):
            with jit_cache.machine_lock():
                pass
    finally:
        if saved is None:
            del os.environ["NUMBA_CACHE_DIR"]
        else:
            os.environ["NUMBA_CACHE_DIR"] = saved


# ----------------------------------------------------------------------------- directories


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("name", ["run_summary.json", "schema.pbtxt", "s-00001-of-00002"])
def test_sample_refuses_a_directory_at_an_output_name_before_writing(
    tmp_path, capsys, runner, name
):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    (out / name).mkdir(parents=True)
    argv = sample_args(graph, out / "s@2", *RUNNERS[runner])
    code = sample.main(argv)
    assert sorted(p.name for p in out.iterdir()) == [name]  # no shard, no schema.pbtxt
    one_line(capsys, code, str(out / name), "is a directory", "--output_samples")


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_partition_refuses_a_directory_at_an_output_name_before_writing(tmp_path, capsys, runner):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    (out / "part1" / "graph.dgl").mkdir(parents=True)
    (out / "run_summary.json").mkdir()
    argv = partition_args(graph, out, "--num_parts", "2", "--overwrite", *RUNNERS[runner])
    code = partition.main(argv)
    assert sorted(p.name for p in out.iterdir()) == ["part1", "run_summary.json"]
    assert os.listdir(out / "part1") == ["graph.dgl"]  # nothing written
    one_line(capsys, code, "is a directory", "--output_dir")


# ----------------------------------------------------------------------------- own inputs


def test_estimate_never_writes_over_its_inputs(tmp_path, capsys):
    graph = write_graph(tmp_path / "graph")
    schema, spec, paper = graph / "graph_schema.pbtxt", graph / "spec.pbtxt", graph / "paper.csv"
    before = {p: p.read_bytes() for p in (schema, spec, paper)}
    base = ["--graph_schema", str(schema), "--sampling_spec", str(spec), "--probe_seeds", "0"]
    code = estimate.main([*base, "--json", str(schema)])
    one_line(capsys, code, f"--json {schema}", "would replace its input")
    code = estimate.main([*base, "--stats_cache", str(paper)])
    one_line(capsys, code, f"--stats_cache {paper}", f"would replace its input {paper}")
    linked = tmp_path / "spec-link.pbtxt"  # the same file under another name
    os.link(spec, linked)
    code = estimate.main([*base, "--stats_cache", "none", "--json", str(linked)])
    one_line(capsys, code, f"--json {linked}", "would replace its input")
    cache = tmp_path / "stats.json"
    code = estimate.main([*base, "--stats_cache", str(cache), "--json", str(cache)])
    one_line(capsys, code, f"--json {cache}", "would replace its input")
    assert {p: p.read_bytes() for p in before} == before
    assert estimate.main([*base, "--stats_cache", "none", "--json", os.devnull]) == 0  # a device


def test_show_never_draws_over_the_shard_it_reads(tmp_path, capsys):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    assert sample.main(sample_args(graph, out / "s", "--runner", "InMemory")) == 0
    capsys.readouterr()
    shard = out / "s"
    before = shard.read_bytes()
    code = show.main(["--samples", str(shard), "--png", str(shard)])
    one_line(capsys, code, f"--png {shard}", "would replace its input")
    code = show.main(["--samples", str(shard), "--png", str(out / "schema.pbtxt")])
    one_line(capsys, code, "would replace its input", "schema.pbtxt")
    assert shard.read_bytes() == before
