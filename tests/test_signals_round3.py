"""Reliability round 3, classes A, B, C, J and Q: signals and dead processes during real runs.

A  SIGTERM and SIGHUP end a run as Ctrl-C does: one line, exit 143/129, nothing left but the
   manifest in the output folder and nothing in TMPDIR; no final name holds a half-written file.
B  an SDK worker killed by SIGKILL (as the out-of-memory killer does) ends the run in one line.
C  a fork server that dies once it listens costs the run nothing (its clients start cold workers).
J  the InMemory memory check takes the process limit (ulimit -v) into account; a fork server
   that ends leaves no folder in TMPDIR.
Q  a Ctrl-C that library code caught and dropped still ends the run (exit 130, one line).

Every wait is on a file or a process state, with a generous bound for "it ends".
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from pipelines.runtime import sdk_fork_server
from sampler.tools import synthetic
from tests.test_interrupts import session_processes

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MULTI = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
MANIFEST = ".beam_graph_manifest.json"


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    """A 6,000-paper MAG-shaped graph (CSV), as tests/test_interrupts.py's: its sampling runs
    for tens of seconds here."""
    folder = tmp_path_factory.mktemp("signals")
    graph = folder / "graph"
    subprocess.run(
        [sys.executable, "-m", "pipelines.generate", "--num_papers", "6000",
         "--output_dir", str(graph), "--format", "csv"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), check=True, capture_output=True,
        timeout=300,
    )  # fmt: skip
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(folder / "spec.pbtxt"))
    return graph, spec


class Run:
    """`python -m args` in its own session (as a terminal starts it), its output read as it
    comes."""

    def __init__(self, args, tmpdir=None):
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONFAULTHANDLER="1")
        if tmpdir is not None:
            env["TMPDIR"] = str(tmpdir)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, env=env, start_new_session=True,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True),
            threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def wait_for(self, condition, what: str, timeout: float = 240) -> None:
        deadline = time.time() + timeout
        while not condition():
            assert self.proc.poll() is None, f"ended before {what}: {''.join(self.err)}"
            assert time.time() < deadline, f"never {what}"
            time.sleep(0.01)

    def stopped(self):
        """A context in which the whole session is stopped (SIGSTOP): what is checked and sent
        then lands at one point of the run; SIGCONT when it ends."""
        run = self

        class Stopped:
            def __enter__(self):
                os.killpg(run.proc.pid, signal.SIGSTOP)
                return self

            def __exit__(self, *exc):
                os.killpg(run.proc.pid, signal.SIGCONT)
                return False

        return Stopped()

    def end(self, timeout: float = 120):
        """(exit code, stderr, processes of its session left); the run must end in `timeout`."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGABRT)  # its threads' stacks, to stderr
            time.sleep(3)
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"no end in {timeout} s:\n" + "".join(self.err)[-20000:]) from None
        time.sleep(2)
        left = session_processes(self.proc.pid)
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
        for reader in self._readers:
            reader.join(timeout=10)
        return self.proc.returncode, "".join(self.err), left


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line and not line.startswith("progress:")]


def sample_args(mag, out, *extra):
    graph, spec = mag
    return ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec", spec,
            "--output_samples", str(out / "samples@4"), "--progress_interval", "0.2", *extra]  # fmt: skip


def snapshot_built(out):
    return lambda: any(out.rglob("graph.json"))


# --------------------------------------------------------------------------- A: SIGTERM, SIGHUP


@pytest.mark.parametrize(
    "extra, sig, whole_group, code",
    [
        (MULTI, signal.SIGTERM, False, 143),
        ([], signal.SIGHUP, True, 129),
    ],
    ids=["sigterm-2-workers", "sighup-in-process"],
)
def test_sigterm_and_sighup_end_a_sample_run_like_ctrl_c(mag, tmp_path, extra, sig, whole_group, code):  # fmt: skip
    out, temp = tmp_path / "out", tmp_path / "tmp"
    temp.mkdir()
    run = Run(sample_args(mag, out, *extra), tmpdir=temp)
    run.wait_for(snapshot_built(out), "the graph snapshot was built")
    with run.stopped():
        assert not (out / "run_summary.json").exists(), "the run had ended"
        (os.killpg if whole_group else os.kill)(run.proc.pid, sig)
    exit_code, err, left = run.end()
    name = signal.Signals(sig).name
    assert exit_code == code, err
    assert "Traceback" not in err, err
    assert error_lines(err) == [
        f"error: interrupted ({name}); the run's partial output in {out} was removed (its"
        " manifest and any dead letters stay)"
    ], err
    assert left == []
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST]
    assert sorted(p.name for p in temp.iterdir()) == []  # no beam-*temp*, fork folder or log


