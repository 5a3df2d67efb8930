"""Temporal sampling: the spec's checks, the kernels against their oracle, and the records of
every runner that samples by time checked by an independent checker (tests/temporal_checker.py).

The graph is tiny (40 papers, 20 authors) so that a few thousand samples (each paper repeated
as a seed) make the checker's test of uniformity meaningful; the runs use a fixed --seed, so
the statistic is the same number on every run.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import text_format

from pipelines import estimate as estimate_cli
from pipelines import sample as sample_cli
from sampler.errors import UserError
from sampler.protos import sampling_spec_pb2
from sampler.sample import dense, in_memory
from sampler.sample.plan import RANDOM_WEIGHTED, TOP_K, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from tests import kernel_oracles as oracles
from tests.pipeline_helpers import read_records
from tests.temporal_checker import Checker, Op, parse_example

PAPERS, AUTHORS = 40, 20


def _schema(kind: str) -> str:
    dtype = "DT_INT64" if kind == "int" else "DT_FLOAT"
    year = f'features {{ key: "year" value {{ dtype: {dtype} }} }}'
    return f"""
node_sets {{ key: "paper" value {{ {year}
  features {{ key: "feat" value {{ dtype: DT_FLOAT }} }}
  metadata {{ filename: "paper.parquet" }} }} }}
node_sets {{ key: "author" value {{ {year} metadata {{ filename: "author.parquet" }} }} }}
edge_sets {{ key: "cites" value {{ source: "paper" target: "paper" {year}
  features {{ key: "weight" value {{ dtype: DT_FLOAT }} }}
  metadata {{ filename: "cites.parquet" }} }} }}
edge_sets {{ key: "written" value {{ source: "paper" target: "author" {year}
  metadata {{ filename: "written.parquet" }} }} }}
edge_sets {{ key: "writes" value {{ source: "author" target: "paper" {year}
  metadata {{ filename: "writes.parquet" }} }} }}
"""


SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
temporal_seed { node_time_feature: "year" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 4
  strategy: RANDOM_UNIFORM temporal { edge_time_feature: "year" } }
sampling_ops { op_name: "recent" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  temporal { edge_time_feature: "year" node_time_feature: "year" most_recent: true } }
sampling_ops { op_name: "papers" input_op_names: "recent" edge_set_name: "writes"
  sample_size: 3 strategy: RANDOM_UNIFORM
  temporal { edge_time_feature: "year" window: 3 strictly_before: true } }
"""
CHECKED = [
    Op("cites", 4, "uniform", "year"),
    Op("written", 2, "recent", "year", node_time="year"),
    Op("writes", 3, "any", "year", strict=True, window=3, first_hop=False),
]


def _write(tmp_path, kind: str = "int", null_year: bool = False):
    """The graph's Parquet tables and schema; each source's out-edges go to distinct targets,
    times tie often. Returns (schema path, checker tables, checker edges)."""
    rng = np.random.default_rng(7)
    cast = (lambda a: a.astype(np.int64)) if kind == "int" else (lambda a: a.astype(np.float32))
    papers = [f"p{i}" for i in range(PAPERS)]
    authors = [f"a{i}" for i in range(AUTHORS)]
    paper_year = pa.array(cast(rng.integers(2000, 2011, PAPERS)))
    if null_year:
        paper_year = pa.array([None, *paper_year.to_pylist()[1:]], paper_year.type)
    tables = {
        "paper": {"#id": papers, "year": paper_year, "feat": rng.random(PAPERS, np.float32)},
        "author": {"#id": authors, "year": cast(rng.integers(1995, 2008, AUTHORS))},
    }
    ends = {
        "cites": ("paper", "paper"),
        "written": ("paper", "author"),
        "writes": ("author", "paper"),
    }
    degree = {"cites": 12, "written": 6, "writes": 8}
    for name, (src, dst) in ends.items():
        src_ids, dst_ids = tables[src]["#id"], tables[dst]["#id"]
        rows = [
            (s, dst_ids[t])
            for s in src_ids
            for t in rng.choice(len(dst_ids), degree[name], replace=False)
        ]
        table = {
            "#source": [s for s, _ in rows],
            "#target": [t for _, t in rows],
            "year": cast(rng.integers(1998, 2013, len(rows))),
        }
        if name == "cites":
            table["weight"] = rng.random(len(rows), np.float32)
        tables[name] = table
    for name, table in tables.items():
        pq.write_table(pa.table(table), tmp_path / f"{name}.parquet")
    (tmp_path / "graph_schema.pbtxt").write_text(_schema(kind))
    nodes = {name: str(tmp_path / f"{name}.parquet") for name in ("paper", "author")}
    edges = {name: (str(tmp_path / f"{name}.parquet"), *e) for name, e in ends.items()}
    return str(tmp_path / "graph_schema.pbtxt"), nodes, edges


