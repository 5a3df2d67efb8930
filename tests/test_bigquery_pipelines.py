"""A MAG-shaped graph with its sets in BigQuery (a real BigQuery API server, bqemulator) gives
the bytes of the same graph in Parquet files: records on `--runner InMemory` and on every Beam
placement (`worker` on 2 SDK worker processes), partition files on both runners, a schema that
mixes files, tables and a query, and the tools that read tables (validate, estimate's degree
statistics). The Parquet runs are the oracle: another input format, another reader.
"""

from __future__ import annotations

import struct

import pytest

from pipelines import estimate as estimate_cli
from pipelines import sample as sample_cli
from pipelines import stats as stats_cli
from pipelines import validate as validate_cli
from sampler.protos import graph_schema_pb2
from sampler.schema import load_graph
from sampler.tools import degree_stats, synthetic
from tests.bigquery_emulator import PROJECT
from tests.bigquery_emulator import load_graph as load_into_bigquery
from tests.partition_helpers import assert_same_outputs, run_partition
from tests.test_multiprocess import TWO_PROCESSES, sdk_worker_processes_during

DATASET = "mag"


@pytest.fixture(scope="module")
def graphs(bigquery_emulator, tmp_path_factory):
    """(root, {"parquet", "bigquery", "mixed": schema path}, spec): the same graph three ways;
    `mixed` has its papers in a BigQuery table, `cites` as a query, the rest in Parquet files."""
    root = tmp_path_factory.mktemp("bq_mag")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BEAM_GRAPH_BIGQUERY_EMULATOR_HOST", bigquery_emulator.hosts)
        patch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        graph = synthetic.generate_mag(
            300, seed=9, feature_dim=3, edge_weights=True, all_node_features=True
        )
        inputs = root / "inputs"
        parquet = synthetic.write_graph(graph, str(inputs / "parquet"), fmt="parquet", num_shards=2)
        bigquery = load_into_bigquery(bigquery_emulator, graph, DATASET, inputs / "bigquery")
        mixed = load_graph(parquet).schema
        paper = mixed.node_sets["paper"].metadata
        paper.ClearField("filename")
        paper.bigquery.table_spec.dataset, paper.bigquery.table_spec.table = DATASET, "paper"
        cites = mixed.edge_sets["cites"].metadata
        cites.ClearField("filename")
        columns = ", ".join(["source", "target", *sorted(mixed.edge_sets["cites"].features)])
        cites.bigquery.sql = f"SELECT {columns} FROM `{PROJECT}.{DATASET}.cites` WHERE TRUE"
        cites.bigquery.read_method = graph_schema_pb2.BigQuery.DIRECT_READ
        (inputs / "parquet" / "mixed.pbtxt").write_text(str(mixed))
        spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(inputs / "s.pbtxt"))
        schemas = {"parquet": parquet, "bigquery": bigquery}
        schemas["mixed"] = str(inputs / "parquet" / "mixed.pbtxt")
        yield root, schemas, spec


def sample(root, schema: str, spec: str, name: str, *extra: str) -> dict[str, bytes]:
    """{file name: bytes} of a sample run's output shards."""
    out = root / name
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--seed", "5"]
    argv += ["--output_samples", f"{out}/samples@3", *extra]
    assert sample_cli.main(argv) == 0
    found = {p.name: p.read_bytes() for p in sorted(out.glob("samples-*"))}
    assert len(found) == 3
    return found


def records(shards: dict[str, bytes]) -> list[bytes]:
    """Every record of the shards (TFRecord framing: length, its CRC, data, its CRC), sorted:
    a placement may deal the records to other shards."""
    out = []
    for data in shards.values():
        at = 0
        while at < len(data):
            (length,) = struct.unpack_from("<Q", data, at)
            out.append(data[at + 12 : at + 12 + length])
            at += 16 + length
    return sorted(out)