def test_sigterm_during_in_memory_shard_writing_removes_them(mag, tmp_path):
    out, temp = tmp_path / "out", tmp_path / "tmp"
    temp.mkdir()
    run = Run(sample_args(mag, out, "--runner", "InMemory"), tmpdir=temp)
    run.wait_for(lambda: any(out.rglob("samples-00000-of-00004")), "a shard was being written")
    with run.stopped():
        assert not (out / "run_summary.json").exists(), "the run had ended"
        os.kill(run.proc.pid, signal.SIGTERM)
    exit_code, err, left = run.end()
    assert exit_code == 143, err
    assert len(error_lines(err)) == 1 and "interrupted (SIGTERM)" in err, err
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST]
    assert sorted(p.name for p in temp.iterdir()) == []


def _tfrecord_complete(path) -> bool:
    """Whether the file is whole TFRecords to its last byte (framing and checksums)."""
    from sampler.errors import UserError
    from sampler.io import tfrecord

    try:
        with open(path, "rb") as f:
            for _ in tfrecord.records(str(path), f):
                pass
    except UserError:
        return False
    return True


def test_a_killed_in_memory_run_leaves_no_truncated_shard_under_its_final_name(mag, tmp_path):
    """SIGKILL (no cleanup can run) while the shards are written: whatever carries a final
    shard name is a complete TFRecord file."""
    out = tmp_path / "out"
    run = Run(sample_args(mag, out, "--runner", "InMemory"))
    shard = "samples-00000-of-00004"
    run.wait_for(lambda: any(p.stat().st_size > 100_000 for p in out.rglob(shard)), "shards grew")
    with run.stopped():
        assert not (out / "run_summary.json").exists(), "the run had ended"
        os.killpg(run.proc.pid, signal.SIGKILL)
    run.end()
    finals = sorted(out.glob("samples-*-of-00004"))
    assert all(_tfrecord_complete(p) for p in finals), [p.name for p in finals]


# --------------------------------------------------------------------------- B: a dead worker


def _forked_workers(sid: int) -> list[int]:
    """The SDK workers the fork server of session `sid` forked: the children of the server,
    the CLI's child that is no worker's client (a fork of the CLI itself, run as a program)."""
    parents, commands = {}, {}
    for pid in session_processes(sid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                parents[int(pid)] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                commands[int(pid)] = f.read()
        except OSError:
            continue
    servers = [
        pid for pid, parent in parents.items()
        if parent == sid and b"sdk_fork_client" not in commands.get(pid, b"sdk_fork_client")
    ]  # fmt: skip
    return [pid for pid, parent in parents.items() if parent in servers]


def test_an_sdk_worker_killed_by_sigkill_ends_the_run_in_one_line(mag, tmp_path):
    out, temp = tmp_path / "out", tmp_path / "tmp"
    temp.mkdir()
    run = Run(sample_args(mag, out, *MULTI), tmpdir=temp)
    run.wait_for(snapshot_built(out), "the graph snapshot was built")
    run.wait_for(lambda: _forked_workers(run.proc.pid), "a worker was forked")
    with run.stopped():
        assert not (out / "run_summary.json").exists(), "the run had ended"
        os.kill(_forked_workers(run.proc.pid)[0], signal.SIGKILL)
    exit_code, err, left = run.end()
    lines = error_lines(err)
    assert exit_code == 1, err
    assert "Traceback" not in err and "Channel closed" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error: SDK worker process"), err
    assert "killed by SIGKILL" in lines[0], err
    assert left == []
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST]


