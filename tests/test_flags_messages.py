"""Reliability round 3 (classes E, H, I, K, L, M, O): flag checks and messages.

Each class ends in one line (exit 2) or in the documented output. The CLIs run in this process
(`main(argv)`, with run_main's one-line error handling); the full disk runs in a subprocess,
on a small tmpfs in a private mount namespace (`unshare -Urm`, as tests/test_disk_full.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from pipelines import estimate, partition, sample, show, stats
from sampler.errors import UserError
from tests.test_bad_inputs_round2 import (
    LINK_SPEC,
    one_line,
    partition_args,
    sample_args,
    write_graph,
)
from tests.test_stats_show import write_partition

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture()
def graph(tmp_path):
    folder = write_graph(tmp_path / "graph")
    (folder / "link.pbtxt").write_text(LINK_SPEC.replace("RANDOM_WEIGHTED", "RANDOM_UNIFORM"))
    return folder


def estimate_args(graph, *extra):
    return ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
            "--stats_cache", "none", "--probe_seeds", "2", *extra]  # fmt: skip


# E ------------------------------------------------------------- a full disk under numpy's writer


def test_snapshot_array_on_a_full_disk_names_no_space_left(tmp_path):
    """numpy writes an .npy through C stdio and reports only `N requested and M written`; the
    shared writer (sampler.io.files.write_output) names the OS's reason."""
    disk = tmp_path / "disk"
    disk.mkdir()
    code = (
        "import numpy as np\n"
        "from sampler.errors import UserError\n"
        "from sampler.sample.graph_store import ByteColumn\n"
        "column = ByteColumn.from_objects(np.array([b'x' * 100_000], dtype=object))\n"
        "try:\n"
        f"    column.save({str(disk)!r}, 'e2.targets')\n"
        "except UserError as e:\n"
        "    print(e)\n"
    )
    script = f'mount -t tmpfs -o size=64k tmpfs "{disk}" && "{sys.executable}" -c "$0"'
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script, code],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    line = proc.stdout.strip()
    assert line == f"cannot write the output {disk}/e2.targets.data.npy: no space left on device", (
        proc.stdout + proc.stderr
    )


# H ------------------------------------------------- stats and show: partial folders, bad places


