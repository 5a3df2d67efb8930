"""BigQuery faults end in one line, in time, naming the set, before anything is sent when they
can be found without the server: a server that stops answering (SIGSTOP, or a stream stalled
mid-read), a missing table or a bad query found by `estimate` and `partition --runner
InMemory`, a malformed BEAM_GRAPH_BIGQUERY_EMULATOR_HOST, a `sql` of more than one statement.
Against a real BigQuery API server (bqemulator, tests/bigquery_emulator.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pyarrow as pa
import pytest

from sampler.errors import UserError
from sampler.io import bigquery_source
from tests.bigquery_emulator import PROJECT, ROOT, CuttingProxy

DATASET = "faults"
ROWS = 100_000  # 'many': 10 streams of one message each (a table over 1 MB)
DEADLINE_S = 2  # BEAM_GRAPH_GCS_RETRY_S of the deadline runs
MARGIN_S = 10  # what a loaded machine may add; gRPC alone waits 20 s for a connection


def schema_text(item_meta: str, link_meta: str) -> str:
    return f"""
node_sets {{ key: "item" value {{ metadata {{ {item_meta} }} }} }}
edge_sets {{ key: "link" value {{ source: "item" target: "item" metadata {{ {link_meta} }} }} }}
"""


def table_meta(table: str) -> str:
    return f'bigquery {{ table_spec {{ dataset: "{DATASET}" table: "{table}" }} }}'


def sql_meta(sql: str) -> str:
    return f"bigquery {{ sql: {json.dumps(sql)} }}"


LINK_SQL = f"SELECT source, target FROM `{PROJECT}.{DATASET}.links`"


@pytest.fixture(scope="module")
def bq(bigquery_emulator):
    ids = [f"n{i:06d}" for i in range(ROWS)]
    bigquery_emulator.load(f"{DATASET}.many", pa.table({"id": ids}))
    links = {"source": ids[:50], "target": ids[1:51]}
    bigquery_emulator.load(f"{DATASET}.links", pa.table(links))
    return bigquery_emulator


def write(folder, item_meta: str, link_meta: str = "") -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "schema.pbtxt").write_text(schema_text(item_meta, link_meta or sql_meta(LINK_SQL)))
    (folder / "spec.pbtxt").write_text(
        'seed_op { op_name: "seed" node_set_name: "item" }\n'
        'sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "link" '
        "sample_size: 2 strategy: RANDOM_UNIFORM }\n"
    )
    return str(folder / "schema.pbtxt")


READ = """
import sys, time
from sampler.errors import UserError
from sampler.io import graph_tables, readers
from sampler.schema import load_graph
info = load_graph(sys.argv[1]).node_sets["item"]
start = time.monotonic()
try:
    for unit, fmt in graph_tables.set_files(info):
        for _ in readers.read_table(unit, fmt, ("#id",), {}):
            pass
except UserError as e:
    print(f"{time.monotonic() - start:.1f}", e, sep="\\n")
