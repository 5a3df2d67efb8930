"""`estimate`: predictions checked against the real sampler's output on generated graphs.

Ground truth is the in-memory sampler (the pipeline's oracle, same kernels, same records)
over every seed, and once the Beam pipeline itself with the sizes of its output files.
The estimate must be within 25% on bytes and on mean subgraph size; the probe sees only
a small fraction of the seeds.
"""

from __future__ import annotations

import collections
import glob
import json
import os
import time

import numpy as np
import pytest
from tensorflow_gnn.sampler import sampling_spec_pb2

from pipelines import cli
from pipelines import estimate as estimate_cli
from sampler.io.graph_tables import read_seed_ids
from sampler.sample import in_memory
from sampler.sample.adjacency import make_seeds
from sampler.sample.encode import encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from sampler.tools import synthetic
from sampler.tools.degree_stats import degree_stats, histogram, stats_cache_path
from sampler.tools.estimate import calibrate, estimate, mean_take, suggest_workers
from sampler.tools.probe import run_probe
from tests.encode_oracle import encode_subgraph
from tests.pipeline_helpers import link_oracle_subgraphs, run_pipeline

TOLERANCE = 0.25


def truth(schema: str, spec: str, aggregation: str = "edge", seed: int = 0, seeds=None) -> dict:
    """Mean sizes and total bytes of the real records (in-memory sampler, every seed)."""
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation)
    mem = in_memory.load_dense_graph(graph, plan)
    ids = read_seed_ids(seeds) if seeds else mem.node_tables[plan.seed_set].rows.ids
    specs = encode_specs(graph.schema)
    sizes = collections.defaultdict(list)
    total = 0
    counters = collections.Counter()
    for sg in in_memory.sample_in_memory(
        graph, plan, mem, make_seeds(ids), Randomness(seed), counters
    ):
        total += len(encode_subgraph(sg, specs)) + 16  # TFRecord framing
        for name, rows in sg.node_sets.items():
            sizes[f"nodes/{name}"].append(len(rows.ids))
        for name, rows in sg.edge_sets.items():
            sizes[f"edges/{name}"].append(len(rows.source))
    means = {key: float(np.mean(v)) for key, v in sizes.items()}
    return {
        "count": len(ids),
        "bytes": total,
        "means": means,
        "nodes": sum(v for k, v in means.items() if k.startswith("nodes/")),
        "edges": sum(v for k, v in means.items() if k.startswith("edges/")),
    }


def predict(schema, spec, probe_seeds, aggregation="edge", seed=0, cache=None):
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation)
    stats, _ = degree_stats(graph, cache)
    count = stats.node_sets[plan.seed_set].count
    model = estimate(graph, plan, stats, count)
    ids = np.empty(probe_seeds, dtype=object)
    ids[:] = [bytes.fromhex(h) for h in stats.node_sets[plan.seed_set].sample_ids[:probe_seeds]]
    probe = run_probe(graph, plan, ids, seed)
    return calibrate(graph, plan, stats, model, probe, uniform_seeds=True), model


def relative_error(predicted: float, real: float) -> float:
    return abs(predicted - real) / real


def check_accuracy(est, real, label: str) -> dict:
    errors = {
        "bytes": relative_error(est.total_bytes, real["bytes"]),
        "mean nodes": relative_error(est.total_nodes, real["nodes"]),
        "mean edges": relative_error(est.total_edges, real["edges"]),
    }
    for key, value in real["means"].items():
        if value >= 5:  # sets that matter; tiny means are all noise
            kind, name = key.split("/")
            predicted = (est.nodes if kind == "nodes" else est.edges)[name]
            errors[key] = relative_error(predicted, value)
    print(label, {k: f"{v:.1%}" for k, v in errors.items()})
    bad = {k: v for k, v in errors.items() if v > TOLERANCE}
    assert not bad, f"{label}: off by more than 25%: {bad}"
    return errors


@pytest.fixture(scope="module")
def mag3000(tmp_path_factory):
    root = tmp_path_factory.mktemp("mag3000")
    schema = synthetic.write_graph(synthetic.generate_mag(3000, seed=5), str(root / "g"))
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return schema, spec


