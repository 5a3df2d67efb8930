"""Ctrl-C (SIGINT) during a real run: one line, exit code 130, no surviving process, the
partial output removed (only the manifest stays), the inputs untouched.

Each test starts the CLI in its own session (as a terminal starts a command), waits until the
run has started (a progress line, or the manifest its output check writes), then sends SIGINT
to the whole process group, as a terminal's Ctrl-C does (or to the CLI process only).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from sampler.tools import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTERRUPTED = "error: interrupted (Ctrl-C); the run's partial output in"


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    """A 6,000-paper MAG-shaped graph (CSV): its sampling runs for tens of seconds here."""
    folder = tmp_path_factory.mktemp("interrupts")
    graph = folder / "graph"
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run(
        [sys.executable, "-m", "pipelines.generate", "--num_papers", "6000",
         "--output_dir", str(graph), "--format", "csv"],
        cwd=ROOT, env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(folder / "spec.pbtxt"))
    return graph, spec


def digest(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def session_processes(sid: int) -> list[str]:
    """The processes still alive in session `sid` (zombies excluded)."""
    alive = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            alive.append(pid)
    return alive


def interrupt(args, started, whole_group=True, tmpdir=None, settle=1.0, done=None):
    """Runs `python -m args` in a new session; once `started(stderr so far)` is true, sends
    SIGINT. Returns (exit code, stdout, stderr, processes of its session left 3 s later).

    The SIGINT is sent while the whole session is stopped (SIGSTOP, then SIGCONT), after
    checking that `done()` (the run's last file exists) is still false: it lands at a point
    where the run has provably not finished, however loaded the machine is."""
    # PYTHONFAULTHANDLER: a run that does not end is sent SIGABRT, and every thread's stack
    # goes to its stderr, which the failure shows.
    env = dict(
        os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", PYTHONFAULTHANDLER="1"
    )
    if tmpdir:
        env["TMPDIR"] = str(tmpdir)
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    out: list[str] = []
    err: list[str] = []
    readers = [
        threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True),
        threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True),
    ]
    for reader in readers:
        reader.start()
    deadline = time.time() + 240
    while not started("".join(err), proc.pid):
        assert proc.poll() is None, f"ended before it was interrupted: {''.join(err)}"
        assert time.time() < deadline, "the run never started"
        time.sleep(0.005)
    time.sleep(settle)  # well inside the run
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        assert proc.poll() is None, "the run ended before the interrupt"
        assert done is None or not done(), "the run had finished before the interrupt"
        if whole_group:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, signal.SIGINT)
    finally:
        os.killpg(proc.pid, signal.SIGCONT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGABRT)  # the stacks of the run that hangs, to its stderr
        time.sleep(3)
        for reader in readers:
            reader.join(timeout=10)
        text = "".join(line for line in "".join(err).splitlines(True) if "progress:" not in line)
        raise AssertionError("no exit 60 s after SIGINT:\n" + text[-20000:]) from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    time.sleep(3)
    left = session_processes(proc.pid)
    for pid in left:  # do not leave them behind even when the test fails
        os.kill(int(pid), signal.SIGKILL)
    for reader in readers:
        reader.join(timeout=10)
    return proc.returncode, "".join(out), "".join(err), left


def assert_one_interrupted_line(code, err, left):
    assert code == 130, err
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if not line.startswith("progress:")]
    assert len(errors) == 1 and errors[0].startswith(INTERRUPTED), err
    assert left == [], f"processes left: {left}"


def progress_line(err: str, _pid=None) -> bool:
    return "progress:" in err


@pytest.mark.parametrize(
    "extra, whole_group",
    [
        ([], True),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], True),
        (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], False),
        (["--runner", "InMemory"], True),
    ],
    ids=["in-process", "multi-process", "multi-process-parent-only", "in-memory"],
)
def test_ctrl_c_during_sample(mag, tmp_path, extra, whole_group):
    graph, spec = mag
    before = digest(graph)
    out = tmp_path / "out"
    args = ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec", spec,
            "--output_samples", str(out / "samples@4"), "--progress_interval", "0.2", *extra]  # fmt: skip
    manifest = out / ".beam_graph_manifest.json"
    started = progress_line if "InMemory" not in extra else lambda *_: manifest.exists()
    temp = tmp_path / "tmp"
    temp.mkdir()
    done = (out / "run_summary.json").exists
    code, _, err, left = interrupt(args, started, whole_group, tmpdir=temp, done=done)
    assert_one_interrupted_line(code, err, left)
    assert str(out) in err
    # Nothing that could pass for output stays: no shard, no schema, no summary, no temp folder.
    assert sorted(p.name for p in out.iterdir()) == [".beam_graph_manifest.json"]
    assert digest(graph) == before
    assert not [p.name for p in temp.iterdir() if p.name.startswith("beam-pipeline-temp")]


@pytest.mark.parametrize(
    "extra",
    [[], ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]],
    ids=["in-process", "multi-process"],
)
def test_ctrl_c_during_partition(mag, tmp_path, extra):
    graph, _ = mag
    before = digest(graph)
    out = tmp_path / "parts"
    args = ["pipelines.partition", "--graph_schema", str(graph), "--output_dir", str(out),
            "--graph_name", "mag", "--num_parts", "4", "--part_method", "lp", *extra]  # fmt: skip
    manifest = out / ".beam_graph_manifest.json"
    # a Ctrl-C sent once the run had finished its work (the process still
    # exiting) looked lost. The session is stopped while the run is checked to be going.
    done = (out / "run_summary.json").exists
    code, _, err, left = interrupt(args, lambda *_: manifest.exists(), done=done)
    assert_one_interrupted_line(code, err, left)
    assert [p.name for p in out.rglob("*") if p.is_file()] == [".beam_graph_manifest.json"]
    assert digest(graph) == before


def _maps_hold(pid: int, name: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return name in f.read()
    except OSError:
        return False


def test_ctrl_c_while_starting_is_one_line(tmp_path):
    """Before the CLI body runs (its modules still import): one line, nothing written."""
    out = tmp_path / "out"
    args = ["pipelines.sample", "--graph_schema", str(tmp_path), "--sampling_spec", "x",
            "--output_samples", str(out / "s")]  # fmt: skip
    # numpy's extension loaded: `pipelines` has set its start-up handler, the CLI body (which
    # needs the CLI module's imports) has not run yet
    code, _, err, left = interrupt(
        args, lambda _, pid: _maps_hold(pid, "_multiarray_umath"), settle=0
    )
    assert code == 130, err
    assert err.strip() == "error: interrupted (Ctrl-C); nothing written"
    assert left == []
    assert not out.exists()
