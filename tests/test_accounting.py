"""Every seed, node and edge is accounted for in run_summary.json; failed runs look failed."""

from __future__ import annotations

import json

import pytest

from pipelines import partition as partition_cli
from pipelines import sample as sample_cli
from pipelines.reporting import accounting
from sampler.errors import UserError
from sampler.tools import synthetic
from tests.pipeline_helpers import read_records, run_pipeline

SCHEMA = """
node_sets { key: "n" value {
  features { key: "x" value { dtype: DT_INT64 } }
  metadata { filename: "n.csv" } } }
edge_sets { key: "e" value { source: "n" target: "n" metadata { filename: "e.csv" } } }
"""
SPEC = """
seed_op { op_name: "s" node_set_name: "n" }
sampling_ops { op_name: "h" input_op_names: "s" edge_set_name: "e" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""


@pytest.fixture()
def dirty(tmp_path):
    """A small graph with one duplicate id, a self-loop, a parallel edge and dangling edges."""
    graph = tmp_path / "graph"
    graph.mkdir()
    (graph / "graph_schema.pbtxt").write_text(SCHEMA)
    (graph / "n.csv").write_text("#id,x\na,1\nb,2\nc,3\nd,4\na,9\n")
    (graph / "e.csv").write_text(
        "#source,#target\na,b\nb,c\nc,d\nd,a\nc,c\na,b\nghost,a\nb,ghost\nghost,ghost\n"
    )
    (graph / "spec.pbtxt").write_text(SPEC)
    (graph / "seeds.csv").write_text("#id\na\nb\nnope\na\nalso_nope\nc\n")
    return graph


@pytest.mark.parametrize("placement", ["worker", "sharded"])
def test_seeds_in_equal_subgraphs_out_plus_rejected(dirty, tmp_path, placement):
    out = tmp_path / "out"
    run_pipeline(
        str(dirty / "graph_schema.pbtxt"), str(dirty / "spec.pbtxt"), f"{out}/s@2",
        "--input_seeds", str(dirty / "seeds.csv"), "--graph_placement", placement,
    )  # fmt: skip
    summary = json.loads((out / "run_summary.json").read_text())
    samples = summary["samples"]
    assert samples["seeds_in"] == 6
    assert samples["subgraphs_out"] == len(read_records(f"{out}/s-*")) == 4
    assert samples["seeds_rejected"] == {"total": 2, "not_in_seed_node_set": 2}
    assert samples["balanced"] is True
    assert summary["flags"]["graph_placement"] == placement
    assert summary["bad_records"] == 0
    assert summary["wall_seconds"] > 0
    counters = summary["counters"]
    assert counters["rows_read/n"] == 5 and counters["rows_read/e"] == 9
    assert counters["duplicate_node_ids/n"] == 1
    # The same counts whichever placement drops the dangling edges.
    assert summary["graph_issues"] == {
        "dangling_edges": {"e": 3},
        "duplicate_ids": {"n": 1},
        "missing_seeds": {"seeds": 2},
        "self_loops": {"e": 1},
        "parallel_edges": {"e": 1},
    }


@pytest.mark.parametrize("runner", ["worker", "topology", "sharded", "InMemory"])
def test_rejected_seeds_are_listed_in_a_dead_letter_file(dirty, tmp_path, runner):
    """Every seed occurrence not in the seed node set is one JSON line; the records keep
    their bytes (the same as a run on the accepted seeds alone)."""
    out = tmp_path / "out"
    flags = ["--runner", "InMemory"] if runner == "InMemory" else ["--graph_placement", runner]
    run_pipeline(
        str(dirty / "graph_schema.pbtxt"), str(dirty / "spec.pbtxt"), f"{out}/s@1",
        "--input_seeds", str(dirty / "seeds.csv"), *flags,
    )  # fmt: skip
    assert sorted(p.name for p in out.glob("rejected_seeds-*")) == [
        "rejected_seeds-00000-of-00001.jsonl"
    ]
    lines = (out / "rejected_seeds-00000-of-00001.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["seed_id"] for line in lines) == ["also_nope", "nope"]
    assert json.loads(lines[0]) == {
        "set": "seeds", "seed_id": json.loads(lines[0])["seed_id"], "reason": "not in node set 'n'"
    }  # fmt: skip
    assert not list(out.glob("bad_records-*")) and not list(out.glob("beam-temp-*"))
    (dirty / "good.csv").write_text("#id\na\nb\na\nc\n")
    clean = tmp_path / "clean"
    run_pipeline(
        str(dirty / "graph_schema.pbtxt"), str(dirty / "spec.pbtxt"), f"{clean}/s@1",
        "--input_seeds", str(dirty / "good.csv"), *flags,
    )  # fmt: skip
    assert sorted(read_records(f"{out}/s-*")) == sorted(read_records(f"{clean}/s-*"))
    assert not list(clean.glob("rejected_seeds-*"))
    # --overwrite removes the old dead letters with the rest of the run's files.
    run_pipeline(
        str(dirty / "graph_schema.pbtxt"), str(dirty / "spec.pbtxt"), f"{out}/s@1",
        "--input_seeds", str(dirty / "good.csv"), "--overwrite", *flags,
    )  # fmt: skip
    assert not list(out.glob("rejected_seeds-*"))


@pytest.mark.parametrize(
    "strict, fragment",
    [
        ("dangling_edges", "edges with an endpoint not in its node set (e 3)"),
        ("missing_seeds", "seeds not in the seed node set (seeds 2)"),
        ("self_loops,parallel_edges", "--strict self_loops: the input has self-loops (e 1)"),
        ("all", "--strict dangling_edges"),
    ],
)
def test_strict_makes_an_inconsistency_fatal(dirty, tmp_path, capsys, strict, fragment):
    out = tmp_path / "out"
    argv = [
        "--graph_schema", str(dirty), "--sampling_spec", str(dirty / "spec.pbtxt"),
        "--output_samples", f"{out}/s@1", "--input_seeds", str(dirty / "seeds.csv"),
        "--strict", strict,
    ]  # fmt: skip
    assert sample_cli.main(argv) == 2
    assert fragment in capsys.readouterr().err
    assert not (out / "run_summary.json").exists() and not (out / "schema.pbtxt").exists()


def test_strict_names_are_checked_before_running(dirty, tmp_path, capsys):
    argv = [
        "--graph_schema", str(dirty), "--sampling_spec", str(dirty / "spec.pbtxt"),
        "--output_samples", f"{tmp_path}/out/s@1", "--strict", "dangling_edge",
    ]  # fmt: skip
    assert sample_cli.main(argv) == 2
    assert "unknown check 'dangling_edge'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_empty_sets_are_listed_and_can_be_fatal(dirty, tmp_path, capsys):
    (dirty / "e.csv").write_text("#source,#target\n")
    out = tmp_path / "out"
    argv = [
        "--graph_schema", str(dirty), "--sampling_spec", str(dirty / "spec.pbtxt"),
        "--output_samples", f"{out}/s@1",
    ]  # fmt: skip
    assert sample_cli.main(argv) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["graph_issues"]["empty_sets"] == {"e": 0}
    assert summary["samples"]["subgraphs_out"] == 4
    assert sample_cli.main([*argv, "--overwrite", "--strict", "empty_sets"]) == 2
    assert "--strict empty_sets: the input has empty node or edge sets (e)" in (
        capsys.readouterr().err
    )


def test_partition_accounts_for_every_node_and_edge(dirty, tmp_path):
    out = tmp_path / "parts"
    argv = ["--graph_schema", str(dirty), "--output_dir", str(out), "--graph_name", "g"]
    assert partition_cli.main([*argv, "--num_parts", "2"]) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    nodes, edges = summary["partition"]["nodes"], summary["partition"]["edges"]
    assert nodes["n"] == {
        "inner": 4, "read": 5, "rejected": {"duplicate_id": 1}, "balanced": True,
    }  # fmt: skip
    assert edges["e"] == {
        "read": 9, "inner": 6, "rejected": {"missing_endpoint": 3}, "balanced": True,
    }  # fmt: skip
    # The DGL config agrees: 4 inner nodes and 6 inner edges over the parts.
    config = json.loads((out / "g.json").read_text())
    assert config["num_nodes"] == 4 and config["num_edges"] == 6


def test_failed_partition_run_leaves_nothing_that_looks_complete(dirty, tmp_path, capsys):
    (dirty / "n.csv").write_text("#id,x\na,1\nb,oops\nc,3\nd,4\n")
    out = tmp_path / "parts"
    argv = ["--graph_schema", str(dirty), "--output_dir", str(out), "--graph_name", "g"]
    assert partition_cli.main([*argv, "--num_parts", "2"]) == 2
    assert "more than --max_bad_records 0" in capsys.readouterr().err
    assert not (out / "g.json").exists() and not (out / "run_summary.json").exists()
    # Within the limit: the bad row is a dead letter, rejected from the partitions.
    assert partition_cli.main([*argv, "--num_parts", "2", "--max_bad_records", "1"]) == 2
    assert "exists already" in capsys.readouterr().err
    extra = ["--max_bad_records", "1", "--overwrite"]
    assert partition_cli.main([*argv, "--num_parts", "2", *extra]) == 0
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["bad_records"] == 1
    (dead,) = out.glob("bad_records-*.jsonl")
    assert json.loads(dead.read_text())["reason"] == "column 'x': 'oops' is not an integer"
    # b is not a node any more: its 3 edges are rejected as dangling, with the ghost ones.
    assert summary["partition"]["edges"]["e"]["rejected"] == {"missing_endpoint": 6}
    assert summary["partition"]["nodes"]["n"]["inner"] == 3


def test_output_checks_come_before_the_pipeline(dirty, tmp_path, capsys):
    argv = ["--graph_schema", str(dirty), "--graph_name", "g", "--num_parts", "2"]
    # The graph's own folder: not empty (a partition folder is the run's alone), though the
    # run would replace none of its files.
    assert partition_cli.main([*argv, "--output_dir", str(dirty)]) == 2
    assert "exists already" in capsys.readouterr().err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert partition_cli.main([*argv, "--output_dir", str(busy)]) == 2
    assert "exists already" in capsys.readouterr().err
    seeds = dirty / "sub" / "seeds.csv"  # the output named like the seeds table
    seeds.parent.mkdir()
    seeds.write_text("#id\na\n")
    seeds_argv = [
        "--graph_schema", str(dirty), "--sampling_spec", str(dirty / "spec.pbtxt"),
        "--output_samples", str(seeds), "--input_seeds", str(seeds),
    ]  # fmt: skip
    assert sample_cli.main(seeds_argv) == 2
    assert "would replace its input" in capsys.readouterr().err
    assert sorted(p.name for p in (dirty / "sub").iterdir()) == ["seeds.csv"]


def test_rows_lost_between_the_stages_and_their_buckets_fail_the_run():
    counters = {
        "shuffle_rows_sent/nodes": 545_000,
        "shuffle_rows_received/nodes": 284_000,
        "shuffle_rows_sent/seeds": 3_000,
        "shuffle_rows_received/seeds": 3_000,
    }
    with pytest.raises(UserError, match="lost rows .*nodes 261,000 of 545,000"):
        accounting.check_shuffle(counters)
    counters["shuffle_rows_received/nodes"] = 545_000
    accounting.check_shuffle(counters)  # all arrived: no error


def test_every_sample_run_counts_its_bucketed_rows_both_ways(tmp_path):
    """The counters check_shuffle compares are there, and equal, after a real run."""
    schema = tmp_path / "g"
    synthetic.write_graph(synthetic.generate_mag(60, seed=3), str(schema))
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    for placement in ("worker", "sharded"):
        out = tmp_path / placement
        argv = ["--graph_schema", str(schema), "--sampling_spec", spec, "--progress_interval", "0"]
        argv += ["--output_samples", str(out / "s@2"), "--graph_placement", placement]
        assert sample_cli.main(argv) == 0
        counters = json.loads((out / "run_summary.json").read_text())["counters"]
        kinds = {"worker": {"seeds"}, "sharded": {"seeds", "nodes", "edges"}}[placement]
        for kind in kinds:
            sent = counters[f"shuffle_rows_sent/{kind}"]
            assert sent > 0 and counters[f"shuffle_rows_received/{kind}"] == sent