@pytest.fixture(scope="module")
def oracle(graphs):
    root, schemas, spec = graphs
    return sample(root, schemas["parquet"], spec, "parquet_in_memory", "--runner", "InMemory")


@pytest.mark.parametrize("which", ["bigquery", "mixed"])
def test_in_memory_records_are_those_of_the_parquet_files(graphs, oracle, which):
    root, schemas, spec = graphs
    got = sample(root, schemas[which], spec, f"{which}_in_memory", "--runner", "InMemory")
    assert sum(len(v) for v in oracle.values()) > 100_000
    assert got == oracle
    if which == "bigquery":  # the stats tool reads them, with their schema
        samples = root / f"{which}_in_memory"
        assert stats_cli.main(["--samples", str(samples / "samples-*"), "--no_plots"]) == 0
        # the output schema keeps the sets' metadata (their tables), as TF-GNN's sampler does
        assert "table_spec" in (samples / "schema.pbtxt").read_text()


def test_worker_placement_on_two_sdk_workers_gives_the_same_records(graphs, oracle):
    root, schemas, spec = graphs
    got = {}
    workers = sdk_worker_processes_during(
        lambda: got.update(
            sample(
                root,
                schemas["bigquery"],
                spec,
                "bigquery_worker",
                "--graph_placement",
                "worker",
                "--num_shards",
                "3",
                *TWO_PROCESSES,
            )  # fmt: skip
        )
    )
    assert len(workers) >= 2, f"expected 2 SDK worker processes, saw {workers}"
    assert got == oracle


@pytest.mark.parametrize("placement", ["topology", "sharded"])
def test_the_other_placements_give_the_same_records(graphs, oracle, placement):
    root, schemas, spec = graphs
    extra = ["--graph_placement", placement, "--num_shards", "3", "--num_buckets", "2"]
    got = sample(root, schemas["mixed"], spec, f"mixed_{placement}", *extra)
    assert records(got) == records(oracle)


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_partition_files_are_those_of_the_parquet_files(graphs, runner):
    root, schemas, _ = graphs
    flags = ["--num_parts", "2", "--balance_ntypes", "year", "--seed", "3"]
    expected = root / f"partition_parquet_{runner}"
    got = root / f"partition_bigquery_{runner}"
    runner_flags = ["--runner", "InMemory"] if runner == "InMemory" else []
    run_partition(schemas["parquet"], str(expected), *flags, "--runner", "InMemory")
    run_partition(schemas["bigquery"], str(got), *flags, *runner_flags)
    assert (got / "part1" / "graph.dgl").stat().st_size > 1000
    assert_same_outputs(got, expected)


def test_validate_reads_the_first_rows_of_every_set(graphs, capsys):
    _, schemas, spec = graphs
    argv = ["--graph_schema", schemas["mixed"], "--sampling_spec", spec]
    assert validate_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "PASS node set paper" in out and "bigquery, 1 stream, 5 rows parsed" in out
    assert "PASS edge set cites" in out and "parquet, 2 files" in out


def test_estimate_counts_degrees_as_in_the_parquet_files(graphs, capsys):
    _, schemas, spec = graphs
    stats = {}
    for which in ("parquet", "bigquery"):
        graph = load_graph(schemas[which])
        stats[which] = degree_stats.compute_degree_stats(graph).to_json()
        signature = stats[which].pop("signature")
        assert len(signature["tables"]) == 8  # 4 node and 4 edge tables: written reads writes
        for sets in ("node_sets", "edge_sets"):  # (of a table's first rows: 2 files, 1 stream)
            for entry in stats[which][sets].values():
                entry.pop("feature_bytes")
    assert stats["bigquery"] == stats["parquet"]
    assert sum(s["count"] for s in stats["parquet"]["edge_sets"].values()) > 5000
    argv = ["--graph_schema", schemas["bigquery"], "--sampling_spec", spec]
    assert estimate_cli.main(argv) == 0
    assert "worker" in capsys.readouterr().out
