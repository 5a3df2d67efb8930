"""scripts/bench_ogbn.py end to end at a tiny size: what it measures and reports, not speed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_bench_ogbn_measures_every_run_and_stage(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "scripts/bench_ogbn.py", "--papers", "300", "--seeds", "40",
           "--every", "3", "--runs", "build,inmemory,worker", "--workers", "2", "--digest",
           "--work_dir", str(tmp_path / "work"), "--out", str(out), "--timeout", "600"]  # fmt: skip
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-2000:]
    runs = {r["run"]: r for r in json.loads(out.read_text())}
    assert set(runs) == {"build", "inmemory", "worker"}
    for name, run in runs.items():
        assert run["returncode"] == 0 and run["stopped"] is None, (name, run.get("log_tail"))
        assert run["cpu_s"] > 0 and run["largest_process_peak_rss_mb"] > 0
        assert run["load_before"] and "load average" in run["uptime"]
    assert runs["build"]["subgraphs"] == 10 and runs["inmemory"]["subgraphs"] == 40
    # the same seeds give the same records in memory and on Beam's worker placement
    assert runs["inmemory"]["digest"] == runs["worker"]["digest"]
    assert runs["inmemory"]["out_mb"] == runs["worker"]["out_mb"] > 0
    # every stage is told: InMemory's own stages, and Beam's stages summed into phases
    assert set(runs["inmemory"]["stage_cpu"]) == {"read", "build", "seeds", "sample", "encode",
                                                  "write"}  # fmt: skip
    # (the worker reads the tables in the step that builds its snapshot: one phase, "build")
    assert {"build", "sample", "write"} <= set(runs["worker"]["stage_cpu"])
    assert runs["worker"]["processes"]["sdk_worker"]["count"] == 2
    assert runs["worker"]["resources"]["sdk_workers_cpu_seconds"] > 0
    # the worker's stage CPU adds up to no more than its tree's
    assert sum(runs["worker"]["stage_cpu"].values()) <= runs["worker"]["cpu_s"] + 0.5
    assert "worker (2 SDK) / InMemory CPU" in done.stdout
    assert not list((tmp_path / "work" / "out").glob("*/samples-*"))  # outputs removed
