"""Sets in BigQuery, read from a real BigQuery API server (bqemulator, tests/bigquery_emulator.py):
every dtype and NULLs read as the same rows and the same bad rows as their Parquet twin, a query
as its result, and every fault as one line naming the set and the table.

The expected values are the tests' own (the rows loaded, the Parquet reader on the same rows),
never the BigQuery reader's output.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from sampler.errors import UserError
from sampler.io import bigquery_reader, graph_tables, readers
from sampler.schema import NodeSetInfo, load_graph
from tests.bigquery_emulator import PROJECT, ROOT, CuttingProxy

DATASET = "dtypes"

# Every kind a feature can have, scalar and vector, from every BigQuery type that holds it.
FEATURES = """
  features { key: "f32" value { dtype: DT_FLOAT } }
  features { key: "f64" value { dtype: DT_DOUBLE shape { dim { size: 3 } } } }
  features { key: "half" value { dtype: DT_HALF shape { dim { size: 2 } dim { size: 2 } } } }
  features { key: "fi" value { dtype: DT_FLOAT } }
  features { key: "i64" value { dtype: DT_INT64 } }
  features { key: "i32v" value { dtype: DT_INT32 shape { dim { size: 2 } } } }
  features { key: "u8" value { dtype: DT_UINT8 } }
  features { key: "flag" value { dtype: DT_BOOL } }
  features { key: "flags" value { dtype: DT_BOOL shape { dim { size: 2 } } } }
  features { key: "name" value { dtype: DT_STRING } }
  features { key: "blob" value { dtype: DT_STRING } }
  features { key: "tags" value { dtype: DT_STRING shape { dim { size: 2 } } } }
"""
ROWS = 7
ITEMS = {
    "id": ["1", "2", None, "4", "5", "6", "7"],
    "f32": [1.5, -2.25, 3.0, None, 5.0, 6.0, 7.125],
    "f64": [[1, 2, 3], [4, 5, 6], [0, 0, 0], [1, 1, 1], [1, 2], [1e300, 0, 0], [7, 8, 9.5]],
    "half": [[1.0, 2.0, 3.0, 4.0]] * ROWS,
    "fi": [1, 2, 3, 4, 5, 6, -7],
    "i64": [1, -2, 3, 4, 5, 6, 2**62],
    "i32v": [[1, 2], [3, -4], [0, 0], [0, 0], [0, 0], [0, 0], [2**31 - 1, 5]],
    "u8": [0, 255, 1, 1, 1, 1, 7],
    "flag": [True, False, True, True, True, True, False],
    "flags": [[True, False], [False, False], [True, True]] + [[True, True]] * 4,
    "name": ["x", "", "z", "z", "z", "z", "ünï"],
    "blob": [b"\x00\xff", b"", b"q", b"q", b"q", b"q", b"\x01" * 130],
    "tags": [["p", "q"], ["", "r"]] + [["s", "t"]] * 5,
    "unused": ["not a feature"] * ROWS,  # a column no set reads
}
TYPES = {"blob": "BYTES"}
# (row, reason) of the bad rows, as the Parquet reader words them
BAD = [
    (3, "column '#id': missing id"),
    (4, "column 'f32': missing value"),
    (5, "column 'f64': 2 values, expected 3"),
    (6, "column 'f64': 1e+300 does not fit in float32"),
]
GOOD = [0, 1, 6]  # the rows that are read

LINKS = {"src": [1, 2, 7, 40], "dst": [2, 7, 1, 1], "w": [0.5, 0.0, 2.0, 1.0]}
LINK_SQL = (
    f"SELECT src AS source, dst AS target, w * 2 AS weight FROM `{PROJECT}.{DATASET}.links` "
    "WHERE w > 0"
)


def schema_text(item_meta: str, link_meta: str, features: str = FEATURES) -> str:
    return f"""
