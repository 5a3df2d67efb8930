"""Temporal sampling of link seeds: each seed's time is its edge's, temporal ops keep only
edges strictly before it (the default for link seeds), the seed edge is hidden, negatives
take their positive's time; checked by tests/temporal_checker.py on every placement that
samples by time."""

from __future__ import annotations

import collections
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import sample as sample_cli
from sampler.errors import UserError
from sampler.sample.plan import make_plan
from sampler.schema import load_graph
from tests.pipeline_helpers import read_records
from tests.temporal_checker import Checker, Op
from tests.test_temporal import _parsed, _tables, _write

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
temporal_seed { edge_time_feature: "year" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 4
  strategy: RANDOM_UNIFORM temporal { edge_time_feature: "year" } }
sampling_ops { op_name: "recent" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  temporal { edge_time_feature: "year" most_recent: true } }
"""
COUNTED = ("seeds_without_time", "seeds_not_in_node_set", "subgraphs")
OPS = [
    Op("cites", 4, "any", "year", strict=True, first_hop=False),
    Op("written", 2, "any", "year", strict=True, first_hop=False),
]


@pytest.fixture(scope="module")
def link_graph(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("temporal_links")
    schema, _, _ = _write(tmp_path)
    (tmp_path / "link.pbtxt").write_text(LINK_SPEC)
    return tmp_path, schema, str(tmp_path / "link.pbtxt")


def _run(schema, spec, out, *extra) -> list[bytes]:
    argv = [
        "--graph_schema", schema, "--sampling_spec", spec, "--output_samples", out,
        "--seed_edge_set", "cites", "--negatives_per_seed", "1", *extra,
    ]  # fmt: skip
    assert sample_cli.main(argv) == 0
    return read_records(out + "*")


@pytest.fixture(scope="module")
def in_memory_links(link_graph):
    tmp_path, schema, spec = link_graph
    return _run(schema, spec, str(tmp_path / "mem" / "samples"), "--runner", "InMemory")


def test_link_records_pass_the_checker(link_graph, in_memory_links):
    tmp_path = link_graph[0]
    checker = Checker(*_tables(tmp_path))
    assert len(in_memory_links) == 2 * 40 * 12  # every cites edge, and one negative each
    for record in in_memory_links:
        checker.check_link(record, "cites", "year", OPS)


def test_the_checker_sees_a_leak_at_equal_times(link_graph, in_memory_links):
    """At-or-before records checked against strictly-before fail: the checker can fail."""
    tmp_path, schema, _ = link_graph
    spec = tmp_path / "loose.pbtxt"
    loose = LINK_SPEC.replace(
        'temporal { edge_time_feature: "year" }',
        'temporal { edge_time_feature: "year" strictly_before: false }',
    )
    spec.write_text(loose)
    records = _run(schema, str(spec), str(tmp_path / "loose" / "samples"), "--runner", "InMemory")
    checker = Checker(*_tables(tmp_path))
    with pytest.raises(AssertionError, match="not eligible"):
        for record in records:
            checker.check_link(record, "cites", "year", OPS)


@pytest.mark.parametrize("placement", ["worker", "topology"])
def test_link_placements_write_the_in_memory_records(link_graph, in_memory_links, placement):
    tmp_path, schema, spec = link_graph
    out = str(tmp_path / placement / "samples")
    got = _run(schema, spec, out, "--graph_placement", placement)
    assert got == in_memory_links


def test_sharded_writes_the_in_memory_link_records(link_graph, in_memory_links):
    """`sharded` finds each seed's time on its source's shard of the seed edge set and carries
    it with the examples (a negative its positive's) and their frontier rows."""
    tmp_path, schema, spec = link_graph
    got = _run(schema, spec, str(tmp_path / "sharded" / "samples"), "--graph_placement", "sharded")
    assert sorted(got) == sorted(in_memory_links)  # the order within a file may differ
    checker = Checker(*_tables(tmp_path))
    for record in got:
        checker.check_link(record, "cites", "year", OPS)


def test_sharded_link_seed_times_of_parallel_edges_and_non_edges(tmp_path):
    """Repeats of a pair take its parallel edges' times in canonical order (the last when
    fewer); a pair that is no edge (a missing endpoint's included) has no time: a bad row of
    the seeds table; with node times on an op: `sharded` writes the in-memory records and
    counts the same."""
    schema, _, edges = _write(tmp_path)
    cites = pq.read_table(edges["cites"][0]).to_pydict()
    first = (cites["#source"][0], cites["#target"][0])
    for year, weight in ((2003, 0.5), (2009, 0.25)):  # two more parallel edges of `first`
        row = {"#source": first[0], "#target": first[1], "year": year, "weight": weight}
        for column, value in row.items():
            cites[column].append(value)
    pq.write_table(pa.table(cites), edges["cites"][0])
    edge_pairs = set(zip(cites["#source"], cites["#target"], strict=True))
    papers = [f"p{i}" for i in range(40)]
    no_edge = next((a, b) for a in papers for b in papers if (a, b) not in edge_pairs)
    pairs = [first] * 5 + [no_edge, ("p1", "nobody"), (cites["#source"][5], cites["#target"][5])]
    seeds = tmp_path / "seeds.parquet"
    columns = {"#source": [a for a, _ in pairs], "#target": [b for _, b in pairs]}
    pq.write_table(pa.table(columns), seeds)
    spec = tmp_path / "spec.pbtxt"
    recent = 'edge_time_feature: "year" most_recent'
    spec.write_text(
        LINK_SPEC.replace(recent, f'node_time_feature: "year" strictly_before: false {recent}')
    )
    got = {}
    runs = {"mem": ["--runner", "InMemory"], "sharded": ["--graph_placement", "sharded"]}
    for name, flags in runs.items():
        out = tmp_path / name
        flags = [*flags, "--input_seeds", str(seeds), "--max_bad_records", "5"]
        records = _run(schema, str(spec), str(out / "samples"), *flags)
        counters = json.loads((out / "run_summary.json").read_text())["counters"]
        got[name] = sorted(records), {c: counters.get(c) for c in (*COUNTED, "bad_records/seeds")}
    assert got["sharded"] == got["mem"]
    want = {"seeds_without_time": 0, "seeds_not_in_node_set": 0, "subgraphs": 12}
    assert got["mem"][1] == {**want, "bad_records/seeds": 2}


def test_link_seed_time_fields_are_checked(link_graph):
    _, schema, _ = link_graph
    graph = load_graph(schema)
    with pytest.raises(UserError, match="temporal_seed.node_time_feature does not apply to link"):
        make_plan(
            graph,
            _parsed(LINK_SPEC.replace("edge_time_feature: \"year\" }\nsampling",
                                      "node_time_feature: \"year\" }\nsampling", 1)),
            seed_edge_set="cites",
        )  # fmt: skip
    with pytest.raises(UserError, match="'weight' is float"):
        make_plan(
            graph,
            _parsed(LINK_SPEC.replace('temporal_seed { edge_time_feature: "year" }',
                                      'temporal_seed { edge_time_feature: "weight" }')),
            seed_edge_set="cites",
        )  # fmt: skip


RUNS = {
    "InMemory": ["--runner", "InMemory"],
    "worker": ["--graph_placement", "worker"],
    "topology": ["--graph_placement", "topology"],
    "sharded": ["--graph_placement", "sharded"],  # (its files may order link records otherwise)
}


def _pairs(tmp_path, count: int, edges: bool) -> list[tuple[str, str]]:
    """`count` (source, target) pairs of papers that are (or are not) cites edges."""
    table = pq.read_table(tmp_path / "cites.parquet").to_pydict()
    cites = set(zip(table["#source"], table["#target"], strict=True))
    every = [(f"p{i}", f"p{j}") for i in range(40) for j in range(40)]
    return [p for p in every if (p in cites) == edges][:count]


def test_a_link_seed_that_is_no_edge_is_a_bad_row(link_graph, capsys):
    """Without a time column, a seed pair that is no edge has no time: a dead letter of the
    seeds table, counted under --max_bad_records, on every placement that samples it."""
    tmp_path, schema, spec = link_graph
    seeds = tmp_path / "pairs.csv"
    rows = _pairs(tmp_path, 3, True) + _pairs(tmp_path, 2, False)
    seeds.write_text("#source,#target\n" + "".join(f"{a},{b}\n" for a, b in rows))
    capsys.readouterr()
    refused = str(tmp_path / "refused" / "samples")
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", refused,
            "--seed_edge_set", "cites", "--input_seeds", str(seeds), "--runner", "InMemory"]  # fmt: skip
    assert sample_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no edge of the seed edge set" in err[0], err
    records = {}
    for run, flags in RUNS.items():
        out = tmp_path / f"no_edge_{run}"
        extra = ["--input_seeds", str(seeds), "--max_bad_records", "2", *flags]
        records[run] = _run(schema, spec, str(out / "samples"), *extra)
        letters = [json.loads(line) for f in out.glob("bad_records-*.jsonl") for line in open(f)]
        assert sorted(d["row"] for d in letters) == sorted(f"{a}->{b}" for a, b in rows[3:]), run
        report = json.loads((out / "run_summary.json").read_text())
        assert report["counters"]["bad_records/seeds"] == 2, run
        assert report["samples"]["seeds_in"] == 3 and report["samples"]["balanced"], run
    assert records["worker"] == records["topology"] == records["InMemory"]
    assert sorted(records["sharded"]) == sorted(records["InMemory"])
    assert len(records["InMemory"]) == 2 * 3