def test_estimate_within_25_percent_of_the_sampler_output(mag3000):
    schema, spec = mag3000
    real = truth(schema, spec)
    est, model = predict(schema, spec, probe_seeds=128)
    assert est.num_seeds == real["count"] == 3000
    errors = check_accuracy(est, real, "mag3000/probe128")
    # Measured when written: every error below 5%.
    assert errors["bytes"] < 0.10
    # The degree model alone over-predicts on this clustered graph (documented), but its
    # first hop, which only depends on the seed's own degree, is exact in expectation.
    assert model.total_nodes > real["nodes"]
    assert relative_error(model.edges["cites"], real["means"]["edges/cites"]) < 0.01


def test_estimate_on_parquet_hub_graph_with_weighted_sampling(tmp_path):
    graph = synthetic.generate_mag(
        2500, seed=2, hub_fraction=0.2, all_node_features=True, edge_weights=True
    )
    schema = synthetic.write_graph(graph, str(tmp_path / "g"), fmt="parquet", num_shards=3)
    spec = synthetic.mag_sampling_spec()
    spec.sampling_ops[0].strategy = sampling_spec_pb2.RANDOM_WEIGHTED
    spec.sampling_ops[0].sample_size = 8
    spec_path = synthetic.write_sampling_spec(spec, str(tmp_path / "spec.pbtxt"))
    real = truth(schema, spec_path, seed=3)
    est, _ = predict(schema, spec_path, probe_seeds=96, seed=3)
    check_accuracy(est, real, "hub-parquet/weighted/probe96")


def test_estimate_with_node_aggregation(tmp_path):
    schema = synthetic.write_graph(synthetic.generate_mag(1200, seed=4), str(tmp_path / "g"))
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    real = truth(schema, spec, aggregation="node")
    est, _ = predict(schema, spec, probe_seeds=96, aggregation="node")
    check_accuracy(est, real, "node-aggregation/probe96")


def test_cli_estimate_against_real_pipeline_files(tmp_path, capsys):
    graph = synthetic.generate_mag(700, seed=8, feature_dim=8)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"), fmt="csv")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    out = tmp_path / "estimate.json"
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--probe_seeds", "64"]
    assert cli.main(["estimate", *argv, "--json", str(out), "--progress_interval", "0"]) == 0
    printed = capsys.readouterr().out
    assert "computed in one pass, cached in" in printed
    assert "method:  probe of 64 seeds" in printed
    assert "seed->paper (cites, 32)" in printed
    assert "dataflow: " in printed and " x n1-" in printed
    predicted = json.loads(out.read_text())
    run_pipeline(schema, spec, str(tmp_path / "out" / "samples@2"))
    capsys.readouterr()
    files = glob.glob(str(tmp_path / "out" / "samples-*"))
    real_bytes = sum(os.path.getsize(f) for f in files)
    assert predicted["num_seeds"] == 700
    assert relative_error(predicted["total_bytes"], real_bytes) < TOLERANCE
    real = truth(schema, spec)
    assert relative_error(sum(predicted["nodes_per_subgraph"].values()), real["nodes"]) < TOLERANCE
    assert relative_error(sum(predicted["edges_per_subgraph"].values()), real["edges"]) < TOLERANCE
    assert predicted["degree_model"]["method"] == "degree statistics"
    placements = {p["placement"]: p for p in predicted["dataflow"]["placements"]}
    assert set(placements) == {"worker", "topology", "sharded"}
    for name in placements:
        assert f"  {name} " in printed
    # the worker placement maps one snapshot of the whole graph per machine (no side input);
    # each topology process reads the tables less features as a side input
    assert placements["worker"]["side_input_gb"] == 0
    assert placements["worker"]["snapshot_gb"] > 0 and placements["topology"]["side_input_gb"] > 0
    assert placements["topology"]["snapshot_gb"] == 0


