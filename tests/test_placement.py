"""`--graph_placement auto` picks by --worker_memory_mb and says why, on stdout."""

from __future__ import annotations

import argparse
import os

import pytest

from pipelines import sample as sample_cli
from sampler.io import graph_tables
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic


@pytest.fixture(scope="module")
def featured_graph(tmp_path_factory):
    """300 papers with 128-dim features in TFRecord tables (the format the placement rates are
    measured on): the paper table is most of the bytes."""
    out = tmp_path_factory.mktemp("graph")
    synthetic.write_graph(
        synthetic.generate_mag(300, seed=2, feature_dim=128), str(out), "tfrecord"
    )
    sizes = {f: os.path.getsize(out / f) for f in os.listdir(out) if f.endswith(".tfrecord")}
    return load_graph(str(out)), sum(sizes.values()), sizes["paper.tfrecord"]


def test_the_graph_and_its_topology_are_sized_from_the_table_files(featured_graph):
    graph, whole, paper = featured_graph
    got_whole, got_topology = graph_tables.size_estimates(graph)
    assert got_whole == whole
    # 128 float32 values (512 bytes) of a ~530-byte paper row are features
    assert whole - paper < got_topology < whole - 0.9 * paper


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_csv_and_parquet_tables_are_sized_as_the_tfrecord_bytes_of_their_rows(
    featured_graph, tmp_path, fmt
):
    """The rates are measured on TFRecord tables: the same rows in CSV (text floats, short id
    rows) or Parquet (compressed ids) must not look smaller than their TFRecord files."""
    _, tfrecord_bytes, _ = featured_graph
    synthetic.write_graph(synthetic.generate_mag(300, seed=2, feature_dim=128), str(tmp_path), fmt)
    got_whole, _ = graph_tables.size_estimates(load_graph(str(tmp_path)))
    assert tfrecord_bytes <= got_whole <= 1.5 * tfrecord_bytes


# A graph of 10 GB of tables whose topology is 1 GB. The largest SDK process needs, by the
# measured rates: worker, the one that builds the snapshot, 0.6 + 2.0 x 10 = 20.6 GB; topology
# 0.6 GB + 3.1 x the 1 GB it holds + 0.6 GB of working set = 4.3 GB.
BIG = (10e9, 1e9)
GB_IN_MB = 1e9 / 2**20


@pytest.mark.parametrize(
    "budget_gb, expected",
    [(21, "worker"), (20, "topology"), (4.4, "topology"), (4.2, "sharded")],
)
def test_auto_picks_the_first_placement_whose_process_fits_the_budget(
    featured_graph, capsys, monkeypatch, budget_gb, expected
):
    graph, _, _ = featured_graph
    monkeypatch.setattr(graph_tables, "size_estimates", lambda _graph: BIG)
    args = argparse.Namespace(graph_placement="auto", worker_memory_mb=budget_gb * GB_IN_MB)
    assert sample_cli.placement(graph, args) == expected
    out, err = capsys.readouterr()
    assert out.startswith(f"graph placement: {expected}: ") and "--worker_memory_mb" in out
    assert err == ""


def test_auto_on_a_small_graph_with_a_default_budget_picks_worker(featured_graph, capsys):
    graph, _, _ = featured_graph
    args = argparse.Namespace(graph_placement="auto", worker_memory_mb=4096)
    assert sample_cli.placement(graph, args) == "worker"
    assert "needs ~" in capsys.readouterr().out


def test_an_explicit_placement_is_kept_whatever_the_budget(featured_graph, capsys):
    graph, _, _ = featured_graph
    args = argparse.Namespace(graph_placement="worker", worker_memory_mb=0.001)
    assert sample_cli.placement(graph, args) == "worker"
    assert capsys.readouterr().out == ""


LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
"""


@pytest.mark.parametrize(
    "budget_gb, expected", [(21, "worker"), (20, "topology"), (4.2, "sharded")]
)  # sharded: link seeds on it (tests/test_sharded_links.py)
def test_auto_with_link_seeds_picks_worker_or_topology_or_sharded(
    featured_graph, tmp_path, capsys, monkeypatch, budget_gb, expected
):
    graph, _, _ = featured_graph
    monkeypatch.setattr(graph_tables, "size_estimates", lambda _graph: BIG)
    spec = tmp_path / "link.pbtxt"
    spec.write_text(LINK_SPEC)
    plan = make_plan(graph, load_sampling_spec(str(spec)), "edge", "writes")
    args = argparse.Namespace(graph_placement="auto", worker_memory_mb=budget_gb * GB_IN_MB)
    assert sample_cli.placement(graph, args, plan) == expected
    assert capsys.readouterr().out.startswith(f"graph placement: {expected}: ")


def test_parquet_tables_of_ids_are_sized_by_their_rows(tmp_path, monkeypatch):
    """A Parquet edge table is sized by the rows in its footer (its ids compress by 3-22x),
    whatever its compression; a file that is not Parquet falls back to its bytes (the read
    reports it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from sampler.io import parquet_reader

    table = pa.table({"#source": [f"a{i}" for i in range(5000)], "#target": ["p1"] * 5000})
    pq.write_table(table, tmp_path / "plain.parquet", compression="none")
    pq.write_table(table, tmp_path / "zstd.parquet", compression="zstd")
    for name in ("plain.parquet", "zstd.parquet"):
        assert parquet_reader.parquet_rows(str(tmp_path / name)) == 5000
        assert graph_tables._tfrecord_bytes(str(tmp_path / name), "ids") == pytest.approx(5000 * 64)
    both = str(tmp_path / "*.parquet")
    assert graph_tables._tfrecord_bytes(both, "ids") == pytest.approx(10000 * 64)
    # beyond FOOTERS_READ files, the rows of the others are scaled from those read by bytes
    with monkeypatch.context() as patch:
        patch.setattr(graph_tables, "FOOTERS_READ", 1)
        one_read = graph_tables._tfrecord_bytes(both, "ids")
    assert 10000 * 64 * 0.2 < one_read < 10000 * 64 * 5
    (tmp_path / "broken.parquet").write_bytes(b"not parquet at all")
    assert parquet_reader.parquet_rows(str(tmp_path / "broken.parquet")) is None
    assert graph_tables._tfrecord_bytes(str(tmp_path / "broken.parquet"), "ids") > 0