def test_stats_of_a_partition_folder_with_only_some_parts(tmp_path, capsys):
    """A DistDGL machine holds its own part<i>/ only: stats of the parts present, naming the
    missing ones (the totals over the whole graph are then unknown)."""
    folder = write_partition(tmp_path / "parts")
    shutil.rmtree(tmp_path / "parts" / "part1")
    assert stats.main(["--partition", folder, "--no_plots"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    assert "part 1 of 2 is not here (part1/graph.dgl): stats of part 0 only" in captured.out
    report = json.loads((tmp_path / "parts" / "stats" / "partition_stats.json").read_text())
    assert report["missing_parts"] == [1] and report["num_parts"] == 2
    assert [p["partition"] for p in report["partitions"]] == [0]
    # part 0 on its own (test_stats_show.write_partition: 3 nodes, 4 owned edges, 2 cut)
    assert report["num_nodes"] == 3 and report["num_edges"] == 4 and report["cut_edges"] == 2
    shutil.rmtree(tmp_path / "parts" / "part0")
    code = stats.main(["--partition", folder, "--no_plots"])
    one_line(capsys, code, "none of the 2 parts is here", "part0/graph.dgl")


def test_stats_partition_with_a_folder_for_a_file(tmp_path, capsys):
    folder = write_partition(tmp_path / "parts")
    os.remove(tmp_path / "parts" / "part1" / "graph.dgl")
    os.mkdir(tmp_path / "parts" / "part1" / "graph.dgl")
    code = stats.main(["--partition", folder, "--no_plots"])
    one_line(capsys, code, "part1/graph.dgl", "is a directory")


def test_tools_name_an_output_place_they_cannot_write(tmp_path, capsys):
    folder = write_partition(tmp_path / "parts")
    a_file = tmp_path / "parts" / "tiny.json"
    code = stats.main(["--partition", folder, "--no_plots", "--output_dir", str(a_file)])
    one_line(capsys, code, f"--output_dir {a_file}", "cannot write")
    code = stats.main(["--partition", folder, "--output_dir", str(a_file / "under")])
    one_line(capsys, code, f"--output_dir {a_file / 'under'}", "cannot write")
    read_only = "/sys/beam_graph_sampler_test"  # sysfs: no one may create entries there
    code = stats.main(["--partition", folder, "--no_plots", "--output_dir", read_only])
    one_line(capsys, code, f"--output_dir {read_only}", "cannot write")


def test_show_png_into_a_folder_or_a_read_only_place(graph, tmp_path, capsys):
    out = tmp_path / "o"
    assert sample.main(sample_args(graph, out / "s", "--runner", "InMemory")) == 0
    capsys.readouterr()
    pytest.importorskip("matplotlib")
    code = show.main(["--samples", str(out / "s"), "--png", str(tmp_path)])
    one_line(capsys, code, f"--png {tmp_path}", "is a directory")
    code = show.main(["--samples", str(out / "s"), "--png", "/sys/beam_graph_sampler_test.png"])
    one_line(capsys, code, "--png /sys/beam_graph_sampler_test.png", "cannot write")


def test_stats_of_samples_into_a_file(graph, tmp_path, capsys):
    out = tmp_path / "o"
    assert sample.main(sample_args(graph, out / "s", "--runner", "InMemory")) == 0
    capsys.readouterr()
    code = stats.main(["--samples", str(out / "s"), "--output_dir", str(out / "s")])
    one_line(capsys, code, f"--output_dir {out / 's'}", "cannot write")


# I ------------------------------------------------- pass-through values Beam rejects at run time


@pytest.mark.parametrize("cli, args", [(sample, sample_args), (partition, partition_args)])
def test_misspelled_runner_is_one_line_with_the_close_match(cli, args, graph, tmp_path, capsys):
    extra = ["--num_parts", "1"] if cli is partition else []
    code = cli.main(args(graph, tmp_path / "o" / "s", *extra, "--runner", "InMemmory"))
    one_line(capsys, code, "--runner InMemmory", "did you mean InMemory?")
    assert not (tmp_path / "o").exists()
    code = cli.main(args(graph, tmp_path / "o" / "s", *extra, "--runner", "DataflowRuner"))
    one_line(capsys, code, "--runner DataflowRuner", "did you mean DataflowRunner?")


@pytest.mark.parametrize("value", ["-1", "100000"])
def test_local_worker_count_out_of_range_is_one_line(value, graph, tmp_path, capsys):
    code = sample.main(sample_args(graph, tmp_path / "o" / "s", "--direct_num_workers", value))
    one_line(capsys, code, f"--direct_num_workers {value}: must be between 0")
    assert not (tmp_path / "o").exists()


def test_known_runner_names_pass_the_check():
    from pipelines import flags

    for name in (None, "InMemory", "DirectRunner", "direct", "FnApiRunner", "DataflowRunner",
                 "dataflow", "PortableRunner", "apache_beam.runners.direct.DirectRunner"):  # fmt: skip
        flags.check_runner(name)


# K ------------------------------------------------------- estimate checks the flags sample does


@pytest.mark.parametrize(
    "flag, value",
    [("--seed", str(2**64)), ("--seed", "-1"), ("--num_shards", str(10**10)),
     ("--negatives_per_seed", str(10**9)), ("--progress_interval", "nan")],
)  # fmt: skip
def test_estimate_refuses_what_sample_refuses_with_the_same_line(
    flag, value, graph, tmp_path, capsys
):
    code = sample.main(sample_args(graph, tmp_path / "o" / "s", flag, value))
    sample_line = one_line(capsys, code, f"{flag} {value}")
    code = estimate.main(estimate_args(graph, flag, value))
    assert one_line(capsys, code, f"{flag} {value}") == sample_line


@pytest.mark.parametrize(
    "flag, value, fragment",
    [("--target_minutes", "nan", "finite"), ("--target_minutes", "inf", "finite"),
     ("--target_minutes", "0", "> 0"), ("--probe_seeds", str(10**12), "between 0")],
)  # fmt: skip
def test_estimate_own_flags_are_range_checked(flag, value, fragment, graph, capsys):
    code = estimate.main(estimate_args(graph, flag, value))
    one_line(capsys, code, f"{flag} {value}", fragment)


# L -------------------------------------------------------------------- --graph_name vs the folder


@pytest.mark.parametrize("layout", ["dgl", "graphstorm"])
@pytest.mark.parametrize("name", ["partitioned", "part0", "cut_report", "run_summary"])
def test_graph_names_that_clash_with_the_folder_are_refused(name, layout, graph, tmp_path, capsys):
    argv = partition_args(graph, tmp_path / "o", "--num_parts", "1", "--layout", layout)
    argv[argv.index("--graph_name") + 1] = name
    code = partition.main(argv)
    one_line(capsys, code, f"--graph_name '{name}'")
    assert not (tmp_path / "o").exists()


# M ------------------------------------------------------------- flags a runner would ignore


@pytest.mark.parametrize(
    "extra, flag",
    [(["--direct_num_workers", "2"], "--direct_num_workers"),
     (["--num_buckets", "4"], "--num_buckets"),
     (["--graph_placement", "sharded"], "--graph_placement"),
     (["--worker_memory_mb", "100"], "--worker_memory_mb")],
)  # fmt: skip
def test_sample_in_memory_refuses_flags_it_ignores(extra, flag, graph, tmp_path, capsys):
    code = sample.main(sample_args(graph, tmp_path / "o" / "s", "--runner", "InMemory", *extra))
    one_line(capsys, code, "--runner InMemory", flag)
    assert not (tmp_path / "o").exists()


def test_partition_refuses_flags_its_runner_ignores(graph, tmp_path, capsys):
    base = partition_args(graph, tmp_path / "o", "--num_parts", "1")
    code = partition.main([*base, "--runner", "InMemory", "--direct_num_workers", "2"])
    line = one_line(capsys, code, "--runner InMemory", "--direct_num_workers")
    code = sample.main(sample_args(graph, tmp_path / "o" / "s", "--runner", "InMemory",
                                   "--direct_num_workers", "2"))  # fmt: skip
    assert one_line(capsys, code) == line  # the same check, the same line
    code = partition.main([*base, "--memory_mb", "100"])
    one_line(capsys, code, "--memory_mb", "--runner InMemory")
    assert not (tmp_path / "o").exists()
    # (parse_args: main would first stop at the Google Cloud credentials check, offline)
    argv = sample_args(graph, tmp_path / "o" / "s", "--runner", "DataflowRunner",
                       "--direct_num_workers", "2")  # fmt: skip
    with pytest.raises(UserError, match="--runner DataflowRunner would ignore --direct_num_work"):
        sample.parse_args(argv)


def test_flags_each_runner_uses_still_pass(graph, tmp_path, capsys):
    out = tmp_path / "o"
    argv = sample_args(graph, out / "s", "--runner", "InMemory", "--seed", "3",
                       "--progress_interval", "0")  # fmt: skip
    assert sample.main(argv) == 0, capsys.readouterr().err
    base = partition_args(graph, tmp_path / "p", "--num_parts", "1", "--runner", "InMemory")
    assert partition.main([*base, "--memory_mb", "100000", "--num_shards", "2"]) == 0


# O ------------------------------------------------------------------- link records and schemas


@pytest.fixture()
def link_samples(graph, tmp_path):
    out = tmp_path / "links"
    argv = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "link.pbtxt"),
            "--seed_edge_set", "cites", "--output_samples", str(out / "s"), "--runner", "InMemory"]  # fmt: skip
    assert sample.main(argv) == 0
    return out


def test_show_link_records_with_a_node_seed_schema_is_one_line(graph, link_samples, capsys):
    capsys.readouterr()
    code = show.main(["--samples", str(link_samples / "s"), "--graph_schema", str(graph)])
    one_line(capsys, code, "'_readout'", "link", "schema.pbtxt")
    code = stats.main(["--samples", str(link_samples / "s"), "--graph_schema", str(graph),
                       "--no_plots"])  # fmt: skip
    one_line(capsys, code, "'_readout'", "link", "schema.pbtxt")


def test_show_link_records_marks_the_seed_edge(link_samples, capsys):
    capsys.readouterr()
    assert show.main(["--samples", str(link_samples / "s"), "--seed_id", "p1->p2"]) == 0
    out = capsys.readouterr().out
    assert "None" not in out
    assert "seed edge p1 -> p2 (label 1)" in out
    assert "node set _readout: 1 nodes" in out  # not dropped
    # Both endpoints marked: p1 and p2 in node set paper, neither the readout node.
    paper = out.split("node set paper:")[1].split("edge set")[0]
    marked = [line.split("]")[1].split()[0] for line in paper.splitlines() if "*" in line]
    assert sorted(marked) == ["p1", "p2"]
