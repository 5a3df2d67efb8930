"""Link seeds on the `sharded` placement: the same records (sorted sets: the order
within an output shard may differ) and the same accounting as `worker` and `--runner
InMemory`, with the same leakage rule; and a small --worker_memory_mb that picks `sharded`
with raised flags for a link spec.

`sharded` shares no sampling code with the other two past the choice of edges of a frontier
row: it looks endpoints up per shard, draws negatives' targets by global rank through ranges of
the target set's fingerprints, drops seed edges with the pair each frontier row carries and
assembles from fingerprints, where `worker` and InMemory run `sampler.sample.link` on one
dense graph.
"""

from __future__ import annotations

import json
import re

import pytest

from sampler.sample import link
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.pipeline_helpers import link_oracle_records, read_records, run_pipeline
from tests.test_golden import write_text
from tests.test_library import LINK_SPEC
from tests.test_link_placement import GHOSTS, featured_links  # noqa: F401 - a fixture
from tests.test_link_prediction import random_graph

# Counters of the run summary that every placement must agree on.
SAME_COUNTERS = ("seeds_not_in_node_set", "negatives", "negatives_that_are_edges", "subgraphs")


def run(tmp_path, schema, spec, seed_edge_set, name, *extra):
    """(records, run summary's `samples`, its counters) of one run."""
    out = tmp_path / name
    beam = [] if "InMemory" in extra else ["--num_shards", "3", "--num_buckets", "2"]
    run_pipeline(
        schema, spec, f"{out}/samples@2", "--seed_edge_set", seed_edge_set, "--seed", "3",
        *beam, *extra,
    )  # fmt: skip
    summary = json.loads((out / "run_summary.json").read_text())
    return read_records(f"{out}/samples-*-of-00002"), summary["samples"], summary["counters"]


def three_runs(tmp_path, schema, spec, seed_edge_set, *flags):
    return {
        name: run(tmp_path, schema, spec, seed_edge_set, name, *flags, *how)
        for name, how in (
            ("sharded", ["--graph_placement", "sharded"]),
            ("worker", ["--graph_placement", "worker"]),
            ("memory", ["--runner", "InMemory"]),
        )
    }


def assert_same(runs, expected):
    """Every run has the expected records, sharded the same summary and counters as worker
    (and as InMemory where it counts them)."""
    records, samples, counters = runs["sharded"]
    assert sorted(records) == sorted(expected)
    for name in ("worker", "memory"):
        assert sorted(runs[name][0]) == sorted(expected), name
        assert runs[name][1] == samples, name
        for counter in SAME_COUNTERS:
            if counter in runs[name][2]:
                assert runs[name][2][counter] == counters.get(counter), (name, counter)
    for counter, value in runs["worker"][2].items():
        if counter.startswith(("output_nodes/", "output_edges/")):
            assert counters[counter] == value, counter


@pytest.mark.parametrize(
    "aggregation, negatives, with_seeds, keep",
    [
        ("edge", 0, False, False),
        ("node", 2, False, False),
        ("edge", 2, True, False),
        ("node", 0, True, True),
    ],
)
def test_sharded_gives_the_records_and_accounting_of_worker_and_in_memory(
    featured_links,  # noqa: F811
    tmp_path,
    aggregation,
    negatives,
    with_seeds,
    keep,
):
    """MAG-shaped, author -> paper seeds (A != B), dangling `writes` rows among the default
    seeds; the seed table repeats two pairs and has a pair with a missing endpoint each way."""
    schema, spec, seeds, writes_rows = featured_links
    flags = ["--edge_aggregation_method", aggregation, "--negatives_per_seed", str(negatives)]
    flags += ["--input_seeds", seeds] if with_seeds else []
    flags += ["--keep_seed_edges"] if keep else []
    runs = three_runs(tmp_path, schema, spec, "writes", *flags)
    expected = link_oracle_records(
        schema,
        spec,
        "writes",
        seed=3,
        negatives=negatives,
        keep=keep,
        input_seeds=seeds if with_seeds else None,
        aggregation=aggregation,
    )
    assert_same(runs, expected)
    seeds_in, rejected = (9, 2) if with_seeds else (writes_rows, len(GHOSTS))
    _, samples, counters = runs["sharded"]
    assert len(expected) == (seeds_in - rejected) * (1 + negatives)
    assert samples["seeds_in"] == seeds_in
    assert samples["seeds_rejected"]["not_in_seed_node_set"] == rejected
    assert counters["seeds_not_in_node_set"] == rejected
    assert counters.get("negatives", 0) == (seeds_in - rejected) * negatives
    if negatives and not with_seeds:  # 396 negatives among 30 papers: some are edges
        assert counters["negatives_that_are_edges"] > 0


