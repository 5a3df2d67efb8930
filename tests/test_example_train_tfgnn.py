"""examples/train_tfgnn.py learns from the samples: labels follow communities, so a few epochs
take the validation accuracy well above the majority class."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sampler.tools import synthetic
from tests.pipeline_helpers import run_pipeline

ROOT = Path(__file__).resolve().parents[1]

SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 8 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "topics" input_op_names: "seed" input_op_names: "cited" edge_set_name: "has_topic" sample_size: 4 strategy: RANDOM_UNIFORM }
"""  # noqa: E501


def test_train_tfgnn_example_beats_the_majority_class(tmp_path):
    graph = synthetic.generate_mag(400, seed=2, feature_dim=8, num_clusters=4, intra_cluster=0.9)
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"))
    (tmp_path / "spec.pbtxt").write_text(SPEC)
    out = tmp_path / "out"
    run_pipeline(
        schema, str(tmp_path / "spec.pbtxt"), str(out / "samples@2"), "--progress_interval", "0"
    )
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_tfgnn.py"),
         "--samples", str(out / "samples-*"), "--epochs", "5", "--report", str(report)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(report.read_text())
    assert (result["train_records"], result["validation_records"]) == (320, 80)
    loss, accuracy = result["loss"], result["val_accuracy"]
    assert loss[-1] < 0.5 * loss[0], result
    assert max(accuracy[-2:]) > result["majority_baseline"] + 0.3, result
    assert "Gradients do not exist" not in proc.stderr, proc.stderr[-3000:]
