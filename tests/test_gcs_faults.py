"""gs:// failures against a real GCS JSON API server (gcp-storage-emulator) and a fault-injecting
proxy in front of it (tests/gcs_fault_proxy.py): every failure ends in one line naming the path,
the server and the cause.

* Errors the server answers (a bucket that does not exist, an object that does not exist, a 403
  on an upload or a download) and object names the tool does not take ('#', '?'): one line,
  exit 2, no traceback, on both runners and in partition and stats.

The CLIs run in their own processes, as a user runs them (tests/test_gcs_emulator.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import sample as sample_cli
from tests.gcs_fault_proxy import FaultProxy

ROOT = Path(__file__).resolve().parents[1]


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