node_sets {{ key: "item" value {{ {features} metadata {{ {item_meta} }} }} }}
edge_sets {{ key: "link" value {{ source: "item" target: "item"
  features {{ key: "weight" value {{ dtype: DT_FLOAT }} }}
  metadata {{ {link_meta} }} }} }}
"""


def table_meta(table: str, dataset: str = DATASET) -> str:
    return f'bigquery {{ table_spec {{ dataset: "{dataset}" table: "{table}" }} }}'


def sql_meta(sql: str) -> str:
    return f"bigquery {{ sql: {json.dumps(sql)} read_method: DIRECT_READ }}"


@pytest.fixture(scope="module")
def bq(bigquery_emulator):
    """The emulator with this module's tables, and the environment pointing at it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BEAM_GRAPH_BIGQUERY_EMULATOR_HOST", bigquery_emulator.hosts)
        patch.setenv("GOOGLE_CLOUD_PROJECT", PROJECT)
        bigquery_emulator.load(f"{DATASET}.items", pa.table(ITEMS), TYPES)
        bigquery_emulator.load(f"{DATASET}.links", pa.table(LINKS))
        ids = pa.array([f"n{i:06d}" for i in range(100_000)])
        bigquery_emulator.load(f"{DATASET}.many", pa.table({"id": ids}))
        yield bigquery_emulator


def write_schema(folder, text: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "graph_schema.pbtxt").write_text(text)
    return str(folder / "graph_schema.pbtxt")


def read_set(info, on_bad=None) -> pa.Table:
    """Every row of a set through graph_tables and readers (the code under test), sorted."""
    id_columns = ("#id",) if isinstance(info, NodeSetInfo) else ("#source", "#target")
    tables = [
        table
        for path, fmt in graph_tables.set_files(info)
        for table in readers.read_table(path, fmt, id_columns, info.features, on_bad=on_bad)
    ]
    table = pa.concat_tables(tables)
    return table.sort_by([(c, "ascending") for c in id_columns])


def test_every_dtype_and_null_reads_as_its_parquet_twin(bq, tmp_path):
    graph = load_graph(write_schema(tmp_path, schema_text(table_meta("items"), sql_meta(LINK_SQL))))
    info = graph.node_sets["item"]
    bad = []
    got = read_set(info, bad.append)
    # The read session selects the set's columns only (BigQuery bills the bytes of those).
    for unit, _ in graph_tables.set_files(info):
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(json.loads(unit)["schema"])))
        assert sorted(schema.names) == sorted(["id", *info.features])
    # The Parquet twin: the same rows in a file, read by the Parquet reader.
    twin_path = tmp_path / "items.parquet"
    pq.write_table(pa.table({("#id" if k == "id" else k): v for k, v in ITEMS.items()}), twin_path)
    twin_bad = []
    twin = pa.concat_tables(
        readers.read_table(
            str(twin_path), "parquet", ("#id",), info.features, on_bad=twin_bad.append
        )
    )
    assert got.equals(twin.sort_by("#id"))
    assert [(b.row, b.reason) for b in twin_bad] == BAD
    assert sorted((b.row, b.reason) for b in bad) == BAD  # one stream: its rows in table order
    assert {b.file for b in bad} == {"BigQuery table dtypes.items (node set 'item'), stream 0"}
    # ... and the values are the rows loaded, in the canonical types.
    assert got.column("#id").to_pylist() == [ITEMS["id"][i].encode() for i in GOOD]
    assert got.schema.field("f64").type == pa.list_(pa.float32(), 3)
    assert got.column("f32").to_pylist() == [ITEMS["f32"][i] for i in GOOD]
    assert got.column("i64").to_pylist() == [ITEMS["i64"][i] for i in GOOD]
    assert got.column("i32v").to_pylist() == [ITEMS["i32v"][i] for i in GOOD]
    assert got.column("flags").to_pylist() == [[int(v) for v in ITEMS["flags"][i]] for i in GOOD]
    assert got.column("name").to_pylist() == [ITEMS["name"][i].encode() for i in GOOD]
    assert got.column("blob").to_pylist() == [ITEMS["blob"][i] for i in GOOD]
    assert got.column("tags").to_pylist() == [[t.encode() for t in ITEMS["tags"][i]] for i in GOOD]
    np.testing.assert_array_equal(
        np.array(got.column("half").to_pylist()), np.array([ITEMS["half"][i] for i in GOOD])
    )


