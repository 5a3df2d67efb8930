"""`estimate` of temporal specs that its probe samples by time: node seeds with
`temporal.node_time_feature`, link seeds (each seed edge's time), and seed times from a
`seed_time` column of --input_seeds; each within the tolerance of tests/test_estimate.py
(25%) of the records a real run writes, on the tiny graph of tests/test_temporal.py."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import estimate as estimate_cli
from tests.temporal_checker import parse_example
from tests.test_temporal import PAPERS, SPEC, _run, _write
from tests.test_temporal_links import LINK_SPEC

TOLERANCE = 0.25  # tests/test_estimate.py's


def _compare(tmp_path, schema, spec, extra: list[str], tolerance: float = TOLERANCE):
    """The estimate's mean sizes per edge and node set against a real run's (InMemory). The
    probe takes every seed (--probe_seeds above their number), so without negatives (drawn
    otherwise by the probe) it samples the run's very subgraphs: `tolerance` 1% checks that."""
    report = tmp_path / "estimate.json"
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--stats_cache", "none",
            "--probe_seeds", "2000", "--json", str(report), "--progress_interval", "0",
            *extra]  # fmt: skip
    assert estimate_cli.main(argv) == 0
    estimated = json.loads(report.read_text())
    out = str(tmp_path / "out" / "samples")
    run = ["--runner", "InMemory", *extra]
    records = [parse_example(r) for r in _run(tmp_path, schema, spec, out, *run)]
    checked = 0
    for kind in ("nodes", "edges"):
        for name, got in estimated[f"{kind}_per_subgraph"].items():
            key = f"{kind}/{name}.#size"
            actual = np.mean([r[key][0] if key in r else 0 for r in records])
            if actual >= 1:
                assert abs(got - actual) <= tolerance * actual, (kind, name, got, actual)
                checked += 1
    assert checked >= 4
    return estimated, records


def test_node_times_are_probed(tmp_path):
    """The `recent` op keeps authors at or before the seed time: its edges are far fewer than
    the untimed degree model's, and the estimate matches the records."""
    schema, _, _ = _write(tmp_path)
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(SPEC)
    estimated, records = _compare(tmp_path, schema, str(spec), [], 0.01)
    assert len(records) == PAPERS
    assert estimated["degree_model"]["edges_per_subgraph"]["written"] > 1.2 * np.mean(
        [r["edges/written.#size"][0] for r in records]
    )


@pytest.mark.parametrize("negatives", [0, 1])
def test_link_seeds_are_probed_by_time(tmp_path, negatives):
    schema, _, _ = _write(tmp_path)
    spec = tmp_path / "link.pbtxt"
    spec.write_text(LINK_SPEC)
    flags = ["--seed_edge_set", "cites", "--negatives_per_seed", str(negatives)]
    tolerance = 0.01 if negatives == 0 else TOLERANCE
    estimated, records = _compare(tmp_path, schema, str(spec), flags, tolerance)
    assert len(records) == 40 * 12 * (1 + negatives)
    untimed = estimated["degree_model"]["edges_per_subgraph"]["cites"]
    assert untimed > 1.2 * estimated["edges_per_subgraph"]["cites"]


def test_the_seeds_tables_times_are_probed(tmp_path):
    """Seed times from a seed_time column (each paper at its earliest time: few edges
    eligible), not the node's."""
    schema, _, _ = _write(tmp_path)
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(SPEC)
    seeds = tmp_path / "seeds.parquet"
    ids = [f"p{i}" for i in range(PAPERS)] * 3
    times = [2000 + (i % 13) for i in range(len(ids))]
    pq.write_table(pa.table({"#id": ids, "seed_time": pa.array(times, pa.int64())}), seeds)
    flags = ["--input_seeds", str(seeds)]
    estimated, records = _compare(tmp_path, schema, str(spec), flags, 0.01)
    assert len(records) == 3 * PAPERS
