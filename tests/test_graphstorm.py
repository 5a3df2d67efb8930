"""GraphStorm 0.5.0 trains on the partition stage's output with no hand edits.

examples/graphstorm_local.py partitions the demo graph (2,000 papers) with `--layout
graphstorm --split paper:0.8,0.1,0.1 --balance_ntypes train_mask` and runs GraphStorm's own
launcher (`python -m graphstorm.run.gs_node_classification`, a 2-layer RGCN) in the side venv
of scripts/setup_graphstorm.sh: on 1 part in its one-machine mode, on 2 parts over simulated
machines (a namespace each, with its own address and /dev/shm, reached by the launcher's ssh).
Both export embeddings with --save-embed-path, which GraphStorm maps back to the Unigraph ids
through raw_id_mappings/. The checks use the generator's tables, not the partition files.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "graphstorm_local.py"


def run_example(work: Path, gs_python: Path, *flags: str) -> dict:
    report = work / "report.json"
    cmd = [sys.executable, str(EXAMPLE), "--workdir", str(work), "--gs_python", str(gs_python),
           "--epochs", "3", "--timeout", "420", "--report", str(report), *flags]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(report.read_text())


def source_labels(graph: Path) -> dict[str, int]:
    """paper id -> label, from the generator's own tables."""
    table = pa.concat_tables(
        [pq.read_table(f) for f in sorted(glob.glob(f"{graph}/paper*.parquet"))]
    )
    ids = [x.decode() for x in table.column("#id").to_pylist()]
    return dict(zip(ids, table.column("label").to_pylist(), strict=True))


def nearest_centroid_accuracy(x: np.ndarray, y: np.ndarray) -> float:
    """Accuracy of class centroids of half the rows on the other half."""
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[: len(y) // 2], order[len(y) // 2 :]
    classes = np.unique(y[train])
    centroids = np.stack([x[train][y[train] == c].mean(axis=0) for c in classes])
    dist = ((x[test][:, None, :] - centroids[None]) ** 2).sum(axis=-1)
    return float((classes[dist.argmin(axis=1)] == y[test]).mean())


def check_embeddings(work: Path, result: dict) -> None:
    """Every paper once, keyed by its Unigraph id; the vectors belong to those ids: their
    class centroids (labels joined by id from the generator's table) classify held-out
    papers far above chance, which a wrong id mapping would bring down to about 0."""
    labels = source_labels(work / "graph")
    table = pq.read_table(result["embeddings_dir"] + "/paper")
    ids = table.column("nid").to_pylist()
    assert len(ids) == len(set(ids)) == 2000
    assert set(ids) == set(labels)
    x = np.array(table.column("emb").to_pylist(), dtype=np.float32)
    assert x.shape == (2000, 64) and np.isfinite(x).all()
    y = np.array([labels[i] for i in ids])
    assert nearest_centroid_accuracy(x, y) > 0.25
    shuffled = np.random.default_rng(1).permutation(y)
    assert nearest_centroid_accuracy(x, shuffled) < 0.05  # the check can fail


def check_folder(parts: Path, num_parts: int) -> None:
    """Nothing but the partitions starts with "part" (GraphStorm counts those entries)."""
    assert sorted(p.name for p in parts.iterdir() if p.name.startswith("part")) == [
        f"part{i}" for i in range(num_parts)
    ]
    raw = pq.read_table(parts / "raw_id_mappings" / "paper")
    assert raw.schema.names == ["orig", "new"] and raw.num_rows == 2000


@pytest.mark.parametrize("num_parts, method", [(1, "random"), (2, "lp")])
def test_graphstorm_trains_and_exports_embeddings(tmp_path, gs_python, num_parts, method):
    result = run_example(
        tmp_path, gs_python, "--num_parts", str(num_parts), "--part_method", method
    )
    check_folder(tmp_path / "parts", num_parts)
    # 9 clusters carry 80% of the labels (sampler/tools/synthetic.py): an RGCN on
    # paper:feat finds them in one epoch (about 0.78); a model that did not learn scores
    # about 0.1 (the most common venue).
    assert result["best_test_accuracy"] > 0.6, result
    assert result["best_val_accuracy"] > 0.6, result
    assert result["embeddings"]["files"] == num_parts  # one per trainer, one trainer a machine
    check_embeddings(tmp_path, result)