def _seeds(tmp_path, repeats: int) -> str:
    path = tmp_path / "seeds.parquet"
    pq.write_table(pa.table({"#id": [f"p{i}" for i in range(PAPERS)] * repeats}), path)
    return str(path)


def _spec(tmp_path, text: str = SPEC) -> str:
    path = tmp_path / "spec.pbtxt"
    path.write_text(text)
    return str(path)


def _parsed(text: str):
    return text_format.Parse(text, sampling_spec_pb2.SamplingSpec())


def _plan(schema: str, text: str):
    return make_plan(load_graph(schema), _parsed(text))


# --------------------------------------------------------------------------- the spec


@pytest.mark.parametrize(
    "old, new, message",
    [
        ('temporal_seed { node_time_feature: "year" }\n', "", "temporal_seed.node_time_feature"),
        ('node_time_feature: "year" }\nsampling', 'node_time_feature: "feat" }\nsampling', ""),
        ('edge_time_feature: "year" }', 'edge_time_feature: "when" }', "'when' is not a feature"),
        ('edge_time_feature: "year" }', 'edge_time_feature: "weight" }', "year' is int"),
        ("window: 3", "window: -1", "temporal.window must be a finite number >= 0"),
        ("window: 3", "window: 1.5", "temporal.window must be a whole number"),
        ("sample_size: 2\n", "sample_size: 2 strategy: TOP_K\n", "leave strategy unset"),
    ],
)
def test_the_plan_refuses_bad_temporal_fields_in_one_line(tmp_path, old, new, message):
    schema, _, _ = _write(tmp_path)
    assert old in SPEC
    with pytest.raises(UserError) as e:
        _plan(schema, SPEC.replace(old, new, 1))
    line = str(e.value)
    assert "\n" not in line and "sampling_spec" in line
    if message:
        assert message in line, line
    else:  # a float seed time against int edge times
        assert "kind of time" in line or "is float" in line, line


def test_untimed_specs_plan_as_before(tmp_path):
    schema, _, _ = _write(tmp_path)
    untimed = re.sub(r"temporal \{[^}]*\}|temporal_seed \{[^}]*\}", "", SPEC)
    untimed = untimed.replace("sample_size: 2\n", "sample_size: 2 strategy: RANDOM_UNIFORM\n")
    plan = _plan(schema, untimed)
    assert plan.seed_time is None and all(op.temporal is None for op in plan.ops)


# --------------------------------------------------------------------------- the kernels


@pytest.mark.parametrize("kind", ["int", "float"])
def test_temporal_picks_match_the_oracle(tmp_path, kind):
    """Every strategy, strictly or not, with and without a window and node times, on a
    frontier of every paper for many seed times (ties, empty eligibility, all eligible)."""
    schema, _, _ = _write(tmp_path, kind)
    graph = load_graph(schema)
    base = _plan(schema, SPEC)
    weighted = SPEC.replace(
        "sample_size: 4\n  strategy: RANDOM_UNIFORM", "sample_size: 4 strategy: TOP_K"
    )
    dg = in_memory.load_dense_graph(graph, _plan(schema, weighted))
    adj = dg.adjacency["cites"]
    n = len(dg.nodes["paper"].rows.fp)
    rng = np.random.default_rng(1)
    samples = 16
    seed_time = rng.integers(1997, 2014, samples).astype(np.int64 if kind == "int" else np.float32)
    fs = np.repeat(np.arange(samples, dtype=np.int64), n)
    fr = np.tile(np.arange(n, dtype=np.int64), samples)
    keep = adj.degrees[fr] > 0
    fs, fr = fs[keep], fr[keep]
    keys = rng.integers(0, 2**63, samples, dtype=np.int64).astype(np.uint64)
    randomness = Randomness(5)
    op = base.ops[0]
    checked = 0
    for how in ("uniform", "recent", TOP_K, RANDOM_WEIGHTED):
        for strict in (False, True):
            for window in (None, 2.0):
                for node_time in (None, "year"):
                    rule = op.temporal.__class__("year", node_time, strict, window, how == "recent")
                    strategy = how if how in (TOP_K, RANDOM_WEIGHTED) else op.strategy
                    this = op.__class__(**{**op.__dict__, "temporal": rule, "strategy": strategy})
                    for k in (1, 3):
                        this = this.__class__(**{**this.__dict__, "sample_size": k})
                        got = dense.temporal_dense.sample_op(
                            dg, this, (fs, fr), keys, randomness, seed_time, kind
                        )
                        lo, hi = dense.temporal_dense.temporal.bounds(seed_time, rule, kind)
                        streams = randomness.stream(
                            this.key, keys[fs], dg.nodes["paper"].rows.fp[fr]
                        )
                        node_times = None
                        if node_time:
                            node_times = dg.nodes["paper"].rows.features["year"]
                        want = oracles.temporal_picks(
                            fs, fr, adj.starts, adj.degrees, adj.targets,
                            adj.features["year"], lo, hi, node_times, streams, k, how,
                            adj.weights,
                        )  # fmt: skip
                        np.testing.assert_array_equal(got[0], want[0])
                        np.testing.assert_array_equal(got[1], want[1])
                        np.testing.assert_array_equal(got[2], adj.targets[want[1]])
                        checked += len(want[1])
    assert checked > 10_000


