"""Output folders (classes D, F and P): one run per folder, every folder a run writes
is the run's, and the input check refuses only what could replace or re-read an input.

A run that is still going is a real CLI run paused mid-read: one file of its input glob is a
named pipe (FIFO), and the run waits on it, holding its output folder, until the test writes the
rows and closes the pipe. The test knows the run is reading when its own open of the pipe for
writing succeeds (a FIFO opens for writing only once a reader has it open): no sleeps.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from pipelines import partition as partition_cli
from pipelines import sample as sample_cli
from pipelines.outputs import output_lock
from pipelines.reporting import accounting
from sampler.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=str(ROOT))

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  metadata { filename: "PAPERS" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper" metadata { filename: "cites.csv" } } }
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""
PAPERS = "#id,feat\np0,1;2\np1,3;4\np2,5;6\n"
CITES = "#source,#target\np0,p1\np1,p2\np2,p0\n"


def make_graph(folder: Path, papers: str = "paper.csv") -> Path:
    folder.mkdir(parents=True)
    (folder / "graph_schema.pbtxt").write_text(SCHEMA.replace("PAPERS", papers))
    (folder / "cites.csv").write_text(CITES)
    (folder / "spec.pbtxt").write_text(SPEC)
    if "*" not in papers:
        (folder / papers).write_text(PAPERS)
    return folder


@pytest.fixture()
def graph(tmp_path):
    return make_graph(tmp_path / "graph")


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, stderr
    return errors[0]


class PausedRun:
    """A CLI run (a subprocess) whose input glob holds the FIFO `fifo`: it waits there, mid-run
    and holding its output folder, until finish() writes `rows` to the pipe and closes it."""

    def __init__(self, module: str, argv: list[str], fifo: Path, rows: str):
        os.mkfifo(fifo)
        self.fifo, self.rows = fifo, rows
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *argv], cwd=ROOT, env=ENV,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.fd = None

    def wait_reading(self, timeout: float = 300.0) -> None:
        """Returns once the run has the pipe open for reading (it holds its output by then)."""
        deadline = time.monotonic() + timeout
        while self.fd is None:
            try:
                self.fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as e:
                if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                    raise
                if self.proc.poll() is not None:
                    _, err = self.proc.communicate()
                    pytest.fail(f"the run ended before reading its input: {err[-3000:]}")
                assert time.monotonic() < deadline, "the run never opened its input"
                time.sleep(0.05)
        os.set_blocking(self.fd, True)

    def finish(self) -> subprocess.CompletedProcess:
        if self.fd is None:
            self.wait_reading()
        os.write(self.fd, self.rows.encode())
        os.close(self.fd)
        self.fd = None
        out, err = self.proc.communicate(timeout=300)
        return subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        if self.fd is not None:
            os.close(self.fd)


def paused_graph(tmp_path: Path) -> Path:
    """A graph whose paper table is `nodes/paper-*.csv`: a real file and the FIFO paper-b.csv."""
    folder = make_graph(tmp_path / "paused", papers="nodes/paper-*.csv")
    (folder / "nodes").mkdir()
    (folder / "nodes" / "paper-a.csv").write_text("#id,feat\np0,1;2\n")
    return folder


def listing(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# ----------------------------------------------------------------------------- D: one run


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_a_second_sample_run_into_a_running_runs_folder_is_refused(tmp_path, graph, runner):
    paused = paused_graph(tmp_path)
    out = tmp_path / "out"
    extra = ["--runner", "InMemory"] if runner == "InMemory" else ["--progress_interval", "0"]
    argv_a = [
        "--graph_schema", str(paused), "--sampling_spec", str(paused / "spec.pbtxt"),
        "--output_samples", str(out / "s@2"), *extra,
    ]  # fmt: skip
    a = PausedRun("pipelines.sample", argv_a, paused / "nodes" / "paper-b.csv", "#id,feat\n"
                  "p1,3;4\np2,5;6\n")  # fmt: skip
    try:
        a.wait_reading()
        before = listing(out)
        argv_b = [
            "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
            "--output_samples", str(out / "s@2"), "--seed", "7", *extra,
        ]  # fmt: skip
        for overwrite in ([], ["--overwrite"]):
            b = subprocess.run(
                [sys.executable, "-m", "pipelines.sample", *argv_b, *overwrite],
                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert b.returncode == 2, b.stderr
            line = one_error_line(b.stderr)
            assert f"pid {a.proc.pid} on {socket.gethostname()}" in line, line
            assert "--overwrite" not in line.split(";", 1)[-1], line  # no advice to kill A
            assert listing(out) == before  # B touched nothing of A's
        done = a.finish()
    finally:
        a.kill()
    assert done.returncode == 0, done.stderr
    names = sorted(listing(out))
    assert names == [
        ".beam_graph_manifest.json", "run_summary.json", "s-00000-of-00002", "s-00001-of-00002",
        "schema.pbtxt",
    ]  # fmt: skip
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["samples"]["subgraphs_out"] == 3 and summary["flags"]["seed"] == 0


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_a_second_partition_run_into_a_running_runs_folder_is_refused(tmp_path, graph, runner):
    paused = paused_graph(tmp_path)
    out = tmp_path / "parts"
    extra = ["--runner", "InMemory"] if runner == "InMemory" else []
    argv_a = ["--graph_schema", str(paused), "--output_dir", str(out), "--graph_name", "g",
              "--num_parts", "2", *extra]  # fmt: skip
    a = PausedRun("pipelines.partition", argv_a, paused / "nodes" / "paper-b.csv",
                  "#id,feat\np1,3;4\np2,5;6\n")  # fmt: skip
    try:
        a.wait_reading()
        before = listing(out)
        argv_b = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "h",
                  "--num_parts", "1", "--seed", "3", *extra]  # fmt: skip
        for overwrite in ([], ["--overwrite"]):
            b = subprocess.run(
                [sys.executable, "-m", "pipelines.partition", *argv_b, *overwrite],
                cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300,
            )  # fmt: skip
            assert b.returncode == 2, b.stderr
            line = one_error_line(b.stderr)
            assert f"pid {a.proc.pid} on {socket.gethostname()}" in line, line
            assert listing(out) == before
        done = a.finish()
    finally:
        a.kill()
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "g.json").read_text())
    assert config["num_parts"] == 2 and config["num_nodes"] == 3
    assert not (out / "h.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part")) == ["part0", "part1"]


HOLDER = """
import sys
from pipelines.outputs import output_lock
output_lock.hold(sys.argv[1], "--holder")
print("held", flush=True)
sys.stdin.read()
"""


def test_a_marker_left_by_a_killed_run_is_stale_and_replaced(tmp_path, graph, capsys):
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], cwd=ROOT, env=ENV, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout.readline() == "held\n"
        marker = json.loads((out / output_lock.MARKER_NAME).read_text())
        assert marker["pid"] == holder.pid and marker["host"] == socket.gethostname()
        argv = [
            "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
            "--output_samples", str(out / "s@1"), "--runner", "InMemory",
        ]  # fmt: skip
        assert sample_cli.main(argv) == 2
        assert f"pid {holder.pid} on" in capsys.readouterr().err
        holder.send_signal(signal.SIGKILL)  # as the OOM killer would: no clean-up at all
        holder.wait()
    finally:
        holder.kill()
        holder.wait()
    assert (out / output_lock.MARKER_NAME).exists()  # left behind
    assert sample_cli.main(argv) == 0, capsys.readouterr().err
    assert not (out / output_lock.MARKER_NAME).exists()  # released at the end of the run
    assert (out / "s-00000-of-00001").exists()


def test_a_marker_without_a_lock_is_judged_by_its_pid_and_host(tmp_path):
    """gs:// has no lock: the marker alone says who holds the folder (here on a local path)."""
    out = tmp_path / "out"
    out.mkdir()
    marker = out / output_lock.MARKER_NAME
    me = socket.gethostname()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    marker.write_text(json.dumps({"pid": dead.pid, "host": me, "started": "x"}))
    held = output_lock.hold(str(out), "--flag", use_lock=False)  # stale: its pid is gone
    assert json.loads(marker.read_text())["pid"] == os.getpid()
    output_lock.release(str(out))
    assert not marker.exists() and held
    marker.write_text("")  # a lock file no run wrote its record into
    output_lock.hold(str(out), "--flag", use_lock=False)
    output_lock.release(str(out))
    for host, pid in [("another-host", dead.pid), (me, os.getppid())]:  # elsewhere, or alive
        marker.write_text(json.dumps({"pid": pid, "host": host, "started": "x"}))
        with pytest.raises(UserError, match=f"pid {pid} on {host}"):
            output_lock.hold(str(out), "--flag", use_lock=False)
        assert json.loads(marker.read_text())["pid"] == pid  # left as it was


