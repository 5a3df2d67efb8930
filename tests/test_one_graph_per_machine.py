"""The `worker` placement with a graph snapshot: the tables are read by the workers, the graph
is built once and mapped by every SDK process (sampler.beam.sample.snapshot).

- The records are the same bytes in one process and with 1, 2 and 8 SDK worker processes,
  and equal the in-memory oracle's.
- The graph's bytes do not pass through the runner: no side input carries more than the
  snapshot's folder name, and the shuffles carry seeds and file names, not tables.
- Bad rows in several files read by several workers are counted and dead-lettered once each.
"""

from __future__ import annotations

import glob
import json
import os

import pytest

from sampler.tools import synthetic
from tests.pipeline_helpers import oracle_records, read_records, run_pipeline
from tests.test_multiprocess import sdk_worker_processes_during


def _processes(n: int) -> list[str]:
    return ["--direct_running_mode=multi_processing", f"--direct_num_workers={n}"]


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("snapshot_mag")
    graph = synthetic.generate_mag(300, seed=21, feature_dim=16, hub_fraction=0.1)
    schema = synthetic.write_graph(graph, str(root / "inputs" / "graph"), fmt="csv", num_shards=3)
    spec = synthetic.write_sampling_spec(
        synthetic.mag_sampling_spec(), str(root / "inputs" / "mag.pbtxt")
    )
    return root, schema, spec


def _summary(out) -> dict:
    with open(os.path.join(out, "run_summary.json")) as f:
        return json.load(f)


def _shards(out) -> list[bytes]:
    paths = sorted(glob.glob(f"{out}/samples-*-of-00003"))
    assert len(paths) == 3
    return [open(p, "rb").read() for p in paths]


def test_records_are_the_same_bytes_on_1_2_and_8_worker_processes(mag):
    root, schema, spec = mag
    flags = ["--seed", "5", "--num_buckets", "8"]
    run_pipeline(schema, spec, f"{root}/one/samples@3", *flags)
    in_process = _shards(root / "one")
    assert sorted(read_records(f"{root}/one/samples-*")) == sorted(
        oracle_records(schema, spec, seed=5)
    )
    table_bytes = sum(os.path.getsize(p) for p in glob.glob(f"{root}/inputs/graph/*.csv-*"))
    for workers in (1, 2, 8):
        out = root / f"x{workers}"
        seen = sdk_worker_processes_during(
            lambda out=out, workers=workers: run_pipeline(
                schema, spec, f"{out}/samples@3", *flags, *_processes(workers)
            )
        )
        assert len(seen) >= workers, (workers, seen)
        assert _shards(out) == in_process, f"{workers} SDK worker processes"
        used = _summary(out)["resources"]
        # The snapshot's folder name is the one side input; the tables are not shuffled.
        assert used["side_input_bytes"] < 4096, used
        read = {k: v for k, v in used["shuffle_by_step"].items() if k.startswith("ReadGraph")}
        assert sum(read.values()) < 16384, read  # the tables are read where they are built
        assert used["shuffle_by_step"]["Sample/Group"] < 1024 * 300, used  # the seeds
        assert used["stage_bytes"] < table_bytes, (used, table_bytes)
        assert not glob.glob(f"{out}/.temp-samples-*"), "the snapshot is removed after the run"


@pytest.mark.parametrize("placement", ["topology", "sharded"])
def test_the_other_placements_write_the_same_bytes_on_8_worker_processes(mag, placement):
    root, schema, spec = mag
    flags = ["--seed", "5", "--num_buckets", "8"]
    one = root / f"one_for_{placement}"
    run_pipeline(schema, spec, f"{one}/samples@3", *flags)
    out = root / f"{placement}_x8"
    run_pipeline(
        schema, spec, f"{out}/samples@3", *flags, "--graph_placement", placement, *_processes(8)
    )
    assert _shards(out) == _shards(one)


