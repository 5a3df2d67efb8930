"""examples/train_link_prediction.py learns from link samples: `cites` edges stay mostly inside
a community, negatives are uniform targets, so a one-round GNN with a dot-product score ranks
held-out seed edges above their negatives well beyond chance (AUC 0.5), although the seed edge
is not in its own subgraph."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sampler.tools import synthetic
from tests.pipeline_helpers import run_pipeline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 8 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "topics" input_op_names: "seed" edge_set_name: "has_topic" sample_size: 4 strategy: RANDOM_UNIFORM }
"""  # noqa: E501


def test_auc_by_hand():
    import train_link_prediction as example

    assert example.auc([1, 1, 0, 0], [0.9, 0.8, 0.1, 0.2]) == 1.0
    assert example.auc([1, 1, 0, 0], [0.1, 0.2, 0.9, 0.8]) == 0.0
    # pairs (pos, neg): (3,1) win, (3,2) win, (2,1) win, (2,2) tie -> 3.5 / 4
    assert example.auc([1, 1, 0, 0], [3, 2, 1, 2]) == 0.875
    assert example.auc([0, 1, 0], [5, 5, 5]) == 0.5
    with pytest.raises(ValueError):
        example.auc([1, 1], [0.1, 0.2])


def test_train_link_prediction_beats_chance(tmp_path):
    graph = synthetic.generate_mag(300, seed=2, feature_dim=8, num_clusters=4, intra_cluster=0.9)
    num_cites = graph.tables["cites"].num_rows
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"))
    (tmp_path / "spec.pbtxt").write_text(SPEC)
    out = tmp_path / "out"
    run_pipeline(
        schema, str(tmp_path / "spec.pbtxt"), str(out / "samples@2"), "--seed_edge_set", "cites",
        "--negatives_per_seed", "1", "--runner", "InMemory",
    )  # fmt: skip
    assert glob.glob(str(out / "samples-*"))
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "train_link_prediction.py"),
         "--samples", str(out / "samples-*"), "--epochs", "4", "--report", str(report)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(report.read_text())
    # Every cites edge is a seed with one negative; the split keeps them together.
    assert result["train_records"] + result["validation_records"] == 2 * num_cites, result
    assert 2 * result["validation_positives"] == result["validation_records"], result
    assert 0.1 < result["validation_records"] / (2 * num_cites) < 0.3, result
    assert result["loss"][-1] < result["loss"][0], result
    assert max(result["val_auc"][-2:]) > 0.7, result
    assert "Gradients do not exist" not in proc.stderr, proc.stderr[-3000:]
    assert np.isfinite(result["loss"]).all()