"""


def read_in_a_process(schema: str, env: dict) -> tuple[float, str]:
    """(seconds the read took, its one line) of reading the node set in a new process (the
    time counted from the read's start, after the imports); a read still going after 90 s
    fails the test."""
    done = subprocess.run(
        [sys.executable, "-c", READ, schema], env=env, capture_output=True, text=True,
        cwd=ROOT, timeout=90,
    )  # fmt: skip
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0 and len(lines) == 2, done.stdout + done.stderr[-3000:]
    return float(lines[0]), lines[1]


@pytest.mark.parametrize("meta", [table_meta("many"), sql_meta("SELECT id FROM faults.many")])
def test_a_stopped_server_is_one_line_within_the_deadline(bq, tmp_path, meta):
    """SIGSTOP: connections are accepted (by the kernel) and never answered."""
    schema = write(tmp_path, meta)
    env = bq.env(tmp_path / "home", BEAM_GRAPH_GCS_RETRY_S=str(DEADLINE_S))
    os.kill(bq.process.pid, signal.SIGSTOP)
    try:
        took, line = read_in_a_process(schema, env)
    finally:
        os.kill(bq.process.pid, signal.SIGCONT)
    assert "(node set 'item'): cannot reach the BigQuery emulator" in line, line
    assert f"retried for {DEADLINE_S} s" in line
    assert took < DEADLINE_S + MARGIN_S, f"the line came after {took} s: {line}"


def test_a_stream_that_stops_answering_mid_read_is_one_line(bq, tmp_path):
    """The proxy forwards the first 150 kB of the server's messages (the first stream and part
    of the second), then nothing, the connections left open."""
    schema = write(tmp_path, table_meta("many"))
    proxy = CuttingProxy(bq.grpc_port, cut_after=150_000, stall=True)
    try:
        rest = bq.hosts.split(",")[0]
        env = bq.env(
            tmp_path / "home",
            BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=f"{rest},127.0.0.1:{proxy.port}",
            BEAM_GRAPH_GCS_RETRY_S=str(DEADLINE_S),
        )
        took, line = read_in_a_process(schema, env)
    finally:
        proxy.close()
    assert proxy.cut.is_set()
    assert "BigQuery table faults.many (node set 'item'), stream 1: cannot reach" in line, line
    assert f"no answer for {DEADLINE_S} s" in line
    assert took < 60


def tool(args: list[str], env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args], env=env, capture_output=True, text=True, cwd=ROOT,
        timeout=300,
    )  # fmt: skip


def one_line(done: subprocess.CompletedProcess) -> str:
    lines = [line for line in done.stderr.strip().splitlines() if not line.startswith("progress")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("which", ["estimate", "partition"])
@pytest.mark.parametrize(
    "item_meta, link_meta, expected",
    [
        (table_meta("nope"), "", "error: BigQuery table faults.nope (node set 'item'): 404 "),
        (
            table_meta("many"),
            sql_meta("SELEC source FROM faults.links"),
            "error: BigQuery query `SELEC source FROM faults.links` (edge set 'link'): 400 ",
        ),
    ],
)
def test_a_missing_table_or_bad_query_names_the_set(bq, tmp_path, which, item_meta, link_meta,
                                                    expected):  # fmt: skip
    schema = write(tmp_path, item_meta, link_meta)
    if which == "estimate":
        args = ["pipelines.estimate", "--graph_schema", schema]
        args += ["--sampling_spec", str(tmp_path / "spec.pbtxt")]
    else:
        args = ["pipelines.partition", "--graph_schema", schema, "--runner", "InMemory"]
        args += ["--num_parts", "2", "--graph_name", "g", "--output_dir", str(tmp_path / "out")]
    line = one_line(tool(args, bq.env(tmp_path / "home")))
    assert line.startswith(expected), line


@pytest.mark.parametrize(
    "value, problem",
    [
        ("127.0.0.1:abc,127.0.0.1:9060", "'127.0.0.1:abc' has no port from 1 to 65535"),
        ("127.0.0.1:9050,127.0.0.1:70000", "'127.0.0.1:70000' has no port from 1 to 65535"),
        ("127.0.0.1:0,127.0.0.1:9060", "'127.0.0.1:0' has no port from 1 to 65535"),
        (":9050,127.0.0.1:9060", "':9050' names no host"),
        ("127.0.0.1:9050", "expected two addresses"),
        ("127.0.0.1:9050,127.0.0.1:9060/x", "'127.0.0.1:9060/x' has no port"),
    ],
)
def test_a_malformed_emulator_host_is_one_line(bq, tmp_path, value, problem):
    schema = write(tmp_path, sql_meta("SELECT id FROM faults.many"))
    env = bq.env(tmp_path / "home", BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=value)
    args = ["pipelines.estimate", "--graph_schema", schema]
    args += ["--sampling_spec", str(tmp_path / "spec.pbtxt")]
    line = one_line(tool(args, env))
    assert line.startswith("error: BigQuery query `SELECT id FROM faults.many` (node set 'item')")
    assert f"BEAM_GRAPH_BIGQUERY_EMULATOR_HOST={value!r}: {problem}" in line, line


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM faults.many; DELETE FROM faults.many WHERE TRUE",
        "SELECT 1 AS id;\nSELECT 2 AS id",
        "SELECT ';' AS id; DROP TABLE faults.many",
    ],
)
def test_more_than_one_statement_is_refused_before_anything_is_sent(sql):
    with pytest.raises(UserError, match="is more than one statement") as caught:
        bigquery_source.from_metadata(_metadata(sql), "schema.pbtxt: node set 'item'", {}, ("#id",))
    assert str(caught.value).startswith("schema.pbtxt: node set 'item': metadata.bigquery.sql")


@pytest.mark.parametrize(
    "sql, kept",
    [
        ("SELECT id FROM t;", "SELECT id FROM t"),
        ("SELECT id FROM t ;  -- the end; really\n", "SELECT id FROM t"),
        ("SELECT 'a;b' AS id, \"c;\" AS x FROM t", None),
        ("SELECT id FROM t /* ; */ WHERE x = '''p;\nq'''", None),
        ("SELECT `odd;name` AS id FROM t -- ; DROP TABLE t", None),
        ("SELECT 'it\\'s; here' AS id # ;\nFROM t;", "SELECT 'it\\'s; here' AS id # ;\nFROM t"),
    ],
)
def test_one_statement_with_semicolons_in_strings_or_comments_is_kept(sql, kept):
    name = bigquery_source.from_metadata(_metadata(sql), "s: node set 'item'", {}, ("#id",))
    assert bigquery_source.parse(name).sql == (sql.strip() if kept is None else kept)


def _metadata(sql: str):
    from sampler.protos import graph_schema_pb2

    bigquery = graph_schema_pb2.BigQuery()
    bigquery.sql = sql
    return bigquery


def test_a_refused_script_sends_nothing(bq, tmp_path):
    """The run stops at the schema: the table is untouched (the emulator would have run the
    DELETE in its dry run)."""
    schema = write(
        tmp_path,
        table_meta("many"),
        sql_meta(f"{LINK_SQL}; DELETE FROM {DATASET}.links WHERE TRUE"),
    )
    args = ["pipelines.estimate", "--graph_schema", schema]
    args += ["--sampling_spec", str(tmp_path / "spec.pbtxt")]
    line = one_line(tool(args, bq.env(tmp_path / "home")))
    assert "edge set 'link': metadata.bigquery.sql is more than one statement" in line, line
    assert bq.rows(f"SELECT COUNT(*) AS n FROM `{PROJECT}.{DATASET}.links`") == [{"n": 50}]
