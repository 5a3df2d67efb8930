"""A real BigQuery API server on loopback ports: `bqemulator` (REST and the Storage Read API over
gRPC, DuckDB underneath), as a process.

`BigQueryEmulator.start()` installs DuckDB's spatial extension (which the server will not start
without) offline from the pinned `duckdb-extension-spatial` wheel under the server's own HOME (a
temporary folder), then starts `python -m bqemulator start` on two free 127.0.0.1 ports with
BQEMU_ENABLE_FORMAT_EXTENSIONS=false (no download is ever tried) and a 1 GiB message cap
(the default 10 MB fails a Storage Read stream of wide rows), and waits for /healthz. `stop()`
ends it (a test can stop it mid-run: the server goes away). `hosts` is the value of
BEAM_GRAPH_BIGQUERY_EMULATOR_HOST that points the code under test at it; `env()` a CLI run's
environment with it, no Google credentials and no metadata server.

Tables are loaded through the server's own API (`load`, with google-cloud-bigquery's load job
from Parquet bytes), not through the code under test. Only loopback addresses are contacted.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tests.gcs_emulator import end_server, free_port

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "test-proj"
MESSAGE_CAP = 1 << 30  # BQEMU_WRITE_API_MAX_REQUEST_BYTES's largest value


class BigQueryEmulator:
    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="bigquery-emulator-"))
        self.home = self.folder / "home"
        self.rest_port = free_port()
        self.grpc_port = free_port()
        self.hosts = f"127.0.0.1:{self.rest_port},127.0.0.1:{self.grpc_port}"
        self.process: subprocess.Popen | None = None
        self._client = None

    # ---------------------------------------------------------------- process
    def _server_env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "BQEMU_"))}
        env.update(
            HOME=str(self.home),
            TMPDIR=str(self.folder / "tmp"),
            BQEMU_ENABLE_FORMAT_EXTENSIONS="false",
            BQEMU_WRITE_API_MAX_REQUEST_BYTES=str(MESSAGE_CAP),
            BQEMU_LOG_LEVEL="warning",
        )
        return env

    def install_spatial(self) -> None:
        """DuckDB's spatial extension under the server's HOME, from the pinned wheel."""
        self.home.mkdir(parents=True, exist_ok=True)
        (self.folder / "tmp").mkdir(exist_ok=True)
        code = (
            "import duckdb, duckdb_extensions; "
            "duckdb_extensions.import_extension('spatial', con=duckdb.connect())"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], env=self._server_env(), capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"DuckDB's spatial extension did not install:\n{done.stderr}")

    def start(self) -> BigQueryEmulator:
        self.install_spatial()
        self._log = open(self.folder / "emulator.log", "ab")  # noqa: SIM115 - closed in stop
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bqemulator", "start", "--rest-host", "127.0.0.1",
             "--rest-port", str(self.rest_port), "--grpc-host", "127.0.0.1",
             "--grpc-port", str(self.grpc_port), "--ephemeral", "--project", PROJECT],
            env=self._server_env(), stdout=self._log, stderr=self._log,
            stdin=subprocess.DEVNULL, cwd=self.folder, preexec_fn=_end_with_parent,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                url = f"http://127.0.0.1:{self.rest_port}/healthz"
                with urllib.request.urlopen(url, timeout=5) as response:
                    if response.status == 200:
                        return self
            except OSError:
                pass
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                log = (self.folder / "emulator.log").read_text(errors="replace")
                raise RuntimeError(f"bqemulator did not start:\n{log[-3000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        end_server(self.process, getattr(self, "_log", None))
        self.process = None
        self._client = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def env(self, home: Path, **extra: str) -> dict:
        """A CLI run's environment: this server, project PROJECT, no credentials, no metadata
        server, HOME `home`."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
        env.update(
            BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=self.hosts,
            GOOGLE_CLOUD_PROJECT=PROJECT,
            HOME=str(home),
            CLOUDSDK_CONFIG=str(home / "gcloud"),
            GCE_METADATA_HOST="127.0.0.1:9",
            GCE_METADATA_IP="127.0.0.1:9",
            NO_GCE_CHECK="True",
            PYTHONPATH=str(ROOT),
            TF_USE_LEGACY_KERAS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        env.update(extra)
        return env

    # ---------------------------------------------------------------- tables
    def client(self):
        """google-cloud-bigquery's client on this server (the tests' own, not the product's)."""
        if self._client is None:
            from google.api_core.client_options import ClientOptions
            from google.auth.credentials import AnonymousCredentials
            from google.cloud import bigquery

            self._client = bigquery.Client(
                project=PROJECT,
                credentials=AnonymousCredentials(),
                client_options=ClientOptions(api_endpoint=f"http://127.0.0.1:{self.rest_port}"),
            )
        return self._client

    def load(self, table_id: str, table: pa.Table, types: dict[str, str] | None = None) -> str:
        """Creates `dataset.table` (in PROJECT) with a column per column of `table` (BigQuery
        types from `types`, else from the Arrow type; lists are REPEATED) and loads its rows.
        Returns the table's full id."""
        from google.cloud import bigquery

        client = self.client()
        dataset, name = table_id.split(".")
        client.create_dataset(f"{PROJECT}.{dataset}", exists_ok=True)
        fields, columns = [], {}
        for field in table.schema:
            column = table.column(field.name)
            kind, mode = (types or {}).get(field.name), "NULLABLE"
            value_type = field.type
            if pa.types.is_list(value_type) or pa.types.is_fixed_size_list(value_type):
                mode, value_type = "REPEATED", value_type.value_type
                column = column.cast(pa.list_(_load_type(value_type)))
            else:
                column = column.cast(_load_type(value_type))
            fields.append(bigquery.SchemaField(field.name, kind or _bq_type(value_type), mode))
            columns[field.name] = column
        full = f"{PROJECT}.{dataset}.{name}"
        client.delete_table(full, not_found_ok=True)
        client.create_table(bigquery.Table(full, schema=fields))
        if table.num_rows:
            data = io.BytesIO()
            pq.write_table(pa.table(columns), data)
            data.seek(0)
            config = bigquery.LoadJobConfig(source_format="PARQUET")
            client.load_table_from_file(data, full, job_config=config).result()
        return full

    def rows(self, sql: str) -> list[dict]:
        return [dict(row) for row in self.client().query(sql).result()]


def _end_with_parent() -> None:
    """In the server's process, before it runs: SIGTERM when the process that started it ends
    (Linux), so that a test process that dies leaves no server behind."""
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _load_type(value_type: pa.DataType) -> pa.DataType:
    if pa.types.is_floating(value_type):
        return pa.float64()
    if pa.types.is_integer(value_type):
        return pa.int64()
    return value_type


def _bq_type(value_type: pa.DataType) -> str:
    if pa.types.is_floating(value_type):
        return "FLOAT64"
    if pa.types.is_integer(value_type):
        return "INT64"
    if pa.types.is_boolean(value_type):
        return "BOOL"
    if pa.types.is_string(value_type) or pa.types.is_large_string(value_type):
        return "STRING"
    if pa.types.is_binary(value_type) or pa.types.is_large_binary(value_type):
        return "BYTES"
    raise ValueError(f"no BigQuery type for {value_type}")


def load_graph(emulator: BigQueryEmulator, graph, dataset: str, out_dir: Path) -> str:
    """Loads every table of a sampler.tools.synthetic graph into `dataset` (ids as STRING,
    `#id`/`#source`/`#target` as `id`/`source`/`target`, vectors REPEATED FLOAT64) and writes
    `out_dir/graph_schema.pbtxt` whose sets name those tables (a reversed set the table of its
    twin, as synthetic.write_graph does). Returns the schema's path."""
    from google.protobuf import text_format

    from sampler.protos import graph_schema_pb2
    from sampler.tools import synthetic

    schema = graph_schema_pb2.GraphSchema()
    schema.CopyFrom(graph.schema)
    for name, table in graph.tables.items():
        columns = {}
        for field in table.schema:
            column = table.column(field.name)
            if field.name.startswith("#"):
                column = column.cast(pa.string())
            columns[field.name.removeprefix("#")] = column
        emulator.load(f"{dataset}.{name}", pa.table(columns))
    for name in [*schema.node_sets, *schema.edge_sets]:
        stored = synthetic.REVERSED.get(name, name)
        if stored not in graph.tables:
            continue
        where = schema.node_sets[name] if name in schema.node_sets else schema.edge_sets[name]
        spec = where.metadata.bigquery.table_spec
        spec.project, spec.dataset, spec.table = PROJECT, dataset, stored
        where.metadata.bigquery.read_method = graph_schema_pb2.BigQuery.DIRECT_READ
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "graph_schema.pbtxt"
    path.write_text(text_format.MessageToString(schema))
    return str(path)


class CuttingProxy:
    """A TCP proxy on a free loopback port in front of `port` that, once more than `cut_after`
    bytes went from the server to its clients, closes every connection and refuses the next
    ones (closes them at once): the server lost in the middle of a read, as a client sees it.
    With `back_after` seconds, it lets connections through again that long after the cut (a
    short outage). With `stall`, it stops forwarding instead: every connection stays open and
    nothing more comes from the server (a server that stopped answering mid-read)."""

    def __init__(
        self, port: int, cut_after: int, back_after: float | None = None, stall: bool = False
    ):
        import socket
        import threading

        self.port = free_port()
        self._target = port
        self._cut_after = cut_after
        self._sent = 0
        self.cut = threading.Event()
        self._back_after = back_after
        self._stall = stall
        self._cut_at: float | None = None
        self._lock = threading.Lock()
        self._sockets: list = []
        self._listener = socket.create_server(("127.0.0.1", self.port))
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.cut.is_set() and self._stall:
                with self._lock:
                    self._sockets.append(client)  # held open, never answered
                continue
            if self.cut.is_set():
                if self._back_after is None or time.monotonic() - self._cut_at < self._back_after:
                    client.close()
                    continue
                self._cut_after = float("inf")  # back for good
            server = socket.create_connection(("127.0.0.1", self._target))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, source, sink, counted: bool) -> None:
        generation = self._cut_at
        try:
            while self._cut_at == generation:
                data = source.recv(1 << 16)
                if not data:
                    break
                if counted:
                    with self._lock:
                        self._sent += len(data)
                        over = self._sent > self._cut_after
                    if over and self._stall:
                        self.cut.set()
                        return
                    if over:
                        self._cut()
                        return
                sink.sendall(data)
        except OSError:
            pass

    def _cut(self) -> None:
        import socket

        with self._lock:
            if self._cut_at is None:
                self._cut_at = time.monotonic()
            self.cut.set()
            sockets, self._sockets = self._sockets, []
            for s in sockets:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._stall = False
        self._cut()
        self._listener.close()