def test_a_query_reads_its_result_with_integer_ids(bq, tmp_path):
    graph = load_graph(write_schema(tmp_path, schema_text(table_meta("items"), sql_meta(LINK_SQL))))
    got = read_set(graph.edge_sets["link"])
    keep = [i for i, w in enumerate(LINKS["w"]) if w > 0]
    expected = sorted((str(LINKS["src"][i]), str(LINKS["dst"][i]), LINKS["w"][i] * 2) for i in keep)
    rows = zip(*(got.column(c).to_pylist() for c in ("#source", "#target", "weight")), strict=True)
    assert [(s.decode(), t.decode(), w) for s, t, w in rows] == expected


def test_batch_rows_cut_a_stream_into_tables_of_that_many_rows(bq, tmp_path):
    graph = load_graph(
        write_schema(tmp_path, schema_text(table_meta("many"), sql_meta(LINK_SQL), ""))
    )
    units = graph_tables.set_files(graph.node_sets["item"])
    total = 0
    for unit, fmt in units:
        sizes = [t.num_rows for t in readers.read_table(unit, fmt, ("#id",), {}, batch_rows=3000)]
        assert set(sizes[:-1]) <= {3000} and 0 < sizes[-1] <= 3000
        total += sum(sizes)
    assert total == 100_000 and len(units) < 100_000 / 3000


@pytest.mark.parametrize(
    "item_meta, features, expected",
    [
        (table_meta("nope"), "", "BigQuery table dtypes.nope (node set 'item'): 404 "),
        (table_meta("items", "no_such_dataset"), "", "(node set 'item'): 404 "),
        (sql_meta("SELEC id FROM dtypes.items"), "", "BigQuery query `SELEC id FROM"),
        (sql_meta(f"DELETE FROM `{PROJECT}.{DATASET}.items` WHERE TRUE"), "", "must be a query"),
        (
            table_meta("items"),
            'features { key: "name" value { dtype: DT_FLOAT } }',
            "BigQuery table dtypes.items (node set 'item'): column 'name' has values of type "
            "string, which cannot be float feature values",
        ),
        (
            table_meta("items"),
            'features { key: "zz" value { dtype: DT_FLOAT } }',
            "BigQuery table dtypes.items (node set 'item'): ",
        ),
    ],
)
def test_a_fault_is_one_line_naming_the_set_and_the_table(
    bq, tmp_path, item_meta, features, expected
):
    graph = load_graph(write_schema(tmp_path, schema_text(item_meta, sql_meta(LINK_SQL), features)))
    with pytest.raises(UserError) as caught:
        read_set(graph.node_sets["item"])
    message = str(caught.value)
    assert expected in message and "\n" not in message, message
    assert len(message) < 600 and "POST http" not in message  # the REST request is no cause


def test_the_table_stays_untouched_by_a_refused_query(bq):
    # The DELETE above was refused from its dry run: the rows are all there.
    assert bq.rows(f"SELECT COUNT(*) AS n FROM `{PROJECT}.{DATASET}.items`") == [{"n": ROWS}]


@pytest.mark.parametrize(
    "meta, expected",
    [
        (
            'bigquery { table_spec { dataset: "d" table: "t" } read_method: EXPORT }',
            "node set 'item': metadata.bigquery.read_method EXPORT (an extract job to Cloud "
            "Storage) is not supported; use read_method: DIRECT_READ",
        ),
        ('bigquery { table_spec { dataset: "d" } }', "table_spec has no table"),
        ('bigquery { sql: "  " }', "metadata.bigquery.sql is empty"),
        ('filename: "x.csv" bigquery { sql: "SELECT 1" }', "both a filename and a bigquery"),
    ],
)
def test_a_schema_the_reader_cannot_follow_is_refused_in_one_line(tmp_path, meta, expected):
    path = write_schema(tmp_path, schema_text(meta, table_meta("links"), ""))
    with pytest.raises(UserError, match="^" + str(tmp_path)) as caught:
        load_graph(path)
    assert expected in str(caught.value)


