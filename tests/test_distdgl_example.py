"""examples/distdgl_local.py serves the partition stage's output with real DistDGL 2.1.0 servers
(one private /dev/shm per simulated machine, all on 127.0.0.1) and samples one epoch with
DistNodeDataLoader: every seed once, every sampled id valid, features fetched."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "distdgl_local.py"


def run(cmd, **env):
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{cmd}\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_distdgl_local_example_samples_every_seed_once(tmp_path, dgl_python):
    graph, parts = tmp_path / "graph", tmp_path / "parts"
    run([sys.executable, "-m", "pipelines.generate", "--num_papers", "300",
         "--output_dir", str(graph), "--format", "parquet", "--seed", "3"])  # fmt: skip
    run([sys.executable, "-m", "pipelines.partition", "--graph_schema", str(graph),
         "--output_dir", str(parts), "--graph_name", "mag", "--num_parts", "2"])  # fmt: skip
    report, temp = tmp_path / "report.json", tmp_path / "temp"
    temp.mkdir()
    run([str(dgl_python), str(EXAMPLE), "--part_config", str(parts / "mag.json"),
         "--num_trainers", "2", "--batch_size", "32", "--fanouts", "4,4",
         "--timeout", "240", "--report", str(report)], TMPDIR=str(temp))  # fmt: skip
    result = json.loads(report.read_text())
    assert (result["num_parts"], result["num_trainers"]) == (2, 2)
    trainers = result["trainers"]
    assert sorted(t["rank"] for t in trainers) == [0, 1]
    # node_split(force_even=True) gives each trainer 150 papers; batches of 32.
    assert [t["split"] for t in trainers] == [150, 150]
    assert [t["batches"] for t in trainers] == [math.ceil(150 / 32)] * 2
    assert result["batches"] == 10 and result["seeds"] == 300
    for t in trainers:
        assert t["num_nodes"]["paper"] == 300
        assert t["input_nodes"] > t["seeds"]  # neighbours were sampled
        assert t["feature_dim"] == 16
    assert not list(temp.iterdir())  # ip_config, logs and reports removed