# --------------------------------------------------------------------------- the records


def _run(tmp_path, schema, spec, out: str, *extra: str) -> list[bytes]:
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", out, *extra]
    assert sample_cli.main(argv) == 0
    return read_records(out + "*")


@pytest.fixture(scope="module")
def in_memory_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("temporal")
    schema, nodes, edges = _write(tmp_path)
    spec = _spec(tmp_path)
    seeds = _seeds(tmp_path, 60)
    out = str(tmp_path / "mem" / "samples")
    records = _run(tmp_path, schema, spec, out, "--runner", "InMemory", "--input_seeds", seeds)
    return tmp_path, schema, spec, seeds, records, Checker(nodes, edges)


def test_in_memory_records_pass_the_checker(in_memory_run):
    *_, records, checker = in_memory_run
    assert len(records) == PAPERS * 60
    for record in records:
        checker.check(record, "paper", "year", CHECKED)
    z, dof = checker.uniform_z()
    assert dof > 100 and abs(z) < 4, (z, dof)


def test_the_checker_catches_leaks_and_bias(in_memory_run):
    """The checker can fail: the same records checked against a stricter rule (equal times
    excluded) show an ineligible edge, and picks that are not uniform show in the statistic."""
    tmp_path, *_, records, _ = in_memory_run
    nodes, edges = _tables(tmp_path)
    strict = Checker(nodes, edges)
    with pytest.raises(AssertionError, match="not eligible|most recent|edges, want"):
        for record in records:
            strict.check(record, "paper", "year", [Op("cites", 4, "uniform", "year", strict=True)])
    biased = Checker(nodes, edges)
    for record in records:  # 'most recent' picks checked as if uniform: far from uniform
        biased.check(record, "paper", "year", [Op("written", 2, "uniform", "year", "year")])
    z, _ = biased.uniform_z()
    assert z > 10, z


def _tables(tmp_path):
    nodes = {name: str(tmp_path / f"{name}.parquet") for name in ("paper", "author")}
    ends = {
        "cites": ("paper", "paper"),
        "written": ("paper", "author"),
        "writes": ("author", "paper"),
    }
    edges = {name: (str(tmp_path / f"{name}.parquet"), *e) for name, e in ends.items()}
    return nodes, edges


@pytest.mark.parametrize("placement", ["worker", "topology"])
def test_the_placements_write_the_in_memory_records(in_memory_run, placement):
    tmp_path, schema, spec, seeds, records, _ = in_memory_run
    out = str(tmp_path / placement / "samples")
    got = _run(tmp_path, schema, spec, out, "--input_seeds", seeds, "--graph_placement", placement)
    assert got == records  # the same files, record for record
    fresh = Checker(*_tables(tmp_path))
    for record in got:
        fresh.check(record, "paper", "year", CHECKED)
    assert abs(fresh.uniform_z()[0]) < 4
    schema_text = (tmp_path / placement / "schema.pbtxt").read_text()
    assert re.search(r'key: "seed_time"\s+value \{\s+dtype: DT_INT64', schema_text)


def test_sharded_writes_the_in_memory_records(in_memory_run):
    """`sharded` carries each seed's time with its frontier rows, and each edge of an op with
    a node time carries its target's time in its adjacency shard: the same records."""
    tmp_path, schema, spec, seeds, records, _ = in_memory_run
    out = str(tmp_path / "sharded" / "samples")
    got = _run(tmp_path, schema, spec, out, "--input_seeds", seeds, "--graph_placement", "sharded")
    assert got == records
    checker = Checker(*_tables(tmp_path))
    for record in got:
        checker.check(record, "paper", "year", CHECKED)
    assert abs(checker.uniform_z()[0]) < 4


