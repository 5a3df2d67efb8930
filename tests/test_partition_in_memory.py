"""`pipelines.partition --runner InMemory`: the Beam runner's files from one process, no Beam.

Every method, balance flag and HALO hop count is compared with the Beam runner's output in
tests/test_partition_dgl.py (the folders DGL loads); here: input with bad rows, duplicate
ids and dangling edges, the memory check, and that no apache_beam is imported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipelines import partition as partition_cli
from pipelines import partition_in_memory
from tests.partition_helpers import assert_same_outputs, run_partition
from tests.test_accounting import SCHEMA

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def bad_rows(tmp_path):
    """Two bad node rows, a duplicate id, a self-loop, a parallel edge, dangling edges and a
    bad edge row, in two CSV files per table."""
    graph = tmp_path / "graph"
    graph.mkdir()
    (graph / "graph_schema.pbtxt").write_text(
        SCHEMA.replace('"n.csv"', '"n-*.csv"').replace('"e.csv"', '"e-*.csv"')
    )
    (graph / "n-0.csv").write_text("#id,x\na,1\nb,2\nc,oops\nd,4\n")
    (graph / "n-1.csv").write_text("#id,x\ne,5\na,9\nf,6,7\ng,7\nh,8\n")
    (graph / "e-0.csv").write_text("#source,#target\na,b\nb,d\nd,a\ne,e\na,b\nghost,a\n")
    (graph / "e-1.csv").write_text("#source,#target\ng,h\nh,e,x\nb,ghost\nc,a\ne,g\nh,a\n")
    return graph


@pytest.mark.parametrize(
    "flags",
    [
        ["--num_parts", "2", "--num_hops", "2"],
        ["--num_parts", "2", "--part_method", "lp", "--balance_edges", "--lp_rounds", "2"],
    ],
)
def test_bad_rows_are_dead_letters_counted_as_on_beam(bad_rows, tmp_path, flags):
    argv = [*flags, "--max_bad_records", "3", "--num_shards", "3"]
    run_partition(str(bad_rows), str(tmp_path / "beam"), *argv)
    run_partition(str(bad_rows), str(tmp_path / "mem"), *argv, "--runner", "InMemory")
    assert_same_outputs(tmp_path / "beam", tmp_path / "mem")
    summary = json.loads((tmp_path / "mem" / "run_summary.json").read_text())
    assert summary["bad_records"] == 3
    assert summary["counters"]["edges_with_missing_endpoint/e"] == 3  # ghost x2, c (bad row)
    assert summary["partition"]["nodes"]["n"]["rejected"] == {"duplicate_id": 1}
    assert (
        len((tmp_path / "mem" / "bad_records-00000-of-00001.jsonl").read_text().splitlines()) == 3
    )


def test_too_many_bad_rows_fail_as_on_beam(bad_rows, tmp_path, capsys):
    errors = []
    for name, extra in (("beam", []), ("mem", ["--runner", "InMemory"])):
        out = tmp_path / name
        argv = ["--graph_schema", str(bad_rows), "--output_dir", str(out), "--graph_name", "g"]
        assert partition_cli.main([*argv, "--num_parts", "2", *extra]) == 2
        errors.append(capsys.readouterr().err.strip().splitlines()[-1].replace(name, "OUT"))
        assert not (out / "g.json").exists() and not (out / "run_summary.json").exists()
        assert (out / "bad_records-00000-of-00001.jsonl").exists()
    assert errors[0] == errors[1]
    assert errors[0].startswith("error: 3 bad records, more than --max_bad_records 0")


def test_a_graph_over_the_memory_budget_is_refused_in_one_line(bad_rows, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--graph_schema", str(bad_rows), "--output_dir", str(out), "--graph_name", "g"]
    argv += ["--num_parts", "2", "--max_bad_records", "3", "--runner", "InMemory"]
    need = partition_in_memory.estimate_mb(partition_cli.load_graph(str(bad_rows)))
    assert partition_cli.main([*argv, "--memory_mb", str(need - 1)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --runner InMemory: the graph needs about")
    assert "use the Beam runner" in err[0]
    assert not out.exists()
    assert partition_cli.main([*argv, "--memory_mb", str(need)]) == 0


def test_beam_flags_are_refused_in_memory(bad_rows, tmp_path, capsys):
    argv = ["--graph_schema", str(bad_rows), "--output_dir", str(tmp_path / "o")]
    argv += ["--graph_name", "g", "--num_parts", "2", "--runner", "InMemory"]
    assert partition_cli.main([*argv, "--direct_num_workers=2"]) == 2
    assert "ignore the Beam option --direct_num_workers" in capsys.readouterr().err


def test_in_memory_run_imports_no_beam(bad_rows, tmp_path):
    code = (
        "import json, sys\n"
        "from pipelines import partition\n"
        f"argv = ['--graph_schema', {str(bad_rows)!r}, '--output_dir', {str(tmp_path / 'o')!r},"
        " '--graph_name', 'g', '--num_parts', '2', '--part_method', 'lp', '--num_hops', '2',"
        " '--max_bad_records', '3', '--runner', 'InMemory']\n"
        "assert partition.main(argv) == 0\n"
        "print(json.dumps([m for m in ('apache_beam', 'tensorflow') if m in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []
    assert (tmp_path / "o" / "part1" / "graph.dgl").exists()


def test_the_check_sees_beam_on_the_beam_path(bad_rows, tmp_path):
    """The same check on the Beam runner's path: it must see apache_beam."""
    code = (
        "import sys\n"
        "from pipelines import partition\n"
        f"argv = ['--graph_schema', {str(bad_rows)!r}, '--output_dir', {str(tmp_path / 'o')!r},"
        " '--graph_name', 'g', '--num_parts', '2', '--max_bad_records', '3']\n"
        "partition.construct(argv)\n"
        "print('apache_beam' in sys.modules)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"


def test_lexsort_two_is_lexsort():
    import numpy as np

    from sampler.arrays import lexsort_two

    rng = np.random.default_rng(3)
    for n, span in ((0, 1), (1, 1), (1000, 5), (1000, 1000), (5000, 40)):
        major = rng.integers(0, span, n)
        minor = rng.integers(0, 3, n).astype(np.uint64)
        assert np.array_equal(lexsort_two(minor, major), np.lexsort((minor, major)))


def test_local_files_match_like_beam(tmp_path):
    """sampler/io/files.py lists local files (without Beam) as Beam's FileSystems.match does."""
    from apache_beam.io.filesystems import FileSystems

    from sampler.io import files

    for name in ("a.csv", "b.csv", "sub/c.csv", "sub/deep/d.csv", "e.parquet-00000-of-00002"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("x")
    for pattern in ("*.csv", "**.csv", "sub/*", "sub/**", "?.csv", "[ab].csv", "e.parquet-*",
                    "a.csv", "missing.csv", "sub", "sub/", "nothere/*"):  # fmt: skip
        path = str(tmp_path / pattern)
        beam = sorted(m.path for m in FileSystems.match([path])[0].metadata_list)
        assert sorted(files.match(path)) == beam, pattern
