"""Both stages and the tools through gs://, against a real GCS JSON API server on a loopback
port (gcp-storage-emulator, tests/gcs_emulator.py), run as a new user runs them: the CLIs in
their own processes with STORAGE_EMULATOR_HOST set and no Google credentials.

Every run's output objects are compared, byte for byte, with the same run on local folders
(run in this process, on the same tables). Only loopback addresses are contacted.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipelines import partition as partition_cli
from pipelines import sample as sample_cli
from sampler.tools import synthetic

ROOT = Path(__file__).resolve().parents[1]
# Per run, not the same: its paths, its flags as given, its times.
RUN_SPECIFIC = {"run_summary.json"}
LINK_SPEC = 'symmetric_link_seed_op { op_name: "seed" }\n' + (
    'sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" '
    "sample_size: 4 strategy: RANDOM_UNIFORM }\n"
)


def cli(module: str, *args: str, env: dict, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"pipelines.{module}", *args], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def generate(folder: Path, fmt: str, glob: bool = False, papers: int = 200) -> Path:
    """A `papers`-paper MAG-shaped graph in `fmt`, two files per table (`@2`, or a glob), and the
    MAG spec and a link spec beside it."""
    subprocess.run(
        [sys.executable, "-m", "pipelines.generate", "--num_papers", str(papers), "--output_dir",
         str(folder), "--format", fmt, "--num_shards", "2", "--write_spec"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True, capture_output=True,
    )  # fmt: skip
    if glob:
        schema = folder / "graph_schema.pbtxt"
        schema.write_text(
            re.sub(r'filename: "([^"@]+)@2"', r'filename: "\1-*"', schema.read_text())
        )
    (folder / "link_spec.pbtxt").write_text(LINK_SPEC)
    return folder


@pytest.fixture(scope="module")
def graphs(tmp_path_factory, gcs_emulator):
    """{format: (local folder, gs:// folder)}: CSV with globs, TFRecord and Parquet with @2."""
    out = {}
    for fmt in ("csv", "tfrecord", "parquet"):
        local = generate(tmp_path_factory.mktemp(fmt), fmt, glob=fmt == "csv")
        out[fmt] = (local, gcs_emulator.upload_folder(local, f"in/{fmt}"))
    return out


def objects(emulator, prefix: str) -> dict[str, bytes]:
    """{name below prefix/: bytes} of the objects on the server."""
    start = len(prefix.rstrip("/")) + 1
    return {n[start:]: emulator.get(n) for n in emulator.names(prefix.rstrip("/") + "/")}


def local_files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file()}  # fmt: skip


def assert_same_output(emulator, prefix: str, folder: Path) -> dict[str, bytes]:
    remote, local = objects(emulator, prefix), local_files(folder)
    assert sorted(remote) == sorted(local)
    for name in remote:
        if name == ".beam_graph_manifest.json":  # the same files; listed in listing order
            ours, theirs = json.loads(remote[name]), json.loads(local[name])
            assert ours["patterns"] == theirs["patterns"]
            difference = sorted(set(ours["files"]) ^ set(theirs["files"]))
            assert not difference, difference
        elif name not in RUN_SPECIFIC:
            assert remote[name] == local[name], name
    return remote


# ------------------------------------------------------------------------- sample

TWO_WORKERS = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
SAMPLE_CASES = {
    # format, runner flags, link seeds (the `worker` placement with 1 and 2 workers, TFRecord:
    # test_worker_snapshot_on_gcs_is_copied_once_per_machine)
    "parquet-inmemory": ("parquet", ["--runner", "InMemory"], False),
    "csv-glob-topology-1": ("csv", ["--graph_placement", "topology"], False),
    "parquet-sharded-2": ("parquet", [*TWO_WORKERS, "--graph_placement", "sharded"], False),
    "parquet-links-worker-2": ("parquet", [*TWO_WORKERS, "--graph_placement", "worker",
                               "--seed_edge_set", "cites", "--negatives_per_seed", "1"], True),
}  # fmt: skip


def sample_both(emulator, graph, name: str, spec: str, flags: list[str], local_out: Path,
                env: dict | None = None) -> dict[str, bytes]:  # fmt: skip
    """Runs `sample` with the graph, spec and output on gs:// (a CLI process), then the same
    run on local folders (in this process); returns the objects after checking they hold the
    local run's bytes."""
    local, remote = graph
    bad = ["--max_bad_records", "5"]  # every runner takes it
    ok(cli("sample", "--graph_schema", remote, "--sampling_spec", f"{remote}/{spec}",
           "--output_samples", emulator.gs(f"{name}/samples@2"), *bad,
           *flags, env=env or emulator.env()))  # fmt: skip
    assert sample_cli.main(["--graph_schema", str(local), "--sampling_spec", str(local / spec),
                            "--output_samples", str(local_out / "samples@2"),
                            *bad, *flags]) == 0  # fmt: skip
    written = assert_same_output(emulator, name, local_out)
    assert {"samples-00000-of-00002", "samples-00001-of-00002", "schema.pbtxt"} <= set(written)
    assert json.loads(written["run_summary.json"])["samples"]
    # Nothing of the run's temporary folders (the worker snapshot, Beam's temp) is left.
    assert not [n for n in written if n.startswith((".temp-", "beam-temp-"))]
    return written


@pytest.mark.parametrize("case", SAMPLE_CASES)
def test_sample_through_gcs_writes_the_local_runs_bytes(case, graphs, gcs_emulator, tmp_path):
    fmt, flags, link = SAMPLE_CASES[case]
    spec = "link_spec.pbtxt" if link else "sampling_spec.pbtxt"
    sample_both(gcs_emulator, graphs[fmt], f"out/sample-{case}", spec, flags, tmp_path / "local")


def test_worker_snapshot_on_gcs_is_copied_once_per_machine(graphs, gcs_emulator, tmp_path):
    """The `worker` snapshot on gs:// (under the gs:// output): two SDK workers on one machine
    read its objects from the bucket as often as one worker does (one copy, made under the
    lock, mapped by both), and the machine's copy is removed when the run ends."""
    reads = []
    for workers in (1, 2):
        mark = gcs_emulator.log_size()
        tmpdir = tmp_path / f"tmp{workers}"
        tmpdir.mkdir()
        flags = ["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}",
                 "--graph_placement", "worker"]  # fmt: skip
        sample_both(gcs_emulator, graphs["tfrecord"], f"out/snapshot{workers}",
                    "sampling_spec.pbtxt", flags, tmp_path / f"local{workers}",
                    gcs_emulator.env(TMPDIR=str(tmpdir)))  # fmt: skip
        downloads = gcs_emulator.downloads(since=mark)
        reads.append([p for p in downloads if re.search(r"/graph/graph-[0-9a-f]+/", p)])
        assert not list(tmpdir.rglob("*.npy")), "the machine copy stayed"
    assert reads[0], "no snapshot object was read"
    assert len(reads[1]) == len(reads[0]), (sorted(reads[0]), sorted(reads[1]))


# ------------------------------------------------------------------------- partition

PARTITION_CASES = {
    "inmemory-random": ["--runner", "InMemory", "--part_method", "random"],
    "beam-lp-graphstorm-split": ["--part_method", "lp", "--layout", "graphstorm",
                                 "--split", "paper:0.6,0.2,0.2"],
}  # fmt: skip


@pytest.mark.parametrize("case", PARTITION_CASES)
def test_partition_through_gcs_writes_the_local_runs_bytes(case, graphs, gcs_emulator, tmp_path):
    """gs:// in and out; the local run (in this process) with --runner InMemory: partition
    writes the same bytes on every runner."""
    flags = PARTITION_CASES[case]
    local, remote = graphs["parquet"]
    name = f"out/partition-{case}"
    ok(cli("partition", "--graph_schema", remote, "--output_dir", gcs_emulator.gs(name),
           "--graph_name", "g", "--num_parts", "2", *flags, env=gcs_emulator.env()))  # fmt: skip
    runner = [] if "InMemory" in flags else ["--runner", "InMemory"]
    assert partition_cli.main(["--graph_schema", str(local), "--output_dir",
                               str(tmp_path / "local"), "--graph_name", "g", "--num_parts", "2",
                               *flags, *runner]) == 0  # fmt: skip
    written = assert_same_output(gcs_emulator, name, tmp_path / "local")
    assert any(n.startswith("part1/") for n in written)
    if "graphstorm" in flags:
        assert any(n.startswith("raw_id_mappings/") for n in written)
    else:
        assert any(n.startswith("node_ids/") for n in written)


# ------------------------------------------------------------------------- tools


def test_tools_read_and_write_gcs(graphs, gcs_emulator, tmp_path):
    local, remote = graphs["parquet"]
    env = gcs_emulator.env()
    spec = f"{remote}/sampling_spec.pbtxt"
    assert "error" not in ok(cli("validate", "--graph_schema", remote, "--sampling_spec", spec,
                                 env=env)).lower()  # fmt: skip
    ok(cli("estimate", "--graph_schema", remote, "--sampling_spec", spec,
           "--stats_cache", gcs_emulator.gs("out/tools/stats_cache.json"),
           "--json", gcs_emulator.gs("out/tools/estimate.json"), env=env))  # fmt: skip
    estimate = json.loads(gcs_emulator.get("out/tools/estimate.json"))
    assert estimate
    samples = gcs_emulator.gs("out/tools/run/samples@2")
    ok(cli("sample", "--graph_schema", remote, "--sampling_spec", spec, "--output_samples",
           samples, "--runner", "InMemory", env=env))  # fmt: skip
    ok(cli("stats", "--samples", samples, "--graph_schema", remote, "--output_dir",
           gcs_emulator.gs("out/tools/stats"), "--no_plots", env=env))  # fmt: skip
    stats = [n for n in gcs_emulator.names("out/tools/stats/") if n.endswith(".json")]
    assert stats and json.loads(gcs_emulator.get(stats[0]))
    shown = ok(cli("show", "--samples", samples, "--index", "3", env=env)).splitlines()
    assert shown[0].startswith("subgraph 3 (record 3 of gs://graphs/out/tools/run/samples-0000")
    assert "seed_id: " in shown[1] and "node set paper:" in "\n".join(shown)


# ------------------------------------------------------------------------- overwrite


def test_overwrite_on_gcs_deletes_only_what_a_run_of_ours_wrote(graphs, gcs_emulator):
    _, remote = graphs["parquet"]
    env = gcs_emulator.env()
    out = "out/overwrite"
    args = ["--graph_schema", remote, "--sampling_spec", f"{remote}/sampling_spec.pbtxt",
            "--runner", "InMemory"]  # fmt: skip
    ok(cli("sample", *args, "--output_samples", gcs_emulator.gs(f"{out}/samples@4"), env=env))
    first = set(gcs_emulator.names(out + "/"))
    gcs_emulator.put(f"{out}/notes.txt", b"mine")
    gcs_emulator.put(f"{out}/samples-keep/data.bin", b"mine too")
    again = cli("sample", *args, "--output_samples", gcs_emulator.gs(f"{out}/samples@2"), env=env)
    assert again.returncode == 2 and len(again.stderr.splitlines()) == 1, again.stderr
    assert "--overwrite" in again.stderr
    ok(cli("sample", *args, "--output_samples", gcs_emulator.gs(f"{out}/samples@2"),
           "--overwrite", env=env))  # fmt: skip
    now = set(gcs_emulator.names(out + "/"))
    assert f"{out}/samples-00002-of-00004" in first
    assert not [n for n in now if n.endswith("-of-00004")], now
    assert gcs_emulator.get(f"{out}/notes.txt") == b"mine"
    assert gcs_emulator.get(f"{out}/samples-keep/data.bin") == b"mine too"


# ------------------------------------------------------------------------- failures


def start_cli(module: str, *args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", f"pipelines.{module}", *args], cwd=ROOT, env=env,
        start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def wait_for_object(emulator, name: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while name not in emulator.names(name.rsplit("/", 1)[0] + "/"):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{name} never appeared"
        time.sleep(0.05)


def big_graph(gcs_emulator, tmp_path_factory) -> str:
    """A 3,000-paper graph on the bucket: its sampling runs for several seconds."""
    local = tmp_path_factory.mktemp("big")
    generate(local, "parquet", papers=3000)
    return gcs_emulator.upload_folder(local, "in/big")


def test_ctrl_c_leaves_only_the_manifest_on_the_bucket(gcs_emulator, tmp_path_factory):
    remote = big_graph(gcs_emulator, tmp_path_factory)
    out = "out/interrupted"
    proc = start_cli(
        "sample", "--graph_schema", remote, "--sampling_spec", f"{remote}/sampling_spec.pbtxt",
        "--output_samples", gcs_emulator.gs(f"{out}/samples@2"),
        "--direct_running_mode=multi_processing", "--direct_num_workers=2",
        "--graph_placement", "worker", "--progress_interval", "1", env=gcs_emulator.env(),
    )  # fmt: skip
    try:
        # The run has started writing: its snapshot's first object is on the bucket.
        deadline = time.monotonic() + 180
        while not [n for n in gcs_emulator.names(out + "/") if "/graph/" in n]:
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the run never wrote its snapshot"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    # Progress lines may come before the stop or not (when the snapshot's first object
    # appears depends on the load): the interrupt is the one line besides them.
    said = [line for line in err.splitlines() if not line.startswith("progress:")]
    assert len(said) == 1 and "interrupted (Ctrl-C)" in said[0], err[-3000:]
    assert gcs_emulator.names(out + "/") == [f"{out}/.beam_graph_manifest.json"]


def test_server_gone_mid_run_is_one_line_and_no_half_written_object(
    gcs_emulator, tmp_path_factory, tmp_path
):
    """The server stops while the run writes: a bounded retry, then one line naming the path
    and the cause, exit 2; no object at a final name (the server's folder as it stopped)."""
    local = tmp_path_factory.mktemp("gone")
    generate(local, "parquet")
    out = "out/gone"
    proc = start_cli(
        "sample", "--graph_schema", str(local), "--sampling_spec",
        str(local / "sampling_spec.pbtxt"), "--output_samples",
        gcs_emulator.gs(f"{out}/samples@2"), "--runner", "InMemory",
        env=gcs_emulator.env(BEAM_GRAPH_GCS_RETRY_S="3"),
    )  # fmt: skip
    try:
        wait_for_object(gcs_emulator, f"{out}/.beam_graph_manifest.json", proc)
        gcs_emulator.stop()
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        gcs_emulator.start()
    lines = err.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, err[-4000:]
    assert f"cannot reach the storage emulator at {gcs_emulator.url}: " in lines[0]
    assert f"gs://{gcs_emulator.bucket}/{out}" in lines[0] and "refused" in lines[0]
    left = gcs_emulator.names(out + "/")
    assert not [n for n in left if re.search(r"samples-\d{5}-of|schema.pbtxt|run_summary", n)]


def test_no_network_with_credentials_is_a_bounded_retry_then_one_line(tmp_path):
    """Real GCS with credentials but no network: a service account key
    whose token endpoint is a closed loopback port (as without network or DNS, no connection;
    every GCS request needs the token first, so no request leaves this machine)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()  # fmt: skip
    key = tmp_path / "key.json"
    key.write_text(json.dumps({
        "type": "service_account", "project_id": "p", "private_key_id": "k",
        "private_key": pem, "client_email": "sa@p.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token",
    }))  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "STORAGE_"))}
    env.update(GOOGLE_APPLICATION_CREDENTIALS=str(key), GCE_METADATA_HOST="127.0.0.1:9",
               GCE_METADATA_IP="127.0.0.1:9", HOME=str(tmp_path), PYTHONPATH=str(ROOT),
               TF_USE_LEGACY_KERAS="1", BEAM_GRAPH_GCS_RETRY_S="3")  # fmt: skip
    graph = generate(tmp_path / "g", "parquet")
    runs = {  # an output on gs:// (sample), an input on gs:// (partition)
        "gs://no-such-bucket/out/": ["sample", "--graph_schema", str(graph), "--sampling_spec",
                                     str(graph / "sampling_spec.pbtxt"), "--output_samples",
                                     "gs://no-such-bucket/out/samples@2", "--runner", "InMemory"],
        "gs://no-such-bucket/graph/": ["partition", "--graph_schema", "gs://no-such-bucket/graph",
                                       "--output_dir", str(tmp_path / "parts"), "--graph_name",
                                       "g", "--num_parts", "2"],
    }  # fmt: skip
    for path, args in runs.items():
        start = time.monotonic()
        result = cli(*args, env=env, timeout=180)
        lines = result.stderr.splitlines()
        assert result.returncode == 2 and len(lines) == 1, result.stderr[-4000:]
        assert lines[0].startswith(f"error: {path}") or f"output {path}" in lines[0], lines[0]
        assert "cannot reach Google Cloud Storage: the connection was refused" in lines[0]
        assert time.monotonic() - start < 90


def test_without_an_emulator_the_credentials_check_stays(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "STORAGE_"))}
    env.update(GCE_METADATA_HOST="127.0.0.1:9", GCE_METADATA_IP="127.0.0.1:9",
               HOME=str(tmp_path), CLOUDSDK_CONFIG=str(tmp_path / "gcloud"),
               PYTHONPATH=str(ROOT), TF_USE_LEGACY_KERAS="1")  # fmt: skip
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    result = cli("sample", "--graph_schema", "gs://graphs/in/parquet", "--sampling_spec", spec,
                 "--output_samples", str(tmp_path / "o"), env=env)  # fmt: skip
    assert result.returncode == 2 and "no Google Cloud credentials" in result.stderr


def test_lost_connections_are_named_with_their_path_and_cause():
    """The texts below are what google-cloud-storage and urllib3 raised in this file's runs
    (a DNS failure is the message of a machine without DNS)."""
    from sampler.io import gcs

    dns = (
        "RetryError: Timeout of 3.0s exceeded, last exception: HTTPSConnectionPool(host="
        "'oauth2.googleapis.com', port=443): Max retries exceeded with url: /token (Caused by "
        "NameResolutionError(\"HTTPSConnection(host='oauth2.googleapis.com', port=443): Failed "
        "to resolve 'oauth2.googleapis.com' ([Errno -2] Name or service not known)\"))"
    )
    refused = (
        "RetryError: Timeout of 5.0s exceeded, last exception: HTTPConnectionPool(host="
        "'127.0.0.1', port=9): Max retries exceeded with url: /storage/v1/b/graphs/o/in%2Fg%2F"
        "graph_schema.pbtxt?fields=name&prettyPrint=false (Caused by NewConnectionError("
        "\"HTTPConnection(host='127.0.0.1', port=9): Failed to establish a new connection: "
        '[Errno 111] Connection refused"))'
    )
    listing = "Max retries exceeded with url: /storage/v1/b/graphs/o?prefix=out%2Fx%2F&x=1"
    assert gcs.network_cause(dns) == "the host name does not resolve (no network, or DNS fails)"
    assert "refused" in gcs.network_cause(refused)
    assert gcs.network_cause("ValueError: bad row 3") is None
    assert gcs.gs_path_in(RuntimeError(refused)) == "gs://graphs/in/g/graph_schema.pbtxt"
    assert gcs.gs_path_in(RuntimeError(listing)) == "gs://graphs/out/x/"
    line = gcs.network_error_line(RuntimeError(listing), "gs://graphs/out/x/run")
    assert line.startswith("gs://graphs/out/x/run: cannot reach ")
    assert gcs.network_error_line(ValueError("bad row 3")) is None


def test_compose_concatenates_more_objects_than_one_request_takes(gcs_emulator):
    """sampler.io.gcs.compose (the sample writer's shard concatenation on gs://): 70 parts
    take three rounds of compose; the result is their bytes in order, the scratch objects go."""
    parts = [f"out/compose/part-{i:03d}" for i in range(70)]
    for i, name in enumerate(parts):
        gcs_emulator.put(name, f"<{i}>".encode() * (i + 1))
    script = (
        "import sys; from sampler.io import gcs; "
        "gcs.compose(sys.argv[1], sys.argv[3:], sys.argv[2])"
    )
    result = subprocess.run(
        [sys.executable, "-c", script, gcs_emulator.gs("out/compose/whole"),
         gcs_emulator.gs("out/compose/scratch"), *map(gcs_emulator.gs, parts)],
        cwd=ROOT, env=gcs_emulator.env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    expected = b"".join(f"<{i}>".encode() * (i + 1) for i in range(70))
    assert gcs_emulator.get("out/compose/whole") == expected
    assert not [n for n in gcs_emulator.names("out/compose/") if "scratch" in n]
