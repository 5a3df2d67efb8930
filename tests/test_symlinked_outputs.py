"""Files a run writes beside a user's data never follow a symbolic link.

A link in the output folder under the name of the run's marker (`.beam_graph_run.json`) or of
an output file (`run_summary.json`) must not make the run write into the link's target: not
another file of the user's, and not the run's own `--input_seeds`. The run ends in one line
naming the link, and the target keeps its bytes.
"""

from __future__ import annotations

import os

import pytest

from pipelines import partition, sample, show, stats
from pipelines.outputs.output_lock import MARKER_NAME
from tests.test_bad_inputs_round2 import one_line, sample_args, write_graph

RUNNERS = {"InMemory": ["--runner", "InMemory"], "Beam": []}


def planted_link(out, name, target) -> bytes:
    out.mkdir(exist_ok=True)
    os.symlink(target, out / name)
    return target.read_bytes()


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("name", [MARKER_NAME, "run_summary.json"])
def test_sample_does_not_write_through_a_link(tmp_path, capsys, runner, name):
    graph = write_graph(tmp_path / "graph")
    seeds = graph / "seeds.csv"
    seeds.write_text("#id\np0\np1\n")
    out = tmp_path / "out"
    before = planted_link(out, name, seeds)  # the link points at the run's own input
    argv = sample_args(graph, out / "s", "--input_seeds", str(seeds), *RUNNERS[runner])
    code = sample.main(argv)
    one_line(capsys, code, str(out / name), "symbolic link")
    assert seeds.read_bytes() == before
    assert os.path.islink(out / name)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_partition_does_not_write_through_a_link(tmp_path, capsys, runner):
    graph = write_graph(tmp_path / "graph")
    other = tmp_path / "precious.txt"
    other.write_text("the user's file\n")
    out = tmp_path / "out"
    before = planted_link(out, MARKER_NAME, other)
    argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
            "--num_parts", "2", *RUNNERS[runner]]  # fmt: skip
    one_line(capsys, partition.main(argv), str(out / MARKER_NAME), "symbolic link")
    assert other.read_bytes() == before


def test_stats_does_not_write_through_a_link(tmp_path, capsys):
    graph = write_graph(tmp_path / "graph")
    samples = tmp_path / "samples"
    assert sample.main(sample_args(graph, samples / "s", "--runner", "InMemory")) == 0
    capsys.readouterr()
    other = tmp_path / "precious.txt"
    other.write_text("the user's file\n")
    out = tmp_path / "report"
    before = planted_link(out, "summary.json", other)
    code = stats.main(["--samples", str(samples / "s"), "--output_dir", str(out)])
    one_line(capsys, code, str(out / "summary.json"), "symbolic link")
    assert other.read_bytes() == before


def test_png_outputs_are_not_written_through_a_link(tmp_path, capsys):
    """stats' histograms and partition chart and show --png go through the project's own open
    (a link there is refused), not through matplotlib's, which follows it."""
    pytest.importorskip("matplotlib")
    graph = write_graph(tmp_path / "graph")
    samples = tmp_path / "samples"
    assert sample.main(sample_args(graph, samples / "s", "--runner", "InMemory")) == 0
    capsys.readouterr()
    other = tmp_path / "precious.txt"
    other.write_text("the user's file\n")
    before = other.read_bytes()
    out = tmp_path / "report"
    planted_link(out, "hist_nodes_paper.png", other)
    code = stats.main(["--samples", str(samples / "s"), "--output_dir", str(out)])
    one_line(capsys, code, str(out / "hist_nodes_paper.png"), "symbolic link")
    png = tmp_path / "drawn.png"
    os.symlink(other, png)
    code = show.main(["--samples", str(samples / "s"), "--png", str(png)])
    one_line(capsys, code, f"--png {png}", "symbolic link")
    parts = tmp_path / "parts"
    argv = ["--graph_schema", str(graph), "--output_dir", str(parts), "--graph_name", "g",
            "--num_parts", "2", "--runner", "InMemory"]  # fmt: skip
    assert partition.main(argv) == 0
    capsys.readouterr()
    planted_link(parts / "stats", "partition_stats.png", other)
    code = stats.main(["--partition", str(parts)])
    one_line(capsys, code, str(parts / "stats" / "partition_stats.png"), "symbolic link")
    assert other.read_bytes() == before


@pytest.mark.parametrize("runner", sorted(RUNNERS))
@pytest.mark.parametrize("folder", ["part1", "node_ids", "node_ids/paper"])
def test_partition_overwrite_does_not_write_through_a_linked_folder(
    tmp_path, capsys, runner, folder
):
    graph = write_graph(tmp_path / "graph")
    out = tmp_path / "out"
    argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
            "--num_parts", "2", "--runner", "InMemory"]  # fmt: skip
    assert partition.main(argv) == 0
    capsys.readouterr()
    elsewhere = tmp_path / "elsewhere"  # another folder of the user's, under the folder's name
    os.rename(out / folder, elsewhere)
    os.symlink(elsewhere, out / folder)
    for path in elsewhere.rglob("*"):  # the user's bytes, which the run would replace
        if path.is_file():
            path.write_bytes(f"the user's {path.name}\n".encode())
    before = {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    rerun = [*argv[:-2], *RUNNERS[runner], "--overwrite"]
    one_line(capsys, partition.main(rerun), str(out / folder), "symbolic link")
    assert {p.name: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before
    assert os.path.islink(out / folder)
