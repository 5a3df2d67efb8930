"""Bad rows on both sides of every size threshold, on every runner, placement and stage.

The readers change path with the size of their input: tables come in batches of 65,536 rows,
CSV is read in blocks of `csv_blocks.READ_BYTES` and TFRecord in chunks of
`tfrecord._READ_CHUNK`, node tables and adjacency switch kernels at 65,536 rows, and the Beam
readers see several files per table (several elements of a bundle). Each table here is past
every one of those, with bad rows planted before, at and after each boundary. Every run must
account for every row: read and used, or dead-lettered and counted, with the same dead letters
on every runner, and with the default `--max_bad_records 0` every runner must fail.

The planted rows are known here, independently of the code under test.
"""

from __future__ import annotations

import glob
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import partition, sample
from sampler.io import csv_blocks, tfrecord
from tests.test_io_tables import example, write_records

ROWS = 70_000  # past the 65,536-row batches and kernels
PAD = "x" * 140  # a column nobody reads: the CSV past one read block, the TFRecord past a chunk
# 1-based data rows (CSV, Parquet) / 0-based record indices (TFRecord) of the planted bad rows:
# in the first batch, on both sides of the batch boundary, and in the last batch.
BAD = {"a": [2, 65_536, 65_537, 69_999], "b": [3, 65_535, 65_536, 65_537, 68_000],
       "c": [10, 65_535, 65_536, 69_000]}  # fmt: skip
# The edge set "ab" in two Parquet files of ROWS rows each: bad rows in both files.
EDGE_BAD = {0: [1, 65_537], 1: [65_536, 70_000]}
SEEDS = 5

SCHEMA = """
node_sets { key: "a" value { metadata { filename: "a.parquet" }
  features { key: "f" value { dtype: DT_FLOAT } } } }
node_sets { key: "b" value { metadata { filename: "b.csv" }
  features { key: "f" value { dtype: DT_FLOAT } } } }
node_sets { key: "c" value { metadata { filename: "c.tfrecord" }
  features { key: "f" value { dtype: DT_FLOAT } } } }
edge_sets { key: "ab" value { source: "a" target: "b" metadata { filename: "ab-*.parquet" } } }
edge_sets { key: "ac" value { source: "a" target: "c" metadata { filename: "ac.csv" } } }
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "a" }
sampling_ops { op_name: "b" input_op_names: "seed" edge_set_name: "ab" sample_size: 2
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "c" input_op_names: "seed" edge_set_name: "ac" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""


BAD_ACROSS: dict[str, int] = {}  # the bad row across a read block's end, by set (the fixture's)


def _row_across(pieces: list, offset: int) -> int:
    """The index of the piece (a file's header or row, in order) whose bytes span `offset`."""
    ends = np.cumsum([len(p) for p in pieces])
    index = int(np.searchsorted(ends, offset, side="right"))
    assert ends[index] - len(pieces[index]) < offset < ends[index]
    return index


def _ids(name: str) -> list[str]:
    return [f"{name}{i}" for i in range(ROWS)]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bad_rows_at_scale")
    values = np.arange(ROWS, dtype=np.float32)
    # a: Parquet, NULL ids.
    ids = _ids("a")
    for row in BAD["a"]:
        ids[row - 1] = None
    pq.write_table(pa.table({"#id": ids, "f": values, "pad": [PAD] * ROWS}), folder / "a.parquet")
    # b: CSV, empty ids, more than one read block; the row across the first block's end has a
    # value that is not a number (as long as the number, so the row stays across).
    ids = _ids("b")
    for row in BAD["b"]:
        ids[row - 1] = ""
    lines = [f"{ids[i]},{i}.5,{PAD}\n" for i in range(ROWS)]
    across = _row_across(["#id,f,pad\n", *lines], csv_blocks.READ_BYTES) - 1
    lines[across] = lines[across].replace(f",{across}.5,", "," + "x" * len(f"{across}.5") + ",")
    (folder / "b.csv").write_text("#id,f,pad\n" + "".join(lines))
    BAD_ACROSS["b"] = across + 1
    # c: TFRecord, zero-length records, more than one read chunk; the record across the first
    # chunk's end is not a tf.Example (as long as the record).
    records = [example(**{"#id": [b"c%d" % i], "f": [float(i)], "pad": [PAD.encode() * 2]})
               for i in range(ROWS)]  # fmt: skip
    for index in BAD["c"]:
        records[index] = b""
    framed = [b"x" * (16 + len(r)) for r in records]
    across = _row_across(framed, tfrecord._READ_CHUNK)
    records[across] = b"\xff" * len(records[across])
    BAD_ACROSS["c"] = across
    write_records(folder / "c.tfrecord", records)
    # ab: two Parquet files, NULL sources; ac: CSV, every edge good.
    for part, bad_rows in EDGE_BAD.items():
        source = [f"a{i}" for i in range(ROWS)]
        for row in bad_rows:
            source[row - 1] = None
        target = [f"b{(i * 7 + part) % ROWS}" for i in range(ROWS)]
        pq.write_table(
            pa.table({"#source": source, "#target": target}), folder / f"ab-{part}.parquet"
        )
    edges = "".join(f"a{i},c{(i * 3) % ROWS}\n" for i in range(ROWS))
    (folder / "ac.csv").write_text("#source,#target\n" + edges)
    (folder / "graph_schema.pbtxt").write_text(SCHEMA)
    (folder / "spec.pbtxt").write_text(SPEC)
    (folder / "seeds.csv").write_text("#id\n" + "".join(f"a{i * 9_001}\n" for i in range(SEEDS)))
    return folder


def planted() -> list[tuple[str, str, int]]:
    """(set, file name, row) of every planted bad row."""
    rows = [(name, f"{name}.{fmt}", row) for name, fmt in
            (("a", "parquet"), ("b", "csv"), ("c", "tfrecord")) for row in BAD[name]]  # fmt: skip
    rows += [(name, f"{name}.{'csv' if name == 'b' else 'tfrecord'}", row)
             for name, row in BAD_ACROSS.items()]  # fmt: skip
    rows += [("ab", f"ab-{part}.parquet", row) for part, bad in EDGE_BAD.items() for row in bad]
    return sorted(rows)


def dead_letters(out) -> list[tuple[str, str, int]]:
    lines = []
    for path in sorted(glob.glob(f"{out}/bad_records-*.jsonl")):
        with open(path) as f:
            lines += [json.loads(line) for line in f if line.strip()]
    return sorted((d["set"], d["file"].rsplit("/", 1)[-1], d["row"]) for d in lines)


def summary(out) -> dict:
    with open(f"{out}/run_summary.json") as f:
        return json.load(f)


SAMPLE_RUNS = {
    "InMemory": ["--runner", "InMemory"],
    "worker": ["--graph_placement", "worker"],
    "topology": ["--graph_placement", "topology"],
    "sharded": ["--graph_placement", "sharded"],
}


@pytest.mark.parametrize("run", sorted(SAMPLE_RUNS))
def test_sample_accounts_for_every_row(graph, tmp_path, run):
    out = tmp_path / "out"
    argv = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
            "--input_seeds", str(graph / "seeds.csv"), "--output_samples", f"{out}/s@2",
            "--max_bad_records", "100", *SAMPLE_RUNS[run]]  # fmt: skip
    assert sample.main(argv) == 0
    assert dead_letters(out) == planted()
    report = summary(out)
    assert report["bad_records"] == len(planted())
    assert report["samples"]["subgraphs_out"] == SEEDS
    assert rows_read(report) == good_rows()


