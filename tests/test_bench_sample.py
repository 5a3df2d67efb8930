"""The benchmark script still runs end to end (at a tiny size): correctness, not speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_sample_runs_every_system_at_a_tiny_size(tmp_path):
    out = tmp_path / "bench.json"
    systems = "ours,ours_node,ours_sharded,inmemory,tfgnn_v1_edge,tfgnn_v2_edge"
    cmd = [sys.executable, "scripts/bench_sample.py", "--sizes", "40", "--systems", systems,
           "--work_dir", str(tmp_path / "work"), "--out", str(out), "--timeout", "600"]  # fmt: skip
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=1200)
    records = {r["system"]: r for r in json.loads(out.read_text())}
    assert set(records) == set(systems.split(","))
    for name, record in records.items():
        assert record["stopped"] is None, (name, record["stopped"])
        assert record["subgraphs"] == 40, name
        assert record["seconds"] > 0 and record["peak_rss_bytes"] > 0
    # Same records on every placement and in memory: the same number of output bytes.
    sizes = {records[n]["output_bytes"] for n in ("ours", "ours_sharded", "inmemory")}
    assert len(sizes) == 1
    # The run redraws its plot beside the JSON (scripts/bench_plots.py).
    assert (tmp_path / "bench.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    table = subprocess.run(
        [sys.executable, "scripts/bench_sample.py", "--report", "--out", str(out)],
        cwd=ROOT, env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert len(table.strip().splitlines()) == 2 + len(systems.split(","))
    assert "tfgnn_v1_edge" in table and "x time" in table


def test_bench_startup_measures_help_and_a_tiny_run(tmp_path):
    out = tmp_path / "startup.json"
    cmd = [sys.executable, "scripts/bench_startup.py", "--repeat", "1",
           "--work_dir", str(tmp_path / "work"), "--out", str(out)]  # fmt: skip
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    records = {r["measurement"]: r for r in json.loads(out.read_text())}
    assert set(records) == {"sample --help", "tiny run (100 papers)"}
    for record in records.values():
        assert record["median_seconds"] > 0 and record["median_peak_rss_mb"] > 0
    # The tiny run really sampled: one record per paper in its two shards.
    tiny = tmp_path / "work" / f"out_{records['sample --help']['commit']}"
    summary = json.loads((tiny / "run_summary.json").read_text())
    assert summary["samples"]["subgraphs_out"] == 100


def test_bench_encode_reads_the_tables_once(tmp_path):
    """bench_encode.py reads the tables once and hands them to every run: its kernels' CPU
    excludes the reading (a run that read them itself would end the script with a line)."""
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    graph = tmp_path / "graph"
    generate = [sys.executable, "-m", "pipelines.generate", "--num_papers", "60",
                "--feature_dim", "4", "--write_spec", "--output_dir", str(graph)]  # fmt: skip
    subprocess.run(generate, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    cmd = [sys.executable, "scripts/bench_encode.py", "--graph", str(graph), "--seeds", "20",
           "--repeat", "2", "--out", str(tmp_path / "out")]  # fmt: skip
    done = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    record = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert record["tables_read"] == 1 and record["subgraphs"] == 20
    assert len(record["kernel_cpu_s"]) == 2 and record["output_mb"] > 0
