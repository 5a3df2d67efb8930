"""User mistakes end in one readable line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  metadata { filename: "paper.csv" } } }
edge_sets { key: "cites" value { source: "paper" target: "paper" metadata { filename: "cites.csv" } } }
"""
GOOD_SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2 strategy: RANDOM_UNIFORM }
"""


@pytest.fixture()
def graph(tmp_path):
    """The input folder; outputs go beside it (`graph.parent / "out"`), not inside."""
    folder = tmp_path / "graph"
    folder.mkdir()
    (folder / "graph_schema.pbtxt").write_text(SCHEMA)
    (folder / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;4\n")
    (folder / "cites.csv").write_text("#source,#target\np0,p1\n")
    (folder / "spec.pbtxt").write_text(GOOD_SPEC)
    return folder


def run_cli(*args):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.sample", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def assert_user_error(result, *fragments):
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    for fragment in fragments:
        assert fragment in errors[0], errors[0]


def test_good_run_succeeds(graph):
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s.tfr"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "subgraphs: 2" in result.stdout


@pytest.mark.parametrize(
    "spec_text, fragments",
    [
        ("seed_op { op_name: 'seed' node_set_name: 'paper' \n oops }", ["bad.pbtxt:2"]),
        (GOOD_SPEC.replace('edge_set_name: "cites"', 'edge_set_name: "nope"'), ["'nope'", "hop"]),
        (
            GOOD_SPEC.replace('node_set_name: "paper"', 'node_set_name: "x"'),
            ["node_set_name", "'x'"],
        ),
        (
            GOOD_SPEC.replace('input_op_names: "seed"', 'input_op_names: "zz"'),
            ["'zz'", "not defined"],
        ),
        (GOOD_SPEC.replace("sample_size: 2", "sample_size: 0"), ["sample_size", "hop"]),
        (GOOD_SPEC.replace("strategy: RANDOM_UNIFORM", ""), ["TOP_K", "weight", "cites"]),
    ],
)
def test_bad_spec_is_one_line(graph, spec_text, fragments):
    (graph / "bad.pbtxt").write_text(spec_text)
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "bad.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, *fragments)


def test_missing_table_is_one_line(graph):
    os.remove(graph / "cites.csv")
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "cites.csv")


def test_missing_schema_is_one_line(graph):
    result = run_cli(
        "--graph_schema", str(graph / "nowhere"), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "nowhere")


def test_bad_cell_found_by_a_worker_is_one_line(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\n")
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s.tfr"),
    )  # fmt: skip
    assert_user_error(result, "paper.csv", "row 2")


def sample_args(graph, *extra):
    return [
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph.parent / "out" / "s@2"), *extra,
    ]  # fmt: skip


def test_default_max_bad_records_shows_the_first_reasons(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\np2,1\n,1;2\np3,5;6\n")
    result = run_cli(*sample_args(graph))
    assert_user_error(result, "more than --max_bad_records 0", "row 2", "'x' is not a number")
    assert not (graph.parent / "out" / "run_summary.json").exists()
    assert not (graph.parent / "out" / "schema.pbtxt").exists()


def test_bad_rows_within_the_limit_go_to_the_dead_letter_output(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\np2,1\n,1;2\np3,5;6\n")
    (graph / "cites.csv").write_text("#source,#target\np0,p3\np3\n")
    result = run_cli(*sample_args(graph, "--max_bad_records", "4"))
    assert result.returncode == 0, result.stderr
    out = graph.parent / "out"
    (dead,) = out.glob("bad_records-*.jsonl")
    bad = sorted(
        (json.loads(line) for line in dead.read_text().splitlines()),
        key=lambda b: (b["set"], b["row"]),
    )
    assert [(b["set"], b["row"], b["line"]) for b in bad] == [
        ("cites", 2, 3), ("paper", 2, 3), ("paper", 3, 4), ("paper", 4, 5),
    ]  # fmt: skip
    assert bad[0]["reason"] == "1 cells, but the header has 2 columns"
    assert bad[1]["reason"] == "column 'feat': 'x' is not a number"
    assert bad[2]["reason"] == "column 'feat': 1 values, expected 2 (joined by ';')"
    assert bad[3]["reason"] == "column '#id': missing id"
    assert all(b["file"].endswith(".csv") for b in bad)
    summary = json.loads((out / "run_summary.json").read_text())
    assert summary["bad_records"] == 4
    assert summary["counters"]["bad_records/paper"] == 3
    assert summary["counters"]["rows_read/paper"] == 2
    assert summary["samples"]["seeds_in"] == summary["samples"]["subgraphs_out"] == 2
    assert "subgraphs: 2" in result.stdout
    # The same input with a lower limit fails, naming the total and where they all are.
    result = run_cli(*sample_args(graph, "--max_bad_records", "3", "--overwrite"))
    assert_user_error(result, "4 bad records, more than --max_bad_records 3", "bad_records-")
    assert not (out / "run_summary.json").exists()


def test_output_in_an_input_folder_replaces_nothing_and_is_accepted(graph):
    # only what would replace or re-read an input is refused
    # (tests/test_output_folders.py); the schema here is graph_schema.pbtxt, not schema.pbtxt.
    inputs = {p.name: p.read_bytes() for p in graph.iterdir()}
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(graph / "samples@2"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(list(graph.glob("samples-*-of-00002"))) == 2
    assert {n: (graph / n).read_bytes() for n in inputs} == inputs


def test_existing_output_needs_overwrite_and_is_replaced_whole(graph):
    out = graph.parent / "out"
    assert run_cli(*sample_args(graph)).returncode == 0
    assert sorted(p.name for p in out.iterdir()) == [
        ".beam_graph_manifest.json", "run_summary.json", "s-00000-of-00002", "s-00001-of-00002",
        "schema.pbtxt",
    ]  # fmt: skip
    assert_user_error(run_cli(*sample_args(graph)), "exists already", "--overwrite")
    # A stale shard of another shard count must not survive an --overwrite run.
    (out / "s-00002-of-00003").write_bytes(b"stale")
    result = run_cli(
        "--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
        "--output_samples", str(out / "s@1"), "--overwrite",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        ".beam_graph_manifest.json", "run_summary.json", "s-00000-of-00001", "schema.pbtxt",
    ]  # fmt: skip


@pytest.mark.parametrize("pattern", ["out@-1", "out@abc", "out@1.5", "@2", "out/@2", "out/"])
def test_malformed_output_pattern_is_refused(pattern):
    from pipelines.runtime.runner import output_shards
    from sampler.errors import UserError

    with pytest.raises(UserError, match="--output_samples .*shard count"):
        output_shards(pattern)


def test_malformed_output_pattern_is_one_line(graph):
    out = graph.parent / "out"
    result = run_cli(*sample_args(graph)[:-1], str(out / "@2"))
    assert_user_error(result, "@2", "file name")
    assert not out.exists() or not list(out.iterdir())


def test_unknown_edge_type_metadata_is_one_line(graph):
    (graph / "graph_schema.pbtxt").write_text(
        SCHEMA.replace(
            'metadata { filename: "cites.csv" }',
            'metadata { filename: "cites.csv" extra { key: "edge_type" value: "reverse" } }',
        )
    )
    result = run_cli(*sample_args(graph))
    assert_user_error(result, "edge set 'cites'", "edge_type 'reverse'", "'reversed'")


def test_seed_file_of_unknown_format_names_the_extensions(graph):
    (graph / "seeds.txt").write_text("#id\np0\n")
    result = run_cli(*sample_args(graph, "--input_seeds", str(graph / "seeds.txt")))
    assert_user_error(result, "seeds.txt", ".csv")
    assert "explicitly" not in result.stderr


def test_too_many_bad_rows_still_write_every_one_to_the_dead_letter_file(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\np2,1\n,1;2\np3,5;6\n")
    result = run_cli(*sample_args(graph))
    assert_user_error(result, "3 bad records, more than --max_bad_records 0", "bad_records-")
    (dead,) = (graph.parent / "out").glob("bad_records-*.jsonl")
    assert sorted(json.loads(line)["row"] for line in dead.read_text().splitlines()) == [2, 3, 4]


def test_overwrite_with_another_base_name_and_after_a_killed_run_leaves_no_old_files(graph):
    out = graph.parent / "out"
    assert run_cli(*sample_args(graph)).returncode == 0
    # What a killed run leaves: the writer's hidden temp folder, Beam's dead-letter temp folder.
    (out / ".temp-samples-0123456789ab").mkdir()
    (out / ".temp-samples-0123456789ab" / "part-1").write_bytes(b"x" * 100)
    (out / "beam-temp-bad_records-0f0f").mkdir()
    (out / "notes.txt").write_text("the user's own file")
    result = run_cli(*sample_args(graph)[:-1], str(out / "other@1"), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        ".beam_graph_manifest.json", "notes.txt", "other-00000-of-00001", "run_summary.json",
        "schema.pbtxt",
    ]  # fmt: skip


def test_failed_run_leaves_no_temp_folders(graph):
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;x\n")
    out = graph.parent / "out"
    assert_user_error(run_cli(*sample_args(graph)), "more than --max_bad_records 0")
    assert not [p.name for p in out.iterdir() if "temp" in p.name]


def test_output_folder_containing_an_input_folder_keeps_it(graph):
    # an output folder that holds the input folder is fine when the run would
    # replace and re-read none of its files, --overwrite included.
    (graph / "graph_schema.pbtxt").write_text(SCHEMA.replace('"paper.csv"', '"part0/paper.csv"'))
    (graph / "part0").mkdir()
    (graph / "paper.csv").rename(graph / "part0" / "paper.csv")
    result = run_cli(*sample_args(graph)[:-1], str(graph.parent / "s@2"), "--overwrite")
    assert result.returncode == 0, result.stderr
    assert (graph / "part0" / "paper.csv").read_text() == "#id,feat\np0,1;2\np1,3;4\n"
    assert (graph.parent / "s-00001-of-00002").exists()


@pytest.mark.parametrize("where", ["file_parent", "proc"])
def test_unwritable_output_is_one_line_and_leaves_nothing(graph, where):
    blocker = graph.parent / "a_file"
    blocker.write_text("not a folder")
    out = blocker / "out" if where == "file_parent" else "/proc/version/out"
    result = run_cli(*sample_args(graph)[:-1], f"{out}/s@2")
    assert_user_error(result, "cannot write the output", str(out))
    assert blocker.read_text() == "not a folder"
    assert sorted(p.name for p in graph.parent.iterdir()) == ["a_file", "graph"]


def run_partition(*args):
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(
        [sys.executable, "-m", "pipelines.partition", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_partition_more_parts_than_nodes_is_one_line(graph):
    out = graph.parent / "parts"
    result = run_partition("--graph_schema", str(graph), "--output_dir", str(out),
                           "--graph_name", "g", "--num_parts", "3")  # fmt: skip
    assert_user_error(result, "--num_parts 3", "partitions 2", "fewer parts")
    assert not (out / "g.json").exists()


def test_partition_overwrite_never_deletes_an_input_and_drops_old_parts(graph):
    # The input folder is named like a partition and lies in the output folder.
    part = graph.parent / "part7"
    graph.rename(part)
    out = graph.parent
    args = ["--graph_schema", str(part), "--graph_name", "g"]
    result = run_partition(*args, "--output_dir", str(out), "--num_parts", "1", "--overwrite")
    assert_user_error(result, "part7/cites.csv lies in part7/, a folder the run writes")
    assert sorted(p.name for p in part.iterdir()) == [
        "cites.csv", "graph_schema.pbtxt", "paper.csv", "spec.pbtxt",
    ]  # fmt: skip
    parts = graph.parent / "parts"
    result = run_partition(*args, "--output_dir", str(parts), "--num_parts", "2")
    assert result.returncode == 0, result.stderr
    (parts / "user.txt").write_text("kept")
    result = run_partition(*args, "--output_dir", str(parts), "--num_parts", "1", "--overwrite")
    assert result.returncode == 0, result.stderr
    assert sorted(p.relative_to(parts).as_posix() for p in parts.rglob("*") if p.is_dir()) == [
        "node_ids", "node_ids/paper", "part0",
    ]  # fmt: skip
    assert (parts / "user.txt").read_text() == "kept"