# ----------------------------------------------------------------------------- F: every folder


def raw_id_rows(out: Path) -> int:
    return sum(pq.read_table(p).num_rows for p in (out / "raw_id_mappings").rglob("*.parquet"))


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_overwrite_replaces_every_folder_of_a_graphstorm_run(tmp_path, graph, runner):
    out = tmp_path / "parts"
    argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
            "--num_parts", "2", "--layout", "graphstorm"]  # fmt: skip
    argv += ["--runner", "InMemory"] if runner == "InMemory" else []
    assert partition_cli.main([*argv, "--num_shards", "8"]) == 0
    first = sorted(listing(out))
    assert partition_cli.main([*argv, "--num_shards", "2", "--overwrite"]) == 0
    assert raw_id_rows(out) == 3  # one row per paper, none left from the first run
    second = listing(out)
    manifest = json.loads((out / accounting.MANIFEST_NAME).read_text())
    # Every file of the folder is the run's: listed in its manifest, nothing else there.
    assert sorted(manifest["files"]) == sorted(set(second) - {accounting.MANIFEST_NAME})
    assert [n for n in first if n.startswith("raw_id_mappings/")]  # the first run wrote some
    # A failed run (too many bad rows) leaves none of its folders behind, raw_id_mappings too.
    (graph / "paper.csv").write_text(PAPERS + "p3,oops\n")
    assert partition_cli.main([*argv, "--overwrite"]) == 2
    assert not (out / "raw_id_mappings").exists()
    assert not [n for n in listing(out) if n.startswith(("part", "node_ids/"))]


