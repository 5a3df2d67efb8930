"""Bad inputs, round 2: each class ends in one line (exit 2) or a documented
result, with nothing lost. Ctrl-C is in tests/test_interrupts.py.

The CLIs run in this process (`main(argv)` is what `python -m` runs, with run_main's one-line
error handling); a few run as subprocesses where the process itself matters.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import urllib.parse

import pytest

from pipelines import estimate, partition, sample, show, stats
from sampler.io import tfrecord
from sampler.sample.encode import decode_subgraph
from sampler.tools.sample_stats import load_specs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  metadata { filename: "paper.csv" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper"
  metadata { filename: "cites.csv" } } }
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""
WEIGHTED_SCHEMA = SCHEMA.replace(
    'target: "paper"', 'target: "paper"\n  features { key: "weight" value { dtype: DT_FLOAT } }'
)
LINK_SPEC = """
symmetric_link_seed_op { op_name: "link" }
sampling_ops { op_name: "hop" input_op_names: "link" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_WEIGHTED }
"""


def write_graph(folder, schema=SCHEMA, paper="#id,feat\np0,1;2\np1,3;4\np2,5;6\n",
                cites="#source,#target\np0,p1\np1,p2\np2,p0\n", spec=SPEC):  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph_schema.pbtxt").write_text(schema)
    (folder / "paper.csv").write_text(paper)
    (folder / "cites.csv").write_text(cites)
    (folder / "spec.pbtxt").write_text(spec)
    return folder


@pytest.fixture()
def graph(tmp_path):
    return write_graph(tmp_path / "graph")


def digest(folder) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def one_line(capsys, code, *fragments, expected_code=2) -> str:
    err = capsys.readouterr().err
    assert code == expected_code, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
    return errors[0]


def sample_args(graph, out, *extra):
    return ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
            "--output_samples", str(out), *extra]  # fmt: skip


def partition_args(graph, out, *extra):
    return ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g", *extra]


def records(pattern_dir, specs_schema):
    specs = load_specs(str(specs_schema))
    out = []
    for path in sorted(pattern_dir.glob("s*")):
        if path.name.startswith("schema"):
            continue
        with open(path, "rb") as f:
            out += [decode_subgraph(r, specs) for _, r in tfrecord.records(str(path), f)]
    return out


# 2 ---------------------------------------------------------------- inputs are never replaced


def test_overwrite_never_replaces_an_input_file_outside_the_table_folders(tmp_path, capsys):
    tables = write_graph(tmp_path / "tables")
    out = tmp_path / "out"
    out.mkdir()
    # The schema names its tables by absolute path and lies in the output folder under the
    # name of the output GraphTensor schema; the seeds lie there under the samples' name.
    schema = SCHEMA.replace('"paper.csv"', f'"{tables}/paper.csv"').replace(
        '"cites.csv"', f'"{tables}/cites.csv"'
    )
    (out / "schema.pbtxt").write_text(schema)
    (out / "spec.pbtxt").write_text(SPEC)
    (out / "seeds.csv").write_text("#id\np0\n")
    before, tables_before = digest(out), digest(tables)
    base = ["--graph_schema", str(out / "schema.pbtxt"), "--sampling_spec", str(out / "spec.pbtxt")]
    for extra in ([], ["--overwrite"]):
        code = sample.main([*base, "--output_samples", str(out / "s"), *extra])
        one_line(capsys, code, "would replace its input", str(out / "schema.pbtxt"))
    code = sample.main([*base, "--output_samples", str(out / "seeds.csv"), "--input_seeds",
                        str(out / "seeds.csv"), "--overwrite"])  # fmt: skip
    one_line(capsys, code, "would replace its input")
    assert digest(out) == before and digest(tables) == tables_before


# 3, 4, 7 and rough edges ------------------------------------------- counts, sizes and seeds


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["@1000000000"], "between 1 and 10,000"),
        (["@1000000"], "between 1 and 10,000"),
        (["--num_shards", "0"], "--num_shards 0: must be between 1 and 65,536"),
        (["--num_shards", "1000000000"], "--num_shards 1000000000: must be between 1 and"),
        (["--num_buckets", "100000000"], "--num_buckets 100000000: must be between 1 and"),
        (["--negatives_per_seed", "-1"], "--negatives_per_seed -1: must be between 0 and"),
        (["--negatives_per_seed", "10000000"], "--negatives_per_seed 10000000: must be"),
        (["--max_bad_records", "-1"], "--max_bad_records -1: must be >= 0"),
        (["--worker_memory_mb", "-5"], "--worker_memory_mb -5.0: must be a finite number > 0"),
        (["--worker_memory_mb", "nan"], "--worker_memory_mb nan: must be a finite number > 0"),
        (["--progress_interval", "-1"], "--progress_interval -1.0: must be >= 0"),
        (["--seed", str(2**64)], "--seed 18446744073709551616: must be between 0 and"),
        (["--seed", "-1"], "--seed -1: must be between 0 and 18,446,744,073,709,551,615"),
    ],
)
def test_sample_counts_and_seeds_are_range_checked_up_front(graph, capsys, extra, fragment):
    out = graph.parent / "out"
    if extra[0].startswith("@"):
        args = sample_args(graph, f"{out}/s{extra[0]}")
    else:
        args = sample_args(graph, out / "s", *extra)
    one_line(capsys, sample.main(args), fragment)
    assert not out.exists()  # refused before anything is written


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--num_parts", "100000000"], "--num_parts 100000000: must be between 1 and 4,096"),
        (["--num_parts", "0"], "--num_parts 0: must be between 1 and 4,096"),
        (["--num_parts", "2", "--num_shards", "1000000"], "--num_shards 1000000: must be"),
        (["--num_parts", "2", "--num_hops", "1000"], "--num_hops 1000: must be between 1 and"),
        (["--num_parts", "2", "--lp_rounds", "1000000"], "--lp_rounds 1000000: must be"),
        (["--num_parts", "2", "--lp_cluster_rounds", "-1"], "--lp_cluster_rounds -1: must be"),
        (["--num_parts", "2", "--max_bad_records", "-3"], "--max_bad_records -3: must be"),
        (["--num_parts", "2", "--seed", str(2**64)], "--seed 18446744073709551616: must be"),
    ],
)
def test_partition_counts_and_seeds_are_range_checked_up_front(graph, capsys, extra, fragment):
    out = graph.parent / "parts"
    one_line(capsys, partition.main(partition_args(graph, out, *extra)), fragment)
    assert not out.exists()


def test_largest_seed_runs(graph, capsys):
    out = graph.parent / "out"
    assert sample.main(sample_args(graph, out / "s", "--seed", str(2**64 - 1))) == 0
    assert "subgraphs: 3" in capsys.readouterr().out


@pytest.mark.parametrize("method", ["random", "lp"])
def test_more_parts_than_nodes_is_one_line_and_leaves_no_partition(graph, capsys, method):
    out = graph.parent / "parts"
    code = partition.main(partition_args(graph, out, "--num_parts", "5", "--part_method", method))
    line = one_line(capsys, code, "--num_parts 5", "got no node", "use fewer parts")
    assert "the graph has 3 nodes" in line and "[while running" not in line
    assert [p.name for p in out.rglob("*") if p.is_file()] == [".beam_graph_manifest.json"]


# 5 ----------------------------------------------- InMemory: the same graph issues and --strict


def issues_graph(tmp_path):
    """A dangling edge, a duplicate id, a self-loop, a parallel edge, and a missing seed."""
    folder = write_graph(
        tmp_path / "graph",
        paper="#id,feat\np0,1;2\np1,3;4\np1,5;6\np2,1;1\n",
        cites="#source,#target\np0,p1\np0,p9\np1,p1\np0,p1\n",
    )
    (folder / "seeds.csv").write_text("#id\np0\np7\np1\n")
    return folder


@pytest.mark.parametrize("runner", ["InMemory", "DirectRunner"])
@pytest.mark.parametrize("check", ["dangling_edges", "duplicate_ids", "missing_seeds"])
def test_strict_fails_the_same_way_on_both_runners(tmp_path, capsys, runner, check):
    folder = issues_graph(tmp_path)
    out = tmp_path / "out"
    args = sample_args(folder, out / "s", "--input_seeds", str(folder / "seeds.csv"),
                       "--runner", runner, "--strict", check)  # fmt: skip
    expected = {
        "dangling_edges": "(cites 1)",
        "duplicate_ids": "(paper 1)",
        "missing_seeds": "(seeds 1)",
    }[check]
    one_line(capsys, sample.main(args), f"--strict {check}: the input has", expected)
    # No completion marker; the dead letters of the rejected seed stay.
    assert not (out / "run_summary.json").exists() and not (out / "schema.pbtxt").exists()
    assert len((out / "rejected_seeds-00000-of-00001.jsonl").read_text().splitlines()) == 1


def test_both_runners_report_the_same_graph_issues(tmp_path, capsys):
    folder = issues_graph(tmp_path)
    found = {}
    for runner in ("InMemory", "DirectRunner"):
        out = tmp_path / runner
        args = sample_args(folder, out / "s", "--input_seeds", str(folder / "seeds.csv"),
                           "--runner", runner)  # fmt: skip
        assert sample.main(args) == 0, capsys.readouterr().err
        summary = json.loads((out / "run_summary.json").read_text())
        found[runner] = (summary["graph_issues"], summary["samples"])
    assert found["InMemory"] == found["DirectRunner"]
    assert found["InMemory"][0] == {
        "dangling_edges": {"cites": 1},
        "duplicate_ids": {"paper": 1},
        "missing_seeds": {"seeds": 1},
        "self_loops": {"cites": 1},
        "parallel_edges": {"cites": 1},
    }


# 6 ------------------------------------------------------- a header-only weighted edge table


@pytest.mark.parametrize(
    "extra",
    [
        ["--runner", "InMemory"],
        ["--graph_placement", "worker"],
        ["--graph_placement", "sharded"],
        ["--graph_placement", "topology"],
    ],  # fmt: skip
    ids=["in-memory", "worker", "sharded", "topology"],
)
def test_header_only_weighted_edge_table_samples(tmp_path, capsys, extra):
    spec = SPEC.replace("RANDOM_UNIFORM", "RANDOM_WEIGHTED")
    folder = write_graph(tmp_path / "g", WEIGHTED_SCHEMA, cites="#source,#target,weight\n",
                         spec=spec)  # fmt: skip
    out = tmp_path / "out"
    assert sample.main(sample_args(folder, out / "s", *extra)) == 0, capsys.readouterr().err
    got = records(out, out / "schema.pbtxt")
    assert sorted(s.seed_id for s in got) == [b"p0", b"p1", b"p2"]
    assert all(len(s.edge_sets["cites"].source) == 0 for s in got)


@pytest.mark.parametrize("runner", ["InMemory", "DirectRunner"])
def test_header_only_weighted_edge_table_link_prediction(tmp_path, capsys, runner):
    folder = write_graph(tmp_path / "g", WEIGHTED_SCHEMA, cites="#source,#target,weight\n",
                         spec=LINK_SPEC)  # fmt: skip
    out = tmp_path / "out"
    args = sample_args(folder, out / "s", "--seed_edge_set", "cites", "--runner", runner)
    assert sample.main(args) == 0, capsys.readouterr().err
    assert "subgraphs: 0" in capsys.readouterr().out
    assert records(out, out / "schema.pbtxt") == []


def test_header_only_weighted_edge_table_estimate(tmp_path, capsys):
    spec = SPEC.replace("RANDOM_UNIFORM", "RANDOM_WEIGHTED")
    folder = write_graph(tmp_path / "g", WEIGHTED_SCHEMA, cites="#source,#target,weight\n",
                         spec=spec)  # fmt: skip
    code = estimate.main(["--graph_schema", str(folder), "--sampling_spec",
                          str(folder / "spec.pbtxt")])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err


# 9 ------------------------------------------------------------- unique sample ids


@pytest.mark.parametrize("runner", ["InMemory", "DirectRunner"])
def test_node_seed_ids_that_look_like_repeats_get_unique_sample_ids(tmp_path, capsys, runner):
    folder = write_graph(tmp_path / "g", paper="#id,feat\np5,1;2\np5:1,3;4\na%3A,5;6\na:,1;1\n",
                         cites="#source,#target\np5,p5:1\n")  # fmt: skip
    (folder / "seeds.csv").write_text("#id\np5:1\np5\np5\na%3A\na:\n")
    out = tmp_path / "out"
    args = sample_args(folder, out / "s", "--input_seeds", str(folder / "seeds.csv"),
                       "--runner", runner)  # fmt: skip
    assert sample.main(args) == 0, capsys.readouterr().err
    got = {s.sample_id.decode(): s.seed_id.decode() for s in records(out, out / "schema.pbtxt")}
    assert len(got) == 5  # one subgraph per seed occurrence, every sample id distinct
    assert got == {"p5": "p5", "p5:1": "p5", "p5%3A1": "p5:1", "a%253A": "a%3A", "a%3A": "a:"}
    for sample_id, seed_id in got.items():  # the escaping is undone by unquote
        assert urllib.parse.unquote(sample_id.split(":")[0]) == seed_id


# 11 ----------------------------------------------------------------- byte order marks


def test_pbtxt_with_a_utf8_bom_is_accepted(graph, capsys):
    for name in ("graph_schema.pbtxt", "spec.pbtxt"):
        path = graph / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert sample.main(sample_args(graph, graph.parent / "out" / "s")) == 0
    assert "subgraphs: 3" in capsys.readouterr().out


def test_pbtxt_in_utf16_is_one_line(graph, capsys):
    path = graph / "spec.pbtxt"
    path.write_bytes(SPEC.encode("utf-16"))
    code = sample.main(sample_args(graph, graph.parent / "out" / "s"))
    one_line(capsys, code, "spec.pbtxt", "UTF-16", "save it as UTF-8")


# 13 ----------------------------------------------------------------- unknown flags


def test_misspelled_sample_flag_is_a_usage_error(graph, capsys):
    out = graph.parent / "out"
    code = sample.main(sample_args(graph, out / "s", "--nu_shards", "3"))
    one_line(capsys, code, "unknown flag --nu_shards", "did you mean --num_shards?")
    assert not out.exists()


def test_unknown_partition_flag_is_a_usage_error(graph, capsys):
    out = graph.parent / "parts"
    code = partition.main(partition_args(graph, out, "--num_parts", "1", "--bogus_flag", "3"))
    one_line(capsys, code, "unknown flag --bogus_flag")
    code = partition.main(partition_args(graph, out, "--num_parts", "1", "--part_methd", "lp"))
    one_line(capsys, code, "unknown flag --part_methd", "did you mean --part_method?")


def test_misspelled_beam_flag_is_a_usage_error_naming_beams_flag(graph, capsys):
    code = sample.main(sample_args(graph, graph.parent / "o" / "s", "--direct_num_worker", "2"))
    one_line(capsys, code, "unknown flag --direct_num_worker", "did you mean --direct_num_workers?")


def test_beam_and_dataflow_flags_still_pass_through(graph, capsys):
    out = graph.parent / "out"
    extra = ["--project", "p", "--region", "us-central1", "--temp_location", str(graph.parent),
             "--experiments", "a", "--experiments=b", "--direct_num_workers", "1",
             "--num_workers", "3", "--machine_type", "n2-standard-4"]  # fmt: skip
    assert sample.main(sample_args(graph, out / "s", *extra)) == 0, capsys.readouterr().err
    assert "subgraphs: 3" in capsys.readouterr().out


def test_demo_forwards_flags_through_the_same_check(tmp_path):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run(
        [sys.executable, "-m", "pipelines.demo", "--output_dir", str(tmp_path / "demo"),
         "--num_papers", "20", "--nu_buckets", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: unknown flag --nu_buckets; did you mean --num_buckets?"
    )


# rough edges ------------------------------------------------------------------------------


def test_finished_empty_output_reads_as_zero_records(tmp_path, capsys):
    folder = write_graph(tmp_path / "g")
    (folder / "seeds.csv").write_text("#id\n")  # header only: no seed
    out = tmp_path / "out"
    args = sample_args(folder, f"{out}/s@2", "--input_seeds", str(folder / "seeds.csv"))
    assert sample.main(args) == 0
    assert "subgraphs: 0" in capsys.readouterr().out
    assert stats.main(["--samples", f"{out}/s@2", "--output_dir", str(tmp_path / "st"),
                       "--no_plots"]) == 0  # fmt: skip
    assert "subgraphs: 0" in capsys.readouterr().out
    assert json.loads((tmp_path / "st" / "summary.json").read_text())["count"] == 0
    assert show.main(["--samples", f"{out}/s@2"]) == 0
    assert "hold no record" in capsys.readouterr().out


def test_demo_read_back_needs_no_tensorflow():
    code = "import sys, pipelines.demo; print('tensorflow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=300)  # fmt: skip
    assert result.stdout.strip() == "False", result.stderr


def test_no_beam_pipeline_temp_folder_is_left(tmp_path):
    """Beam makes a beam-pipeline-temp* folder per pipeline and removes it only after a run
    that ends: a run refused after its pipeline was built left one behind."""
    folder = write_graph(tmp_path / "g", WEIGHTED_SCHEMA,
                         cites="#source,#target,weight\np0,p1,1\n", spec=LINK_SPEC)  # fmt: skip
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3", TMPDIR=str(temp))
    for extra in (["--worker_memory_mb", "1"], []):  # refused: 1 MB is below sharded's fixed part
        result = subprocess.run(
            [sys.executable, "-m", "pipelines.sample",
             *sample_args(folder, tmp_path / "out" / "s", "--seed_edge_set", "cites", *extra)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == (2 if extra else 0), result.stderr
        assert [p.name for p in temp.iterdir()] == []