def test_cli_estimate_with_input_seeds(mag3000, tmp_path, capsys):
    schema, spec = mag3000
    seeds = tmp_path / "seeds.csv"
    # Every 7th paper, and p0 three times: 431 subgraphs.
    ids = [f"p{i}" for i in range(0, 3000, 7)] + ["p0", "p0"]
    seeds.write_text("#id\n" + "\n".join(ids) + "\n")
    out = tmp_path / "e.json"
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--input_seeds", str(seeds)]
    assert estimate_cli.main([*argv, "--probe_seeds", "64", "--json", str(out)]) == 0
    assert f"seeds:   431 ({seeds})" in capsys.readouterr().out
    predicted = json.loads(out.read_text())
    real = truth(schema, spec, seeds=str(seeds))
    assert real["count"] == predicted["num_seeds"] == 431
    assert relative_error(predicted["total_bytes"], real["bytes"]) < TOLERANCE
    assert relative_error(sum(predicted["nodes_per_subgraph"].values()), real["nodes"]) < TOLERANCE
    assert relative_error(sum(predicted["edges_per_subgraph"].values()), real["edges"]) < TOLERANCE


def test_stats_cache_is_reused_and_invalidated_when_a_table_changes(tmp_path):
    graph = synthetic.generate_mag(150, seed=1)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"))
    info = load_graph(schema)
    first, origin = degree_stats(info)
    assert origin.startswith("computed in one pass, cached in")
    assert os.path.exists(stats_cache_path(info.schema_path))
    again, origin = degree_stats(info)
    assert origin.startswith("read from the cache")
    assert again.to_json() == first.to_json()
    # Rewrite `cites` with fewer edges: size and mtime change, the cache must not be used.
    smaller = synthetic.generate_mag(150, seed=1)
    smaller.tables["cites"] = smaller.tables["cites"].slice(0, 10)
    time.sleep(0.01)
    synthetic.write_graph(smaller, str(tmp_path / "g"))
    fresh, origin = degree_stats(load_graph(schema))
    assert origin.startswith("computed in one pass")
    assert fresh.edge_sets["cites"].count == 10
    assert first.edge_sets["cites"].count > 10
    no_cache, origin = degree_stats(load_graph(schema), cache=None)
    assert origin == "computed in one pass (no cache)"


def test_degree_statistics_are_exact_counts(tmp_path):
    graph = synthetic.generate_mag(400, seed=6)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"))
    stats, _ = degree_stats(load_graph(schema), cache=None)
    cites = graph.tables["cites"]
    assert stats.edge_sets["cites"].count == cites.num_rows
    assert stats.edge_sets["written"].count == graph.tables["writes"].num_rows
    assert stats.node_sets["paper"].count == 400
    authors = set(graph.tables["writes"]["#source"].to_pylist())
    authors |= set(graph.tables["affiliated_with"]["#source"].to_pylist())
    assert stats.node_sets["author"].count == len(authors)  # latent: ids seen in edges
    # Out-degree histogram of cites (zeros included) matches a direct count.
    sources = collections.Counter(cites["#source"].to_pylist())
    degrees = [sources.get(f"p{i}".encode(), 0) for i in range(400)]
    assert stats.edge_sets["cites"].out_hist == histogram(np.array(degrees))
    assert mean_take(stats.edge_sets["cites"].out_hist, 3) == pytest.approx(
        np.mean(np.minimum(degrees, 3))
    )
    # `written` reads the writes table backwards: its out-degrees are writes' in-degrees.
    assert stats.edge_sets["written"].out_hist == stats.edge_sets["writes"].in_hist
    assert len(stats.node_sets["paper"].sample_ids) == 400  # all of them: fewer than the pool


def test_worker_suggestion_scales_with_the_target_time(mag3000):
    schema, spec = mag3000
    est, _ = predict(schema, spec, probe_seeds=32)
    est.num_seeds = 100_000_000  # as if the graph were huge
    slow = suggest_workers(est, input_bytes=50 * 10**9, target_seconds=4 * 3600)
    fast = suggest_workers(est, input_bytes=50 * 10**9, target_seconds=3600)
    assert fast.num_workers > slow.num_workers >= 1
    assert fast.machine_type == slow.machine_type
    small = suggest_workers(est, input_bytes=10**6, target_seconds=3600, num_shards=32)
    big = suggest_workers(est, input_bytes=2 * 10**12, target_seconds=3600, num_shards=32)
    assert small.memory_gb_per_worker < big.memory_gb_per_worker