def test_every_file_a_run_writes_is_in_its_manifest(tmp_path, graph):
    """The ownership audit: for sample (both runners) and partition (both layouts), after a run
    the manifest lists every file in the output folder, and each matches an owned pattern."""
    runs = []
    for runner in (["--runner", "InMemory"], ["--progress_interval", "0"]):
        out = tmp_path / f"s{len(runs)}"
        argv = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
                "--output_samples", str(out / "s@2"), "--input_seeds", str(tmp_path / "seeds.csv"),
                *runner]  # fmt: skip
        (tmp_path / "seeds.csv").write_text("#id\np0\nnope\n")  # a rejected seed's file too
        assert sample_cli.main(argv) == 0
        runs.append((out, sample_cli.owned_outputs(sample_cli.parse_args(argv)[0])))
    for layout in ("dgl", "graphstorm"):
        out = tmp_path / f"p{len(runs)}"
        argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
                "--num_parts", "2", "--layout", layout, "--runner", "InMemory"]  # fmt: skip
        assert partition_cli.main(argv) == 0
        runs.append((out, partition_cli.owned_outputs(partition_cli.parse_args(argv)[0])))
    for out, owned in runs:
        files = set(listing(out)) - {accounting.MANIFEST_NAME}
        manifest = json.loads((out / accounting.MANIFEST_NAME).read_text())
        assert sorted(manifest["files"]) == sorted(files), out
        assert all(accounting.owned_matcher(owned).fullmatch(f) for f in files), out


# ----------------------------------------------------------------------------- P: input check