def good_rows(seeds: bool = True) -> dict[str, int]:
    """Rows read and kept, by set: every row of the tables but the planted ones (and the seed
    table's rows when the run reads one)."""
    rows = {
        "a": ROWS - len(BAD["a"]), "b": ROWS - len(BAD["b"]) - 1, "c": ROWS - len(BAD["c"]) - 1,
        "ab": 2 * ROWS - sum(map(len, EDGE_BAD.values())), "ac": ROWS, "seeds": SEEDS,
    }  # fmt: skip
    if not seeds:
        del rows["seeds"]
    return rows


def rows_read(report: dict) -> dict[str, int]:
    counters = report["counters"]
    return {k.split("/", 1)[1]: v for k, v in counters.items() if k.startswith("rows_read/")}


def test_partition_accounts_for_every_row(graph, tmp_path):
    found = {}
    for runner in ("InMemory", "Beam"):
        out = tmp_path / runner
        argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
                "--num_parts", "2", "--max_bad_records", "100"]  # fmt: skip
        if runner == "InMemory":
            argv += ["--runner", "InMemory"]
        assert partition.main(argv) == 0
        found[runner] = dead_letters(out)
        report = summary(out)
        assert report["bad_records"] == len(planted()), runner
        assert rows_read(report) == good_rows(seeds=False), runner
    assert found == {"InMemory": planted(), "Beam": planted()}


@pytest.mark.parametrize("run", ["worker", "sharded", "partition"])
def test_the_default_limit_fails_on_beam(graph, tmp_path, capsys, run):
    out = tmp_path / "out"
    if run == "partition":
        argv = ["--graph_schema", str(graph), "--output_dir", str(out), "--graph_name", "g",
                "--num_parts", "2"]  # fmt: skip
        code = partition.main(argv)
    else:
        argv = ["--graph_schema", str(graph), "--sampling_spec", str(graph / "spec.pbtxt"),
                "--input_seeds", str(graph / "seeds.csv"), "--output_samples", f"{out}/s",
                "--graph_placement", run]  # fmt: skip
        code = sample.main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{len(planted())} bad records, more than --max_bad_records 0" in err
