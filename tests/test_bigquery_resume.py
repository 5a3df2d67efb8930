"""A BigQuery read whose connection is cut after several messages reads every row once: the
reader resumes each stream at its next row, whatever the server does with ReadRows' offset
(bqemulator, the server here, ignores it and sends the stream again from its first row; the
Storage Read API honours it). The oracle is the same rows in Parquet files.

The emulator sends a message per 65,536 rows of a stream and makes 10 streams of a table over
1 MB: each stream here has a first message of 65,536 rows and a second of 16,384, so that a cut
after 90% of the streams' bytes comes after the first message of at least one stream, however
the streams' messages interleave (the first messages are 80% of the bytes).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from sampler.io import graph_tables, readers
from sampler.schema import load_graph
from tests.bigquery_emulator import PROJECT, ROOT, CuttingProxy

DATASET = "resume"
STREAMS, FIRST, SECOND = 10, 65_536, 16_384
EDGES = STREAMS * (FIRST + SECOND)
NODES = 1000
ID_BYTES = 6  # every id "n" and 5 digits: a stream's bytes are in proportion to its rows
CUT_SHARE = 0.9


def node_id(i: int) -> str:
    return f"n{i % NODES:05d}"


SCHEMA = """
node_sets {{ key: "n" value {{ metadata {{ {nodes} }} }} }}
edge_sets {{ key: "e" value {{ source: "n" target: "n" metadata {{ {edges} }} }} }}
"""
SPEC = (
    'seed_op { op_name: "seed" node_set_name: "n" }\n'
    'sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "e" '
    "sample_size: 3 strategy: RANDOM_UNIFORM }\n"
)


@pytest.fixture(scope="module")
def graph(bigquery_emulator, tmp_path_factory):
    """(folder, BigQuery schema, Parquet schema, bytes of the edge table's streams)."""
    root = tmp_path_factory.mktemp("bq_resume")
    nodes = pa.table({"id": [node_id(i) for i in range(NODES)]})
    sources = [node_id(i) for i in range(EDGES)]
    targets = [node_id(i * 7919 + i // NODES) for i in range(EDGES)]
    edges = pa.table({"source": sources, "target": targets})
    bigquery_emulator.load(f"{DATASET}.nodes", nodes)
    bigquery_emulator.load(f"{DATASET}.edges", edges)
    pq.write_table(nodes.rename_columns(["#id"]), root / "nodes.parquet")
    pq.write_table(edges.rename_columns(["#source", "#target"]), root / "edges.parquet")

    def spec(table: str) -> str:
        return f'bigquery {{ table_spec {{ dataset: "{DATASET}" table: "{table}" }} }}'

    (root / "bq.pbtxt").write_text(SCHEMA.format(nodes=spec("nodes"), edges=spec("edges")))
    (root / "pq.pbtxt").write_text(
        SCHEMA.format(nodes='filename: "nodes.parquet"', edges='filename: "edges.parquet"')
    )
    (root / "spec.pbtxt").write_text(SPEC)
    stream_bytes = EDGES * 2 * (4 + ID_BYTES)  # two string columns: offsets and characters
    return root, str(root / "bq.pbtxt"), str(root / "pq.pbtxt"), stream_bytes


def through_proxy(emulator, proxy) -> str:
    return f"{emulator.hosts.split(',')[0]},127.0.0.1:{proxy.port}"


def test_a_stream_cut_after_its_first_message_is_read_once(graph, bigquery_emulator, monkeypatch):
    """One stream at a time (the reader in this process): the cut comes in the second stream's
    second message; every edge is read once, as in the Parquet file."""
    _, schema, _, stream_bytes = graph
    cut = int(stream_bytes / STREAMS * 1.9)  # stream 1's second message
    proxy = CuttingProxy(bigquery_emulator.grpc_port, cut_after=cut, back_after=1.0)
    try:
        monkeypatch.setenv(
            "BEAM_GRAPH_BIGQUERY_EMULATOR_HOST", through_proxy(bigquery_emulator, proxy)
        )
        monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        monkeypatch.setenv("BEAM_GRAPH_GCS_RETRY_S", "30")
        info = load_graph(schema).edge_sets["e"]
        units = graph_tables.set_files(info)
        tables = [
            table
            for unit, fmt in units
            for table in readers.read_table(unit, fmt, ("#source", "#target"), {})
        ]
    finally:
        proxy.close()
    assert proxy.cut.is_set() and len(units) == STREAMS
    got = pa.concat_tables(tables)
    assert got.num_rows == EDGES
    expected = pq.read_table(graph[0] / "edges.parquet")
    key = [("#source", "ascending"), ("#target", "ascending")]
    assert got.sort_by(key).equals(expected.sort_by(key).cast(got.schema))


def sample(schema: str, out, env: dict, *extra: str) -> subprocess.CompletedProcess:
    argv = ["--graph_schema", schema, "--sampling_spec", str(out.parent / "spec.pbtxt")]
    argv += ["--output_samples", f"{out}/samples@2", "--seed", "4", *extra]
    return subprocess.run(
        [sys.executable, "-m", "pipelines.sample", *argv],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip


def records(folder) -> list[bytes]:
    paths = sorted(map(str, folder.glob("samples-*")))
    return sorted(r.numpy() for r in tf.data.TFRecordDataset(paths))


@pytest.fixture(scope="module")
def oracle(graph, bigquery_emulator, tmp_path_factory):
    """Records and edge rows read of `--runner InMemory` on the Parquet twin."""
    root, _, twin, _ = graph
    out = root / "twin"
    done = sample(twin, out, bigquery_emulator.env(root / "home"), "--runner", "InMemory")
    assert done.returncode == 0, done.stderr[-3000:]
    return records(out), rows_read(out)


def rows_read(out) -> dict:
    counters = json.loads((out / "run_summary.json").read_text())["counters"]
    return {k: v for k, v in counters.items() if k.startswith("rows_read/")}


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_a_run_cut_after_several_messages_reads_every_row_once(
    graph, bigquery_emulator, oracle, runner
):
    """The connection is cut after 90% of the streams' bytes (after several messages, the first
    message of at least one stream among them) and refused for a second: the run reads every
    row once, and samples the records of the Parquet twin."""
    root, schema, _, stream_bytes = graph
    proxy = CuttingProxy(
        bigquery_emulator.grpc_port, cut_after=int(stream_bytes * CUT_SHARE), back_after=1.0
    )
    out = root / f"cut_{runner}"
    try:
        env = bigquery_emulator.env(
            root / "home",
            BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=through_proxy(bigquery_emulator, proxy),
            BEAM_GRAPH_GCS_RETRY_S="30",
        )
        extra = ["--runner", "InMemory"] if runner == "InMemory" else []
        done = sample(schema, out, env, *extra)
    finally:
        proxy.close()
    assert proxy.cut.is_set()
    assert done.returncode == 0, done.stderr[-3000:]
    expected_records, expected_rows = oracle
    assert expected_rows == {"rows_read/e": EDGES, "rows_read/n": NODES}
    assert rows_read(out) == expected_rows
    assert records(out) == expected_records