def test_a_query_result_table_is_removed_when_its_process_ends(bq, tmp_path):
    """A process that reads a query: its result table is there while it reads (the tables of
    the temporary dataset, listed by the server's API), and gone once it exited."""
    schema = write_schema(tmp_path, schema_text(table_meta("many"), sql_meta(LINK_SQL), ""))
    dataset = f"{PROJECT}.{bigquery_reader.TEMP_DATASET}_us"

    def tables() -> set[str]:
        try:
            return {t.table_id for t in bq.client().list_tables(dataset)}
        except Exception:  # noqa: BLE001 - NotFound: no query ran here yet
            return set()

    before = tables()
    code = (
        "from sampler.schema import load_graph; from sampler.io import graph_tables; "
        f"from tests.bigquery_emulator import BigQueryEmulator; import sys; "
        f"g = load_graph({schema!r}); graph_tables.set_files(g.edge_sets['link']); "
        f"e = BigQueryEmulator.__new__(BigQueryEmulator); e.rest_port = {bq.rest_port}; "
        "e._client = None; print(*[t.table_id for t in e.client().list_tables("
        f"{dataset!r})])"
    )
    env = bq.env(tmp_path / "home")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    made = set(done.stdout.split()) - before
    assert len(made) == 1 and next(iter(made)).startswith("q_")
    assert tables() == before


