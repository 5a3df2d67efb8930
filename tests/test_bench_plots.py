"""The benchmark plots: drawn from the JSON records, shown in docs/BENCHMARKS.md, up to date."""

from __future__ import annotations

import argparse
import json
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_partition  # noqa: E402
import bench_plots  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("name", bench_plots.PLOTTED)
def test_committed_plot_is_drawn_from_its_records_and_shown(name, tmp_path):
    source = os.path.join(ROOT, "docs", name)
    png = tmp_path / name.replace(".json", ".png")
    assert bench_plots.plot_file(source, str(png)) == str(png)
    drawn = png.read_bytes()
    assert drawn.startswith(PNG_MAGIC) and len(drawn) > 10_000
    committed = os.path.join(ROOT, "docs", png.name)
    with open(committed, "rb") as f:
        assert f.read() == drawn, f"docs/{png.name} is stale: python scripts/bench_plots.py"
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md")) as f:
        assert f"]({png.name})" in f.read()


def test_partition_records_are_appended_and_plotted(tmp_path):
    out = tmp_path / "partition.json"
    args = argparse.Namespace(out=str(out), num_papers=1000, num_hops=1)
    rows = [("this stage", "lp", 4, 3.21, 5.5, 512.0, 0.0841, 0.03),
            ("DGL 2.1.0", "metis", 4, 1.5, 1.4, 400.0, 0.079, 0.058),
            ("this stage (InMemory)", "lp", 4, 0.9, 0.8, 300.0, 0.0841, 0.03),
            ("this stage (failed)", "random", 4, 1.0, 1.0, 100.0, float("nan"), 0)]  # fmt: skip
    bench_partition.write_records(args, rows)
    bench_partition.write_records(args, rows[:1])
    records = json.loads(out.read_text())
    assert [(r["tool"], r["method"]) for r in records] == [
        ("ours", "lp"),
        ("dgl", "metis"),
        ("inmemory", "lp"),
        ("ours", "lp"),
    ]
    assert records[0]["edge_cut"] == 0.0841 and records[1]["seconds"] == 1.5
    assert records[1]["cpu_seconds"] == 1.4 and records[2]["peak_rss_mb"] == 300
    assert bench_plots.plot_for(records) is bench_plots.plot_partition
    assert (tmp_path / "partition.png").read_bytes().startswith(PNG_MAGIC)


def test_records_choose_their_plot():
    assert bench_plots.plot_for([{"system": "ours", "workers": 2}]) is bench_plots.plot_placement
    assert bench_plots.plot_for([{"system": "ours", "workers": 0}]) is bench_plots.plot_sample
    assert bench_plots.plot_for([{"measurement": "sample --help"}]) is None
