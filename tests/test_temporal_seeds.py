"""Seed times from the seeds table: a `seed_time` column of --input_seeds gives each seed its
time in place of its node's; repeats of a seed with different times are different subgraphs,
numbered by time (`X:k` the k-th lowest), the same bytes on every runner and placement and in
whatever order the rows come; checked by tests/temporal_checker.py against the table's times.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipelines import sample as sample_cli
from sampler.features import NUMPY_DTYPE, FeatureSpec
from sampler.io import graph_tables, writers
from sampler.sample.adjacency import make_seeds
from tests.pipeline_helpers import read_records
from tests.temporal_checker import Checker, parse_example
from tests.test_bad_rows_at_scale import dead_letters
from tests.test_temporal import CHECKED, PAPERS, SPEC, _tables, _write

TIMES, REPEATS = 2, 15  # per paper: TIMES distinct seed times, each REPEATS times


def _seed_rows(order_seed: int) -> tuple[list[str], list[int]]:
    """Each paper with TIMES times (2000-2012, often not its node's year), REPEATS times each,
    the rows in an order drawn with `order_seed`."""
    rng = np.random.default_rng(3)
    ids, times = [], []
    for i in range(PAPERS):
        for t in rng.choice(np.arange(2000, 2013), TIMES, replace=False):
            ids += [f"p{i}"] * REPEATS
            times += [int(t)] * REPEATS
    order = np.random.default_rng(order_seed).permutation(len(ids))
    return [ids[j] for j in order], [times[j] for j in order]


def _write_seeds(path, order_seed: int) -> str:
    ids, times = _seed_rows(order_seed)
    pq.write_table(pa.table({"#id": ids, "seed_time": pa.array(times, pa.int64())}), path)
    return str(path)


def _run(schema, spec, out: str, *extra: str) -> list[bytes]:
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", out, *extra]
    assert sample_cli.main(argv) == 0
    return read_records(out + "*")


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("temporal_seeds")
    schema, _, _ = _write(tmp_path)
    seeds = _write_seeds(tmp_path / "seeds.parquet", 0)
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(SPEC)
    out = str(tmp_path / "mem" / "samples")
    records = _run(schema, str(spec), out, "--runner", "InMemory", "--input_seeds", seeds)
    table = collections.defaultdict(list)
    for i, t in zip(*_seed_rows(0), strict=True):
        table[i.encode()].append(t)
    return tmp_path, schema, str(spec), seeds, records, table


def test_the_records_take_the_tables_times(seeded):
    tmp_path, *_, records, table = seeded
    assert len(records) == PAPERS * TIMES * REPEATS
    checker = Checker(*_tables(tmp_path))
    for record in records:
        checker.check(record, "paper", "year", CHECKED, table=table)
    z, dof = checker.uniform_z()
    assert dof > 100 and abs(z) < 4, (z, dof)
    # The node's own time is not what these records were sampled against.
    with pytest.raises(AssertionError, match="seed_time"):
        for record in records:
            Checker(*_tables(tmp_path)).check(record, "paper", "year", CHECKED)


def test_the_rows_order_does_not_change_the_bytes(seeded):
    tmp_path, schema, spec, _, records, _ = seeded
    shuffled = _write_seeds(tmp_path / "shuffled.parquet", 1)
    out = str(tmp_path / "shuffled" / "samples")
    assert _run(schema, spec, out, "--runner", "InMemory", "--input_seeds", shuffled) == records


@pytest.mark.parametrize("placement", ["worker", "topology"])
def test_the_placements_write_the_in_memory_records(seeded, placement):
    tmp_path, schema, spec, seeds, records, _ = seeded
    out = str(tmp_path / placement / "samples")
    got = _run(schema, spec, out, "--input_seeds", seeds, "--graph_placement", placement)
    assert got == records


def test_sharded_writes_the_in_memory_records(seeded):
    """`sharded` carries the table's times with the seeds (a spec without node times)."""
    tmp_path, schema, _, seeds, _, table = seeded
    spec = tmp_path / "no_node_time.pbtxt"
    spec.write_text(SPEC.replace('node_time_feature: "year" most_recent', "most_recent"))
    records = {}
    for run, flags in (("InMemory", ["--runner", "InMemory"]),
                       ("sharded", ["--graph_placement", "sharded"])):  # fmt: skip
        out = str(tmp_path / f"{run}_no_node_time" / "samples")
        records[run] = _run(schema, str(spec), out, "--input_seeds", seeds, *flags)
    assert records["sharded"] == records["InMemory"]
    checker = Checker(*_tables(tmp_path))
    ops = [dataclasses.replace(op, node_time=None) for op in CHECKED]
    for record in records["sharded"]:
        checker.check(record, "paper", "year", ops, table=table)


RUNS = {
    "InMemory": ["--runner", "InMemory"],
    "worker": ["--graph_placement", "worker"],
    "topology": ["--graph_placement", "topology"],
    "sharded": ["--graph_placement", "sharded"],
}


def test_a_row_without_a_time_is_a_bad_row(tmp_path, capsys):
    """A missing or unparseable time is a bad row of the seeds table on every runner."""
    schema, _, _ = _write(tmp_path)
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(SPEC.replace('node_time_feature: "year" most_recent', "most_recent"))
    seeds = tmp_path / "seeds.csv"
    seeds.write_text("#id,seed_time\np0,2005\np1,\np2,soon\np3,2001\np0,2009\n")
    base = ["--graph_schema", schema, "--sampling_spec", str(spec), "--input_seeds", str(seeds)]
    capsys.readouterr()
    assert sample_cli.main([*base, "--output_samples", str(tmp_path / "no" / "s")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seeds.csv" in err[0] and "seed_time" in err[0], err
    for run, flags in RUNS.items():
        out = tmp_path / run
        argv = [*base, "--output_samples", f"{out}/samples", "--max_bad_records", "2", *flags]
        assert sample_cli.main(argv) == 0, run
        assert dead_letters(out) == [("seeds", "seeds.csv", 2), ("seeds", "seeds.csv", 3)], run
        examples = [parse_example(r) for r in read_records(f"{out}/samples*")]
        times = {e["context/sample_id"][0]: e["context/seed_time"][0] for e in examples}
        assert times == {b"p0": 2005, b"p0:1": 2009, b"p3": 2001}, run


@pytest.mark.parametrize("fmt", ["csv", "tfrecord", "parquet"])
@pytest.mark.parametrize("kind", ["int", "float"])
def test_every_format_has_the_time_column(tmp_path, fmt, kind):
    """The time column is found in each format (its first file with a header or record) and
    read as the seed time's kind; a table without it has no times."""
    spec = FeatureSpec("seed_time", kind, ())
    times = np.array([2005, 2001, 2009], NUMPY_DTYPE[kind])
    table = pa.table({"#id": [b"p2", b"p0", b"p2"], "seed_time": times})
    path = tmp_path / f"seeds.{fmt}"
    writers.write_table(str(path), table, fmt, {"seed_time": spec})
    empty = tmp_path / f"a-empty.{fmt}"
    empty.write_bytes(b"")
    pattern = str(tmp_path / f"*.{fmt}")
    rows = graph_tables.read_seeds(pattern, kind)
    assert rows.ids.tolist() == [b"p2", b"p0", b"p2"]
    np.testing.assert_array_equal(rows.time, times)
    seeds = make_seeds(rows.ids, rows.time)  # repeats numbered by time
    assert dict(zip(seeds.sample_id.tolist(), seeds.time.tolist(), strict=True)) == {
        b"p0": 2001,
        b"p2": 2005,
        b"p2:1": 2009,
    }
    untimed = tmp_path / "untimed"
    writers.write_table(str(untimed / f"seeds.{fmt}"), table.select(["#id"]), fmt, {})
    assert graph_tables.read_seeds(str(untimed / f"seeds.{fmt}"), kind).time is None


def test_validate_checks_the_time_column(tmp_path, capsys):
    from pipelines import validate as validate_cli

    schema, _, _ = _write(tmp_path)
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(SPEC)
    seeds = tmp_path / "seeds.csv"
    argv = ["--graph_schema", schema, "--sampling_spec", str(spec), "--input_seeds", str(seeds)]
    seeds.write_text("#id,seed_time\np0,2005\np1,2001\n")
    assert validate_cli.main(argv) == 0
    seeds.write_text("#id,seed_time\np0,2005\np1,soon\n")
    capsys.readouterr()
    assert validate_cli.main(argv) == 1
    out = capsys.readouterr().out
    assert "FAIL input seeds" in out and "'seed_time': 'soon' is not an integer" in out, out