def run_sample(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pipelines.sample", *args, "--runner", "InMemory"],
        cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_a_new_folder_beside_the_seeds_and_the_spec_is_accepted(tmp_path, graph):
    work = tmp_path / "work"
    work.mkdir()
    (work / "seeds.csv").write_text("#id\np0\np2\n")
    (work / "spec.pbtxt").write_text(SPEC)
    result = run_sample(
        work, "--graph_schema", str(graph), "--sampling_spec", "spec.pbtxt",
        "--input_seeds", "seeds.csv", "--output_samples", "out/samples@2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (work / "out" / "samples-00001-of-00002").exists()
    assert (work / "seeds.csv").read_text() == "#id\np0\np2\n"
    # Output straight into the graph's folder replaces nothing either (its schema is
    # graph_schema.pbtxt, the output's schema.pbtxt).
    result = run_sample(
        tmp_path, "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "samples@1"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (graph / "paper.csv").read_text() == PAPERS


def test_what_would_replace_or_re_read_an_input_is_refused(tmp_path, graph):
    work = tmp_path / "work"
    work.mkdir()
    (work / "seeds.csv").write_text("#id\np0\n")
    base = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt")]
    cases = [
        # the output is an input
        (["--input_seeds", "seeds.csv", "--output_samples", "seeds.csv"], "replace its input"),
        # a seed glob that would read the output (this run's, or the next one's)
        (["--input_seeds", "*", "--output_samples", "s@2"], "would read the output"),
        (["--input_seeds", "seeds*", "--output_samples", "seeds_out@1"], "would read the output"),
    ]
    for args, fragment in cases:
        result = run_sample(work, *base, *args)
        assert result.returncode == 2, (args, result.stderr)
        assert fragment in one_error_line(result.stderr), (args, result.stderr)
    assert sorted(p.name for p in work.iterdir()) == ["seeds.csv"]
    # A table glob of the schema that would read the output, and a partition's part<i> folder
    # (the run's own) that holds an input table.
    (graph / "graph_schema.pbtxt").write_text(SCHEMA.replace("PAPERS", "*.csv"))
    result = run_sample(work, *base, "--output_samples", str(graph / "s.csv"))
    assert "would read the output" in one_error_line(result.stderr)
    parts = tmp_path / "parts"
    make_graph(parts / "part1", papers="paper.csv")
    argv = [
        "--graph_schema",
        str(parts / "part1"),
        "--output_dir",
        str(parts),
        "--graph_name",
        "g",
        "--num_parts",
        "2",
        "--runner",
        "InMemory",
        "--overwrite",
    ]
    result = subprocess.run([sys.executable, "-m", "pipelines.partition", *argv], cwd=ROOT,
                            env=ENV, capture_output=True, text=True, timeout=300)  # fmt: skip
    assert "part1" in one_error_line(result.stderr) and result.returncode == 2
    assert sorted(p.name for p in (parts / "part1").iterdir()) == [
        "cites.csv", "graph_schema.pbtxt", "paper.csv", "spec.pbtxt",
    ]  # fmt: skip


def test_every_owned_pattern_has_an_example_the_input_check_uses(graph):
    """The names check_re_read tries are one per owned pattern (and common output), each
    matching its pattern: a new kind of output file cannot slip past the input check."""
    from sampler.schema import load_graph

    sample_config = sample_cli.parse_args(
        ["--graph_schema", str(graph), "--sampling_spec", "s", "--output_samples", "o/s@3"]
    )[0]
    partition_args = partition_cli.parse_args(
        ["--graph_schema", str(graph), "--output_dir", "o", "--graph_name", "g", "--num_parts", "2"]
    )[0]
    cases = [
        (sample_cli.owned_outputs(sample_config), sample_cli.output_examples(sample_config)),
        (
            partition_cli.owned_outputs(partition_args),
            partition_cli.output_examples(partition_args, load_graph(str(graph))),
        ),
    ]
    for owned, examples in cases:
        patterns = [*owned, *accounting.COMMON_OUTPUTS]
        for pattern in patterns:
            assert any(re.fullmatch(pattern, name) for name in examples), pattern
        for name in examples:
            assert any(re.fullmatch(p, name) for p in patterns), name


def test_clean_up_deletes_nothing_in_a_folder_the_process_does_not_hold(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "s-00000-of-00001").write_bytes(b"another run's shard")
    accounting.remove_leftovers(str(out), [r"s-\d{5}-of-\d{5}"])
    assert (out / "s-00000-of-00001").exists()
    output_lock.hold(str(out), "--flag")
    try:
        accounting.remove_leftovers(str(out), [r"s-\d{5}-of-\d{5}"])
    finally:
        output_lock.release(str(out))
    assert sorted(p.name for p in out.iterdir()) == []