# --------------------------------------------------------------------------- C: a dead fork server


def test_a_client_of_a_dead_fork_server_starts_a_cold_worker(tmp_path):
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    server.wait_ready()
    os.kill(server._process.pid, signal.SIGKILL)  # dies once it listens: its socket stays
    server._process.wait()
    cold = f"{sys.executable} -c 'import sys; print(\"cold worker\"); sys.exit(3)'"
    try:
        done = subprocess.run(
            [sys.executable, "-I", sdk_fork_server.CLIENT, server.socket_path, cold],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
    finally:
        server.stop()
    assert done.returncode == 3, done
    assert done.stdout == "cold worker\n", done
    assert "starting a cold SDK worker" in done.stderr, done


def test_a_pipeline_whose_fork_server_died_runs_on_cold_workers(tmp_path):
    """Deterministic: the server is killed once it listens, before the run asks for workers.
    Before the fix the runner waited for its workers forever."""
    result = tmp_path / "count.txt"
    script = textwrap.dedent(f"""
        import os, signal
        import apache_beam as beam
        from pipelines.runtime.runner import new_pipeline, remove_pipeline_temp_dirs
        pipeline = new_pipeline({MULTI!r}, None)
        server = pipeline.runner._fork_server
        server.wait_ready()
        os.kill(server._process.pid, signal.SIGKILL)
        server._process.wait()
        def write(n):
            with open({str(result)!r}, "w") as f:
                f.write(str(n))
        _ = (pipeline | beam.Create(range(100)) | beam.Map(lambda x: x * 2)
             | beam.combiners.Count.Globally() | beam.Map(write))
        pipeline.run().wait_until_finish()
        remove_pipeline_temp_dirs()
    """)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp), PYTHONPATH=ROOT)
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-5000:]
    assert result.read_text() == "100"
    assert not [p.name for p in temp.iterdir() if p.name.startswith("beam-graph-fork-")]


# --------------------------------------------------------------------------- J: memory limits

_LIMITED = textwrap.dedent("""
    import resource, sys
    from pipelines import partition
    with open("/proc/self/status") as f:
        vm = int(f.read().split("VmSize:")[1].split()[0]) * 1024
    # ulimit -v: what the interpreter holds now, plus 150 MB
    resource.setrlimit(resource.RLIMIT_AS, (vm + 150 * 2**20, resource.RLIM_INFINITY))
    sys.exit(partition.main(sys.argv[1:]))
""")


def test_the_in_memory_memory_check_takes_the_process_limit(mag, tmp_path):
    graph, _ = mag
    out = tmp_path / "parts"
    done = subprocess.run(
        [sys.executable, "-c", _LIMITED, "--graph_schema", str(graph), "--output_dir", str(out),
         "--graph_name", "mag", "--num_parts", "2", "--runner", "InMemory"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=240,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.startswith("error: --runner InMemory: the graph needs about"), done.stderr
    assert "ulimit -v" in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr


def test_a_fork_server_that_is_terminated_removes_its_folder(tmp_path):
    """SIGTERM (the Ctrl-C path sends it to every child) while no runner stops the server."""
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    server.wait_ready()
    folder = os.path.dirname(server.socket_path)
    os.kill(server._process.pid, signal.SIGTERM)
    server._process.wait(timeout=60)
    assert not os.path.exists(folder)


# --------------------------------------------------------------------------- Q: a lost Ctrl-C

_SWALLOWS = textwrap.dedent("""
    import os, signal, sys
    from pipelines.runtime import runner
    def body(argv):
        runner.note_output(argv[0])
        try:  # library code that catches everything (a __del__, a callback) drops the Ctrl-C
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0)  # the handler runs here
        except KeyboardInterrupt:
            pass
    sys.exit(runner.run_main(body, sys.argv[1:]))
""")


def test_a_ctrl_c_that_library_code_dropped_still_ends_the_run(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _SWALLOWS, str(tmp_path)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 130, done
    assert done.stderr.startswith("error: interrupted (Ctrl-C); the run's partial output in")
    assert len(done.stderr.splitlines()) == 1, done.stderr
