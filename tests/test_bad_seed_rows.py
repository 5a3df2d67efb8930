"""Bad rows of a seed table: every runner and placement dead-letters and counts them alike.

With `--max_bad_records` above their number, each placement (and `--runner InMemory`) samples
the good seeds and writes the bad rows as dead letters of the set "seeds", node seeds and link
seeds alike; `sharded` used to fail at the first one while sizing its shards.
"""

from __future__ import annotations

import json

import pytest

from pipelines import sample
from tests.test_bad_inputs_round2 import LINK_SPEC, WEIGHTED_SCHEMA, write_graph
from tests.test_bad_rows_at_scale import dead_letters

# Data rows 2 and 4 are bad (an empty id; a source without a target).
NODE_SEEDS = "#id,note\np0,a\n,b\np1,c\n,d\np2,e\n"
LINK_SEEDS = "#source,#target\np0,p1\n,p2\np1,p2\np2,\n"
RUNS = {
    "InMemory": ["--runner", "InMemory"],
    "worker": ["--graph_placement", "worker"],
    "topology": ["--graph_placement", "topology"],
    "sharded": ["--graph_placement", "sharded"],
}


@pytest.mark.parametrize("kind", ["node", "link"])
def test_every_placement_dead_letters_bad_seed_rows(tmp_path, kind):
    if kind == "node":
        graph = write_graph(tmp_path / "graph")
        (graph / "seeds.csv").write_text(NODE_SEEDS)
        extra, good = [], 3
    else:
        graph = write_graph(tmp_path / "graph", schema=WEIGHTED_SCHEMA, spec=LINK_SPEC,
                            cites="#source,#target,weight\np0,p1,1\np1,p2,2\np2,p0,3\n")  # fmt: skip
        (graph / "seeds.csv").write_text(LINK_SEEDS)
        extra, good = ["--seed_edge_set", "cites"], 2
    found = {}
    for run, flags in RUNS.items():
        out = tmp_path / run
        argv = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
                "--input_seeds", str(graph / "seeds.csv"), "--output_samples", f"{out}/s",
                "--max_bad_records", "10", *extra, *flags]  # fmt: skip
        assert sample.main(argv) == 0, run
        found[run] = dead_letters(out)
        report = json.loads((out / "run_summary.json").read_text())
        assert report["bad_records"] == 2, run
        assert report["counters"]["bad_records/seeds"] == 2, run
        assert report["samples"]["seeds_in"] == good, run
    expected = [("seeds", "seeds.csv", 2), ("seeds", "seeds.csv", 4)]
    assert found == {run: expected for run in RUNS}