def test_link_seeds_take_the_tables_times(link_graph):
    """With a seed_time column every pair has its row's time, edges or not; repeats of a pair
    are numbered by time."""
    tmp_path, schema, spec = link_graph
    pairs = _pairs(tmp_path, 6, True) + _pairs(tmp_path, 6, False)
    rng = np.random.default_rng(5)
    rows = [(a, b, int(t)) for a, b in pairs for t in rng.integers(2000, 2013, 3)]
    rows = [rows[i] for i in rng.permutation(len(rows))]
    seeds = tmp_path / "timed_pairs.parquet"
    columns = list(zip(*rows, strict=True))
    pq.write_table(pa.table({"#source": columns[0], "#target": columns[1],
                             "seed_time": pa.array(columns[2], pa.int64())}), seeds)  # fmt: skip
    table = collections.defaultdict(list)
    for a, b, t in rows:
        table[a.encode(), b.encode()].append(t)
    records = {}
    for run, flags in RUNS.items():
        out = str(tmp_path / f"timed_{run}" / "samples")
        records[run] = _run(schema, spec, out, "--input_seeds", str(seeds), *flags)
    assert records["worker"] == records["topology"] == records["InMemory"]
    assert sorted(records["sharded"]) == sorted(records["InMemory"])
    assert len(records["InMemory"]) == 2 * len(rows)
    checker = Checker(*_tables(tmp_path))
    for record in records["InMemory"]:
        checker.check_link(record, "cites", "year", OPS, table=table)
