"""gs:// failures against a real GCS JSON API server (gcp-storage-emulator) and a fault-injecting
proxy in front of it (tests/gcs_fault_proxy.py): every failure ends in one line naming the path,
the server and the cause, within the deadline that BEAM_GRAPH_GCS_RETRY_S names.

* Errors the server answers (a bucket that does not exist, an object that does not exist, a 403
  on an upload or a download) and object names the tool does not take ('#', '?'): one line,
  exit 2, no traceback, on both runners and in partition and stats.
* The output marker on gs://: reading back the run's own marker may fail (a 404 once, a 503
  every time, no answer); that is not "another run is writing there", and the marker goes.
* The deadline: with the server stopped (SIGSTOP) or every request left unanswered, the line
  comes within the deadline (plus a margin for a loaded machine) of the server's stop.

The CLIs run in their own processes, as a user runs them (tests/test_gcs_emulator.py).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from pipelines import sample as sample_cli
from tests.gcs_fault_proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[1]
DEADLINE_S = 4  # BEAM_GRAPH_GCS_RETRY_S of the deadline runs
# What a line may take beyond the deadline: the run's clean-up (each request after the deadline
# is one short try) and a loaded machine. Before, it came after 60 s (a request's own timeout)
# at the least.
MARGIN_S = 8
MARKER = ".beam_graph_run.json"


def cli(*args: str, env: dict, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=timeout,
    )  # fmt: skip


def cli_all(runs: dict[str, list[str]], env: dict) -> dict[str, subprocess.CompletedProcess]:
    """The CLIs of `runs` ({name: args}) at once (their imports overlap), each to its end."""
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for name, args in runs.items()
    }
    out = {}
    for name, proc in procs.items():
        try:
            stdout, stderr = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
        out[name] = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    return out


def one_line(result: subprocess.CompletedProcess) -> str:
    lines = result.stderr.splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr[-4000:]
    assert lines[0].startswith("error: ") and "Traceback" not in result.stderr
    return lines[0]


@pytest.fixture(scope="module")
def graph(tmp_path_factory, gcs_emulator) -> tuple[Path, str]:
    """A 100-paper MAG-shaped Parquet graph with its sampling spec: (local folder, gs:// folder)."""
    local = tmp_path_factory.mktemp("graph")
    subprocess.run(
        [sys.executable, "-m", "pipelines.generate", "--num_papers", "100", "--output_dir",
         str(local), "--format", "parquet", "--num_shards", "2", "--write_spec"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True, capture_output=True,
    )  # fmt: skip
    return local, gcs_emulator.upload_folder(local, "in/graph")


@pytest.fixture(scope="module")
def proxy(gcs_emulator):
    proxy = FaultProxy(gcs_emulator.url).start()
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def through(proxy, gcs_emulator):
    """The environment of a run whose gs:// requests go through the proxy (no faults yet)."""
    proxy.clear()
    yield lambda **extra: gcs_emulator.env(STORAGE_EMULATOR_HOST=proxy.url, **extra)
    proxy.clear()


def sample_args(remote: str, output: str, *flags: str) -> list[str]:
    return ["pipelines.sample", "--graph_schema", remote, "--sampling_spec",
            f"{remote}/sampling_spec.pbtxt", "--output_samples", output, *flags]  # fmt: skip


# ------------------------------------------------------------------ errors the server answers


@pytest.fixture(scope="module")
def samples_on_gcs(graph, gcs_emulator, tmp_path_factory) -> str:
    """A finished sample output on the bucket (a local run's folder, uploaded)."""
    local, _ = graph
    out = tmp_path_factory.mktemp("samples")
    assert sample_cli.main(["--graph_schema", str(local), "--sampling_spec",
                            str(local / "sampling_spec.pbtxt"), "--output_samples",
                            str(out / "samples@2"), "--runner", "InMemory"]) == 0  # fmt: skip
    return gcs_emulator.upload_folder(out, "in/samples") + "/samples@2"


def test_a_bucket_that_does_not_exist_is_one_line(graph, samples_on_gcs, gcs_emulator):
    """An output folder in a bucket that does not exist: sample on both runners, partition,
    stats."""
    _, remote = graph
    env = gcs_emulator.env()
    runs = {
        "sample InMemory": sample_args(remote, "gs://no-such-bucket/s/samples@2", "--runner",
                                       "InMemory"),
        "sample Beam": sample_args(remote, "gs://no-such-bucket/s/samples@2"),
        "partition": ["pipelines.partition", "--graph_schema", remote, "--output_dir",
                      "gs://no-such-bucket/p", "--graph_name", "g", "--num_parts", "2"],
        "stats": ["pipelines.stats", "--samples", samples_on_gcs, "--graph_schema", remote,
                  "--output_dir", "gs://no-such-bucket/st", "--no_plots"],
    }  # fmt: skip
    for name, result in cli_all(runs, env).items():
        line = one_line(result)
        assert "gs://no-such-bucket/" in line, (name, line)
        assert "the bucket gs://no-such-bucket does not exist" in line, (name, line)
        assert f"the storage emulator at {gcs_emulator.url}" in line, (name, line)


def test_a_spec_that_does_not_exist_is_one_line(graph, gcs_emulator):
    _, remote = graph
    spec = f"{remote}/no_such_spec.pbtxt"
    args = sample_args(remote, gcs_emulator.gs("b/spec/samples@2"), "--runner", "InMemory")
    args[args.index("--sampling_spec") + 1] = spec
    line = one_line(cli(*args, env=gcs_emulator.env()))
    assert spec in line and "no such object" in line, line
    assert f"the storage emulator at {gcs_emulator.url}" in line, line


FORBIDDEN = {  # (the requests answered 403, the runner's flags)
    # every upload (the first is the output's marker), --runner InMemory
    "upload": ((r"^/upload/", "POST"), ["--runner", "InMemory"]),
    # the download of the schema's bytes, --runner InMemory
    "download": ((r"graph_schema\.pbtxt\?.*alt=media", "GET"), ["--runner", "InMemory"]),
    # the uploads of the pipeline's own files, in the Beam runner's worker
    "pipeline upload": ((r"^/upload/.*upload_id=.*temp-samples", "PUT"), []),
}


@pytest.mark.parametrize("request_kind", FORBIDDEN)
def test_a_403_is_one_line_naming_the_object(request_kind, graph, gcs_emulator, through, proxy):
    _, remote = graph
    out = f"b/forbidden-{request_kind.replace(' ', '-')}"
    (path, method), flags = FORBIDDEN[request_kind]
    proxy.add("403", method=method, path=path)
    line = one_line(cli(*sample_args(remote, gcs_emulator.gs(f"{out}/samples@2"), *flags),
                        env=through()))  # fmt: skip
    assert proxy.first("403") is not None, proxy.seen
    named = f"{remote}/graph_schema.pbtxt" if request_kind == "download" else gcs_emulator.gs(out)
    assert named in line, line
    assert "permission denied (HTTP 403" in line and proxy.url in line, line


def test_object_names_with_hash_or_question_mark_are_one_line(graph, gcs_emulator):
    """Refused before anything is read or written: Google's naming guidelines advise against
    both ('#' reads as a generation, '?' as a wildcard, in gcloud and in Beam's matching)."""
    _, remote = graph
    spec = "in/odd?name/sampling_spec.pbtxt"  # an input (its name, not a glob)
    gcs_emulator.put(spec, gcs_emulator.get("in/graph/sampling_spec.pbtxt"))
    with_spec = sample_args(remote, gcs_emulator.gs("b/odd/samples@2"), "--runner", "InMemory")
    with_spec[with_spec.index("--sampling_spec") + 1] = gcs_emulator.gs(spec)
    runs = {  # an output folder with '#', an input with '?'
        gcs_emulator.gs("b/with#hash"): sample_args(
            remote, gcs_emulator.gs("b/with#hash/samples@2"), "--runner", "InMemory"
        ),
        gcs_emulator.gs(spec): with_spec,
    }
    for path, result in cli_all(runs, gcs_emulator.env()).items():
        line = one_line(result)
        assert path in line and "'#' or '?'" in line, line
    assert not gcs_emulator.names("b/with#hash"), "something was written"
    assert not gcs_emulator.names("b/odd"), "something was written"


# ------------------------------------------------------------------ the output marker


def marker_download(folder: str) -> str:
    """The proxy's path pattern of the download of `folder`'s marker (after the run wrote it)."""
    return rf"{folder}/\.beam_graph_run\.json\?.*alt=media"


def test_a_marker_read_back_that_fails_once_is_read_again(graph, gcs_emulator, through, proxy):
    _, remote = graph
    out = "c/once"
    proxy.add("404", method="GET", path=marker_download(out), times=1)
    result = cli(*sample_args(remote, gcs_emulator.gs(f"{out}/samples@2"), "--runner",
                              "InMemory"), env=through())  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    assert proxy.first("404") is not None, proxy.seen
    names = gcs_emulator.names(out + "/")
    assert f"{out}/run_summary.json" in names and f"{out}/{MARKER}" not in names, names


@pytest.mark.parametrize("fault", ["503", "stall"])
def test_a_marker_that_cannot_be_read_back_is_one_line_and_goes(
    fault, graph, gcs_emulator, through, proxy
):
    """Every read of the run's own marker fails: one line naming the marker and the cause
    (never "another run is writing there": there is none), within the deadline, and the
    marker the run wrote is removed."""
    _, remote = graph
    out = f"c/{fault}"
    proxy.add(fault, method="GET", path=marker_download(out))
    start = time.monotonic()
    result = cli(*sample_args(remote, gcs_emulator.gs(f"{out}/samples@2"), "--runner",
                              "InMemory"), env=through(BEAM_GRAPH_GCS_RETRY_S=str(DEADLINE_S)),
                 timeout=60)  # fmt: skip
    took = time.monotonic() - (proxy.first(fault) or start)
    line = one_line(result)
    assert "another run" not in line, line
    assert gcs_emulator.gs(f"{out}/{MARKER}") in line and proxy.url in line, line
    cause = "answered HTTP 503" if fault == "503" else "did not answer"
    assert cause in line, line
    assert took < DEADLINE_S + MARGIN_S, f"{took:.1f} s after the first failure: {line}"
    assert f"{out}/{MARKER}" not in gcs_emulator.names(out + "/")


# ------------------------------------------------------------------ the deadline


class TimedLines:
    """The stderr lines of a process with the monotonic time each arrived."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self._thread.start()

    def _read(self, proc: subprocess.Popen) -> None:
        for line in proc.stderr:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def join(self) -> None:
        self._thread.join(timeout=10)


def run_until_stopped(args: list[str], env: dict, emulator, stop, resume, out: str, after: str,
                      wait_s: float = DEADLINE_S + MARGIN_S + 20):  # fmt: skip
    """Starts the CLI, stops the server with `stop()` once the run has written an object under
    `out` whose name matches `after`, and returns (exit code, [(seconds after the stop, line)])
    (the progress lines left out; the exit's time is the last, with line None); the server is
    resumed. A run still going `wait_s` after the stop is killed."""
    proc = subprocess.Popen(
        [sys.executable, "-m", *args], cwd=ROOT, env=env, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    lines = TimedLines(proc)
    try:
        deadline = time.monotonic() + 120
        while not [n for n in emulator.names(out + "/") if re.search(after, n)]:
            assert proc.poll() is None, "\n".join(line for _, line in lines.lines)[-3000:]
            assert time.monotonic() < deadline, f"the run never wrote {after}"
            time.sleep(0.05)
        stopped = time.monotonic()
        stop()
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            pass
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        resume()
    lines.join()
    shown = [(at - stopped, line) for at, line in lines.lines if not line.startswith("progress:")]
    return proc.returncode, [*shown, (ended - stopped, None)]


def assert_line_within_deadline(code: int, lines, server: str, bucket: str) -> float:
    """One line naming a path of the run (what it was reading or writing when the server
    stopped: an input table, the output), the server and the cause, within the deadline."""
    lines = lines[:-1]  # the exit's time
    text = "\n".join(f"{at:6.1f} s  {line}" for at, line in lines)
    assert code == 2 and len(lines) == 1, f"exit {code}:\n{text[-4000:]}"
    at, line = lines[0]
    assert line.startswith("error: ") and f"gs://{bucket}/" in line and server in line, line
    assert "did not answer in time" in line, line
    assert at < DEADLINE_S + MARGIN_S, f"the line came {at:.1f} s after the server stopped"
    print(f"the line came {at:.1f} s after the server stopped (deadline {DEADLINE_S} s): {line}")
    return at


def test_a_stopped_server_ends_the_run_within_the_deadline(graph, gcs_emulator):
    """SIGSTOP of the server while the pipeline (the default Beam runner) writes."""
    _, remote = graph
    out = "d/stopped"
    pid = gcs_emulator.process.pid
    code, lines = run_until_stopped(
        sample_args(remote, gcs_emulator.gs(f"{out}/samples@2")),
        gcs_emulator.env(BEAM_GRAPH_GCS_RETRY_S=str(DEADLINE_S)), gcs_emulator,
        stop=lambda: os.kill(pid, signal.SIGSTOP), resume=lambda: os.kill(pid, signal.SIGCONT),
        out=out, after=r"/\.temp-samples-[^/]+/graph/graph-[^/]+/",  # the snapshot's files
    )  # fmt: skip
    assert_line_within_deadline(code, lines, gcs_emulator.url, gcs_emulator.bucket)


def test_stalled_requests_end_the_run_within_the_deadline(graph, gcs_emulator, through, proxy):
    """Every request left unanswered (the proxy reads it and says nothing), --runner InMemory."""
    _, remote = graph
    out = "d/stalled"
    code, lines = run_until_stopped(
        sample_args(remote, gcs_emulator.gs(f"{out}/samples@2"), "--runner", "InMemory"),
        through(BEAM_GRAPH_GCS_RETRY_S=str(DEADLINE_S)), gcs_emulator,
        stop=lambda: proxy.add("stall"), resume=proxy.clear, out=out,
        after=r"/\.beam_graph_manifest\.json$",
    )  # fmt: skip
    assert_line_within_deadline(code, lines, proxy.url, gcs_emulator.bucket)