def test_bad_rows_in_files_read_by_several_workers_are_counted_once(mag, tmp_path):
    _, schema, spec = mag
    graph_dir = tmp_path / "graph"
    graph_dir.mkdir()
    source = os.path.dirname(schema)
    for name in os.listdir(source):
        text = open(os.path.join(source, name)).read()
        (graph_dir / name).write_text(text)
    # One bad row in each of two paper shards and one in a cites shard: an unparsable
    # float feature, a row with a missing cell, an edge row with an extra cell.
    corrupted = {}
    for name in [
        "paper.csv-00000-of-00003",
        "paper.csv-00002-of-00003",
        "cites.csv-00001-of-00003",
    ]:
        lines = (graph_dir / name).read_text().splitlines(keepends=True)
        header = lines[0].rstrip("\n").split(",")
        if name.startswith("paper"):
            row = "p_bad_float," + ",".join(["oops"] * (len(header) - 1)) + "\n"
        else:
            row = "p1,p2,p3,extra\n"
        lines.insert(3, row)
        (graph_dir / name).write_text("".join(lines))
        corrupted[name] = 4  # the 1-based line of the inserted row
    out = tmp_path / "out"
    run_pipeline(
        str(graph_dir / "graph_schema.pbtxt"),
        spec,
        f"{out}/samples@3",
        "--max_bad_records",
        "10",
        *_processes(2),
    )
    summary = _summary(out)
    assert summary["bad_records"] == 3, summary["bad_records"]
    counters = summary["counters"]
    assert counters["bad_records/paper"] == 2 and counters["bad_records/cites"] == 1
    lines = [
        json.loads(line) for path in glob.glob(f"{out}/bad_records-*.jsonl") for line in open(path)
    ]
    got = sorted((os.path.basename(d["file"]), d["line"]) for d in lines)
    assert got == sorted(corrupted.items())


def test_a_file_that_two_edge_sets_read_alike_is_read_once_and_counted_for_both(
    mag, tmp_path, monkeypatch
):
    """`written` is `writes` reversed, over the same files: the workers read each file once
    (sampler.io.file_reads), and its rows and bad rows still count for both sets, with a dead
    letter each, as `--runner InMemory` counts them; the records are InMemory's bytes."""
    from sampler.io import graph_tables

    _, schema, spec = mag
    graph_dir = tmp_path / "graph"
    graph_dir.mkdir()
    source = os.path.dirname(schema)
    for name in os.listdir(source):
        (graph_dir / name).write_text(open(os.path.join(source, name)).read())
    bad_file = graph_dir / "writes.csv-00001-of-00003"
    lines = bad_file.read_text().splitlines(keepends=True)
    lines.insert(2, "a1,p2,extra\n")  # line 3: an extra cell
    bad_file.write_text("".join(lines))
    reads = []
    real = graph_tables.read_edge_file

    def counted(path, *args, **kwargs):
        reads.append(os.path.basename(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(graph_tables, "read_edge_file", counted)
    schema_path = str(graph_dir / "graph_schema.pbtxt")
    flags = ["--max_bad_records", "10"]
    run_pipeline(
        schema_path, spec, f"{tmp_path}/beam/samples@3", *flags, "--graph_placement", "worker"
    )
    writes_reads = sorted(r for r in reads if r.startswith("writes"))
    assert writes_reads == [f"writes.csv-0000{i}-of-00003" for i in range(3)], reads
    run_pipeline(schema_path, spec, f"{tmp_path}/mem/samples@3", *flags, "--runner", "InMemory")
    beam, mem = _summary(tmp_path / "beam"), _summary(tmp_path / "mem")
    for name in ("writes", "written"):
        for counter in (f"bad_records/{name}", f"rows_read/{name}"):
            assert beam["counters"][counter] == mem["counters"][counter], counter
    assert beam["counters"]["bad_records/written"] == 1
    assert beam["counters"]["rows_read/writes"] == beam["counters"]["rows_read/written"] > 0
    letters = [
        json.loads(line)
        for path in glob.glob(f"{tmp_path}/beam/bad_records-*.jsonl")
        for line in open(path)
    ]
    assert sorted((d["set"], os.path.basename(d["file"]), d["line"]) for d in letters) == [
        ("writes", "writes.csv-00001-of-00003", 3),
        ("written", "writes.csv-00001-of-00003", 3),
    ]
    assert _shards(tmp_path / "beam") == _shards(tmp_path / "mem")