def test_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        estimate_cli.main(["--graph_schema", "g"])
    assert e.value.code == 2
    capsys.readouterr()
    # A range is checked as sample checks it (pipelines.flags): one line, exit 2.
    code = estimate_cli.main(
        ["--graph_schema", "g", "--sampling_spec", "s", "--target_minutes", "0"]
    )
    assert code == 2
    assert (
        capsys.readouterr().err.strip()
        == "error: --target_minutes 0.0: must be a finite number > 0"
    )
    with pytest.raises(SystemExit) as e:
        cli.main(["estimate", "--help"])
    assert e.value.code == 0 and "--probe_seeds" in capsys.readouterr().out
    code = estimate_cli.main(
        ["--graph_schema", str(tmp_path / "missing"), "--sampling_spec", "s.pbtxt"]
    )
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --graph_schema")


LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 4
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 4
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "cited" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "cites" sample_size: 3 strategy: RANDOM_UNIFORM }
"""


def link_truth(schema: str, spec: str, negatives: int, seed: int = 0, seeds=None) -> dict:
    """`truth` for link seeds: every example (positives and negatives) of the in-memory sampler."""
    subgraphs, specs = link_oracle_subgraphs(
        schema, spec, "writes", seed=seed, negatives=negatives, input_seeds=seeds
    )
    sizes, total, count = collections.defaultdict(list), 0, 0
    for sg in subgraphs:
        count += 1
        total += len(encode_subgraph(sg, specs)) + 16  # TFRecord framing
        for kind, sets in (("nodes", sg.node_sets), ("edges", sg.edge_sets)):
            for name, rows in sets.items():
                sizes[f"{kind}/{name}"].append(len(rows.ids if kind == "nodes" else rows.source))
    means = {key: float(np.mean(v)) for key, v in sizes.items()}
    return {
        "count": count,
        "bytes": total,
        "nodes": sum(v for k, v in means.items() if k.startswith("nodes/")),
        "edges": sum(v for k, v in means.items() if k.startswith("edges/")),
    }


@pytest.mark.parametrize("negatives, with_seeds", [(2, False), (0, True)])
def test_cli_estimate_with_link_seeds(tmp_path, capsys, negatives, with_seeds):
    """Records = seed edges x (1 + negatives); sizes and bytes within 25% of the real ones."""
    graph = synthetic.generate_mag(500, seed=7, feature_dim=4)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"))
    spec = tmp_path / "link.pbtxt"
    spec.write_text(LINK_SPEC)
    writes = graph.tables["writes"].to_pydict()
    rows = list(zip(writes["#source"], writes["#target"], strict=True))
    seeds = None
    if with_seeds:  # every 3rd writes row, and the first twice
        picked = rows[::3] + rows[:1]
        seeds = tmp_path / "seeds.csv"
        seeds.write_text(
            "#source,#target\n" + "".join(f"{s.decode()},{t.decode()}\n" for s, t in picked)
        )
    out = tmp_path / "e.json"
    argv = ["--graph_schema", schema, "--sampling_spec", str(spec), "--seed_edge_set", "writes"]
    argv += ["--negatives_per_seed", str(negatives), "--probe_seeds", "96", "--json", str(out)]
    argv += ["--input_seeds", str(seeds)] if seeds else []
    assert estimate_cli.main([*argv, "--progress_interval", "0"]) == 0
    printed = capsys.readouterr().out
    seed_edges = len(picked) if with_seeds else len(rows)
    assert f"seeds:   {seed_edges:,} seed edges" in printed
    assert f"method:  probe of 96 seed edges{' and 96 negatives' if negatives else ''}" in printed
    assert "papers (writes, 4)" in printed
    predicted = json.loads(out.read_text())
    real = link_truth(schema, str(spec), negatives, seeds=str(seeds) if seeds else None)
    assert predicted["num_seeds"] == real["count"] == seed_edges * (1 + negatives)
    assert predicted["nodes_per_subgraph"]["_readout"] == 1.0
    nodes = sum(predicted["nodes_per_subgraph"].values())
    edges = sum(predicted["edges_per_subgraph"].values())
    errors = {
        "bytes": relative_error(predicted["total_bytes"], real["bytes"]),
        "nodes": relative_error(nodes, real["nodes"]),
        "edges": relative_error(edges, real["edges"]),
    }
    print(errors)
    assert max(errors.values()) < TOLERANCE, errors
