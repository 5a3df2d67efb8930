"""A Dataflow / gs:// command on a machine without Google Cloud credentials stops at once with
one line saying how to log in, instead of Beam's GCS client retrying for minutes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from pipelines.runtime.runner import needs_gcp

ROOT = Path(__file__).resolve().parents[1]

SCHEMA = """
node_sets { key: "paper" value { metadata { filename: "paper.csv" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper"
  metadata { filename: "cites.csv" } } }
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""
DATAFLOW = [
    "--runner", "DataflowRunner", "--project", "fake-project", "--region", "europe-west4",
    "--temp_location", "gs://fake-bucket/tmp", "--dry_run=True",
]  # fmt: skip


def no_credentials_env(home: Path) -> dict:
    """No ADC file (HOME, CLOUDSDK_CONFIG empty), no key file, and a metadata server address
    that refuses at once (a closed loopback port) instead of the real one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
    env.update(
        HOME=str(home),
        CLOUDSDK_CONFIG=str(home / "gcloud"),
        GCE_METADATA_HOST="127.0.0.1:9",
        GCE_METADATA_IP="127.0.0.1:9",
        PYTHONPATH=str(ROOT),
        TF_USE_LEGACY_KERAS="1",
    )
    return env


def test_dataflow_dry_run_without_credentials_is_one_line(tmp_path):
    graph = tmp_path / "graph"
    graph.mkdir()
    (graph / "graph_schema.pbtxt").write_text(SCHEMA)
    (graph / "paper.csv").write_text("#id\np0\np1\n")
    (graph / "cites.csv").write_text("#source,#target\np0,p1\n")
    (graph / "spec.pbtxt").write_text(SPEC)
    home = tmp_path / "home"
    home.mkdir()
    start = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.sample", "--graph_schema", str(graph),
         "--sampling_spec", str(graph / "spec.pbtxt"),
         "--output_samples", "gs://fake-bucket/out/samples@2", *DATAFLOW],
        cwd=ROOT, env=no_credentials_env(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert time.monotonic() - start < 60
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-3000:]
    assert "gcloud auth application-default login" in lines[0]


def test_which_command_lines_need_google_cloud():
    assert needs_gcp(["--output_samples", "gs://b/o"])
    assert needs_gcp(["--graph_schema=gs://b/g"])
    assert needs_gcp(["--runner", "DataflowRunner"]) and needs_gcp(["--runner=DataflowRunner"])
    assert not needs_gcp(["--graph_schema", "/data/g", "--output_samples", "/tmp/o"])
    assert not needs_gcp(["--runner", "DirectRunner"])