def leaks(records, schema, spec, aggregation) -> int:
    """Records whose seed pair is an edge (either direction) of their own subgraph."""
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation, "e")
    specs = encode_specs(link.link_output_schema(graph.schema, plan))
    count = 0
    for record in records:
        sub = decode_subgraph(record, specs)
        ids = sub.node_sets["n"].ids
        a = ids[sub.edge_sets[link.READOUT_SOURCE].source[0]]
        b = ids[sub.edge_sets[link.READOUT_TARGET].source[0]]
        pairs = set()
        for name in ("e", "r"):
            es = sub.edge_sets[name]
            pairs |= {(ids[s], ids[t]) for s, t in zip(es.source, es.target, strict=True)}
        count += (a, b) in pairs or (b, a) in pairs
    return count


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_one_node_set_for_both_ends_with_and_without_the_seed_edges(tmp_path, aggregation):
    """A == B (`e` and its reverse `r` on one node set, two hops, parallel edges and self
    loops among random edges): both orientations of the pair go, and none leaks on `sharded`
    (checked on the decoded records, not against a kernel), unless --keep_seed_edges."""
    schema, spec = random_graph(tmp_path, n=40, m=200)
    found = {}
    for keep in (False, True):
        flags = ["--edge_aggregation_method", aggregation, "--negatives_per_seed", "1"]
        flags += ["--keep_seed_edges"] if keep else []
        runs = three_runs(tmp_path / f"keep{keep}", schema, spec, "e", *flags)
        expected = link_oracle_records(
            schema, spec, "e", seed=3, negatives=1, keep=keep, aggregation=aggregation
        )
        assert len(expected) == 2 * 200
        assert_same(runs, expected)
        found[keep] = leaks(runs["sharded"][0], schema, spec, aggregation)
    assert found[False] == 0
    assert found[True] > 0.5 * 200  # positives and negatives alike, so the rule matters


def test_a_small_budget_picks_sharded_for_link_seeds_with_raised_flags(tmp_path, capsys):
    """--worker_memory_mb that only `sharded` fits (see tests/test_sharded_bound.py): auto
    picks it for a link spec, raises the flags, and the records are worker's with those flags."""
    graph = synthetic.generate_mag(40, seed=4, feature_dim=8)
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"), "tfrecord")
    spec = write_text(tmp_path / "spec.pbtxt", LINK_SPEC)
    common = ["--seed_edge_set", "writes", "--seed", "5", "--negatives_per_seed", "1"]
    run_pipeline(
        schema, spec, f"{tmp_path}/auto/samples@2", "--graph_placement", "auto",
        "--worker_memory_mb", "520", "--num_shards", "1", "--num_buckets", "1", *common,
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "graph placement: sharded:" in out
    chosen = re.search(r"sharded flags: --num_shards (\d+) --num_buckets (\d+)", out)
    assert chosen, out
    shards, buckets = chosen.groups()
    assert int(buckets) > 1
    run_pipeline(
        schema, spec, f"{tmp_path}/worker/samples@2", "--graph_placement", "worker",
        "--num_shards", shards, "--num_buckets", buckets, *common,
    )  # fmt: skip
    auto = read_records(f"{tmp_path}/auto/samples-*-of-00002")
    worker = read_records(f"{tmp_path}/worker/samples-*-of-00002")
    assert sorted(auto) == sorted(worker)
    assert len(auto) == 2 * graph.tables["writes"].num_rows
    expected = link_oracle_records(schema, spec, "writes", seed=5, negatives=1)
    assert sorted(auto) == sorted(expected)