def test_sharded_node_times_of_float_kind(tmp_path):
    """Float node times (float32 on the adjacency shard), NaN and dangling targets included:
    `sharded` writes the in-memory records."""
    schema, nodes, edges = _write(tmp_path, "float")
    authors = pq.read_table(nodes["author"]).to_pydict()
    authors["year"][3] = float("nan")  # never eligible
    pq.write_table(pa.table(authors), nodes["author"])
    written = pq.read_table(edges["written"][0]).to_pydict()
    for column, value in (("#source", "p0"), ("#target", "a99"), ("year", 1999.0)):
        written[column].append(value)  # a target not in its node set: dropped everywhere
    pq.write_table(pa.table(written), edges["written"][0])
    spec = _spec(tmp_path)
    records = {}
    runs = {"mem": ["--runner", "InMemory"], "sharded": ["--graph_placement", "sharded"]}
    for name, flags in runs.items():
        records[name] = _run(tmp_path, schema, spec, str(tmp_path / name / "samples"), *flags)
    assert records["sharded"] == records["mem"] and len(records["mem"]) == PAPERS


def test_float_times_pass_the_checker(tmp_path):
    schema, nodes, edges = _write(tmp_path, "float")
    out = str(tmp_path / "out" / "samples")
    records = _run(tmp_path, schema, _spec(tmp_path), out, "--runner", "InMemory")
    checker = Checker(nodes, edges)
    for record in records:
        checker.check(record, "paper", "year", CHECKED)
    assert len(records) == PAPERS


def test_a_seed_without_a_time_is_a_bad_row(tmp_path, capsys):
    schema, _, _ = _write(tmp_path, null_year=True)
    out = str(tmp_path / "out" / "samples")
    spec = _spec(tmp_path)
    assert sample_cli.main(["--graph_schema", schema, "--sampling_spec", spec,
                            "--output_samples", out, "--runner", "InMemory"]) == 2  # fmt: skip
    assert "missing value" in capsys.readouterr().err
    records = _run(tmp_path, schema, spec, out, "--runner", "InMemory", "--max_bad_records", "1")
    assert len(records) == PAPERS - 1  # p0, whose year is null, is not sampled


def test_estimate_probes_by_time(tmp_path):
    """On a MAG-shaped graph with paper years as time, the estimate of a temporal spec (its
    probe samples by time) is within 10% of the records' sizes; the untimed degree model is
    far above them."""
    import json

    from sampler.tools import synthetic

    graph = synthetic.generate_mag(300, seed=1, feature_dim=4, edge_years=True)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"), fmt="parquet")
    spec = synthetic.write_sampling_spec(
        synthetic.temporal_mag_sampling_spec(), str(tmp_path / "spec.pbtxt")
    )
    report = tmp_path / "estimate.json"
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--stats_cache", "none",
            "--probe_seeds", "300", "--json", str(report)]  # fmt: skip
    assert estimate_cli.main(argv) == 0
    estimated = json.loads(report.read_text())
    out = str(tmp_path / "out" / "samples")
    records = [parse_example(r) for r in _run(tmp_path, schema, spec, out, "--runner", "InMemory")]
    for name in ("cites", "writes", "written", "has_topic"):
        actual = np.mean([r[f"edges/{name}.#size"][0] for r in records])
        got = estimated["edges_per_subgraph"][name]
        assert abs(got - actual) <= 0.1 * actual, (name, got, actual)
    model = estimated["degree_model"]["edges_per_subgraph"]["writes"]
    assert model > 1.3 * estimated["edges_per_subgraph"]["writes"]


def test_validate_checks_the_temporal_fields(tmp_path, capsys):
    from pipelines import validate as validate_cli

    schema, _, _ = _write(tmp_path)
    bad = _spec(tmp_path, SPEC.replace('edge_time_feature: "year" }', 'edge_time_feature: "yr" }'))
    assert validate_cli.main(["--graph_schema", schema, "--sampling_spec", bad]) == 1
    out = capsys.readouterr().out
    assert "FAIL sampling spec" in out and "temporal.edge_time_feature 'yr'" in out, out


def test_tf_gnn_spec_objects_still_plan(tmp_path):
    """Library users pass TF-GNN's own SamplingSpec class, which has no extension fields."""
    from tensorflow_gnn.sampler import sampling_spec_pb2 as tfgnn_spec_pb2

    schema, _, _ = _write(tmp_path)
    untimed = re.sub(r"temporal \{[^}]*\}|temporal_seed \{[^}]*\}", "", SPEC)
    untimed = untimed.replace("sample_size: 2\n", "sample_size: 2 strategy: RANDOM_UNIFORM\n")
    spec = text_format.Parse(untimed, tfgnn_spec_pb2.SamplingSpec())
    plan = make_plan(load_graph(schema), spec)
    assert plan.seed_time is None and len(plan.ops) == 3
