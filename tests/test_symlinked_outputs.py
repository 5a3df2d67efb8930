"""Files a run writes beside a user's data never follow a symbolic link.

A link in the output folder under the name of the run's marker (`.beam_graph_run.json`) or of
an output file (`run_summary.json`) must not make the run write into the link's target: not
another file of the user's, and not the run's own `--input_seeds`. The run ends in one line
naming the link, and the target keeps its bytes.
"""

from __future__ import annotations

import os

import pytest

from pipelines import partition, sample, stats
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