def sample_cli(schema: str, out, env: dict, *extra: str) -> subprocess.CompletedProcess:
    spec = out.parent / "spec.pbtxt"
    spec.write_text(
        'seed_op { op_name: "seed" node_set_name: "item" }\n'
        'sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "link" '
        "sample_size: 2 strategy: RANDOM_UNIFORM }\n"
    )
    argv = ["--graph_schema", schema, "--sampling_spec", str(spec)]
    argv += ["--output_samples", f"{out}/samples@2", *extra]
    return subprocess.run(
        [sys.executable, "-m", "pipelines.sample", *argv],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize("runner", ["InMemory", "Beam"])
def test_the_server_lost_mid_read_is_one_line_and_no_output(bq, tmp_path, runner):
    """The Storage Read API's connection is cut after 300 kB of its messages (a proxy
    in front of the server's gRPC port): the read retries for BEAM_GRAPH_GCS_RETRY_S, then
    the run stops with one line naming the set, the table and the stream, and no samples."""
    schema = write_schema(tmp_path, schema_text(table_meta("many"), sql_meta(LINK_SQL), ""))
    proxy = CuttingProxy(bq.grpc_port, cut_after=300_000)  # 'many' is 1.1 MB
    try:
        rest = bq.hosts.split(",")[0]
        env = bq.env(
            tmp_path / "home",
            BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=f"{rest},127.0.0.1:{proxy.port}",
            BEAM_GRAPH_GCS_RETRY_S="3",
        )
        extra = ["--runner", "InMemory"] if runner == "InMemory" else []
        start = time.monotonic()
        done = sample_cli(schema, tmp_path / "out", env, *extra)
    finally:
        proxy.close()
    assert proxy.cut.is_set()
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    # The first read to fail: the node set's, or the edge set's when its read started later.
    table = r"BigQuery (table dtypes\.many \(node set 'item'\)|query `[^`]*` \(edge set 'link'\))"
    assert re.match(f"error: {table}, stream \\d+: cannot reach the BigQuery emulator", lines[0])
    assert "retried for 3 s" in lines[0]
    assert time.monotonic() - start < 120
    assert not list((tmp_path / "out").glob("samples*"))


def test_no_credentials_is_one_line_saying_how_to_log_in(bq, tmp_path):
    schema = write_schema(tmp_path, schema_text(table_meta("many"), sql_meta(LINK_SQL), ""))
    env = bq.env(tmp_path / "home")
    del env["BEAM_GRAPH_BIGQUERY_EMULATOR_HOST"]  # the real service, without credentials
    done = sample_cli(schema, tmp_path / "out", env, "--runner", "InMemory")
    assert done.returncode == 2, done.stderr[-3000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: BigQuery table dtypes.many (node set 'item'): ")
    assert "no Google Cloud credentials for BigQuery" in lines[0]
    assert "gcloud auth application-default login" in lines[0]
    assert not list((tmp_path / "out").glob("samples*"))


def test_bad_rows_on_beam_are_dead_letters_and_the_rest_samples_as_the_clean_rows(bq, tmp_path):
    """A Beam run (--max_bad_records) on the dirty table: its dead letters are the bad rows
    (set, row, reason) and its records those of `--runner InMemory` on a Parquet file of the
    good rows only (and the query's rows, as a Parquet file)."""
    schema = write_schema(tmp_path / "bq", schema_text(table_meta("items"), sql_meta(LINK_SQL)))
    clean = tmp_path / "clean"
    clean.mkdir()
    good = {("#id" if k == "id" else k): [v[i] for i in GOOD] for k, v in ITEMS.items()}
    pq.write_table(pa.table(good), clean / "items.parquet")
    keep = [i for i, w in enumerate(LINKS["w"]) if w > 0]
    links = {"#source": [LINKS["src"][i] for i in keep], "#target": [LINKS["dst"][i] for i in keep]}
    links["weight"] = [LINKS["w"][i] * 2 for i in keep]
    pq.write_table(pa.table(links), clean / "links.parquet")
    twin = write_schema(
        clean, schema_text('filename: "items.parquet"', 'filename: "links.parquet"')
    )
    env = bq.env(tmp_path / "home")
    done = sample_cli(schema, tmp_path / "out", env, "--max_bad_records", "4")
    assert done.returncode == 0, done.stderr[-3000:]
    expected = sample_cli(twin, tmp_path / "expected", env, "--runner", "InMemory")
    assert expected.returncode == 0, expected.stderr[-3000:]
    letters = [
        json.loads(line)
        for path in (tmp_path / "out").glob("bad_records-*")
        for line in path.read_text().splitlines()
    ]
    assert sorted((d["set"], d["row"], d["reason"]) for d in letters) == [
        ("item", row, reason) for row, reason in BAD
    ]
    assert {d["file"] for d in letters} == {
        "BigQuery table dtypes.items (node set 'item'), stream 0"
    }

    def records(folder):
        return sorted(
            r.numpy() for r in tf.data.TFRecordDataset(sorted(map(str, folder.glob("samples-*"))))
        )

    got = records(tmp_path / "out")
    assert len(got) == len(GOOD) and got == records(tmp_path / "expected")


def test_a_short_outage_mid_read_is_retried_and_loses_no_row(bq, tmp_path, monkeypatch):
    """The connection is cut in the middle of a stream's message and refused for a second: the
    read reconnects (at the stream's next row: here its first, the one message was never
    whole) and every row comes once."""
    schema = write_schema(tmp_path, schema_text(table_meta("many"), sql_meta(LINK_SQL), ""))
    proxy = CuttingProxy(bq.grpc_port, cut_after=300_000, back_after=1.0)
    try:
        rest = bq.hosts.split(",")[0]
        monkeypatch.setenv("BEAM_GRAPH_BIGQUERY_EMULATOR_HOST", f"{rest},127.0.0.1:{proxy.port}")
        monkeypatch.setenv("BEAM_GRAPH_GCS_RETRY_S", "20")
        got = read_set(load_graph(schema).node_sets["item"])
    finally:
        proxy.close()
    assert proxy.cut.is_set()
    assert got.column("#id").to_pylist() == [f"n{i:06d}".encode() for i in range(100_000)]
