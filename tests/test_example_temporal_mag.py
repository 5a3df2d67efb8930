"""examples/temporal_mag.py: time-respecting samples of a MAG-shaped graph (paper years as
time) train a TF-GNN model on the past that is validated on the future."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.pipeline_helpers import read_records
from tests.temporal_checker import parse_example

ROOT = Path(__file__).resolve().parents[1]


def test_temporal_mag_example_trains_on_the_past(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "temporal_mag.py"), "--output_dir", str(out),
         "--num_papers", "300", "--epochs", "2", "--validate_from", "2018"],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    records = [parse_example(r) for r in read_records(str(out / "samples" / "samples-*"))]
    years = [r["context/seed_time"][0] for r in records]
    late = sum(y >= 2018 for y in years)
    assert (report["train_records"], report["validation_records"]) == (len(years) - late, late)
    assert 0 < late < len(years)
    for r in records:  # no citation from a later year than the seed paper's
        assert all(t <= r["context/seed_time"][0] for t in r["edges/cites.year"])
    assert report["loss"][-1] < report["loss"][0], report
