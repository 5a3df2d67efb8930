"""Reading a set in BigQuery: a read session's streams, each read into Arrow record batches.

`stream_units(source name, columns, where)` opens one read session of the Storage Read API on
the set's table (or on its query's result, see below), with only the columns asked for, and
returns one unit per stream: `(unit, "bigquery")`, where a set in files has `(path, format)`.
So every reader that takes a set's files takes its streams: `--runner InMemory` reads them on
threads, the Beam transforms spread them over the workers (one element per stream), and
`read_unit` (what `readers.read_table` calls for the format "bigquery") reads one stream's
Arrow record batches into canonical tables, with the Parquet reader's checks and bad-row
accounting (sampler.io.parquet_reader.canonical_tables): no row ever becomes a Python object.

A unit is a small JSON string (the stream's name, the set and table for messages, the
session's Arrow schema, the stream's share of the session's bytes); it is all a worker needs,
with the clients of sampler.io.bigquery_client.

A query (`sql`) runs once per process as `CREATE TABLE ... AS` into the dataset
`beam_graph_sampler_tmp_<location>` of the project that runs it (made when missing, its tables
expiring after a day); the session reads that table, which is deleted when the process exits.
The Storage Read API reads tables only, and the table of a query's own result is not readable
on every server (an emulator keeps it in memory).

Rows: a stream's rows are numbered from 1 within the stream (`..., stream K: row N`); BigQuery
gives its rows no fixed order, so a dead letter names its stream. A session is made once per
(source, columns) for REUSE_S seconds in a process, and lasts 6 hours on BigQuery.
"""

from __future__ import annotations

import atexit
import base64
import json
import os
import threading
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa

from sampler.errors import UserError
from sampler.io import bigquery_client as clients
from sampler.io import bigquery_stream
from sampler.io.bigquery_source import ID_COLUMNS, UNIT_FORMAT, BigQuerySource, parse
from sampler.io.parquet_reader import canonical_tables, check_column_types

MAX_STREAMS = 100  # a session's streams at most (the server makes fewer for a small table)
TEMP_DATASET = "beam_graph_sampler_tmp"  # + "_<location>": where query results go
RESULT_LIFETIME_DAYS = 1  # a query's result table expires then, if its process could not delete it

_LOCK = threading.Lock()
# Reused for REUSE_S, so that one run (its size estimates, then its read) makes one session
# and runs a query once, and a later run in the same process sees the table as it is then.
REUSE_S = 600.0
_SESSIONS: dict = {}  # (source name, columns) -> (time, (session, schema bytes, streams, bytes))
_RESULTS: dict = {}  # sql -> (time, (project, dataset, table)) of its result in this process
_MADE: list = []  # result tables this process made (deleted at exit)


def label(source: BigQuerySource, where: str) -> str:
    """'BigQuery table p.d.t (node set 'paper')': what messages and dead letters name."""
    return f"{source.describe()} ({where})" if where else source.describe()


def _bq_name(column: str) -> str:
    return ID_COLUMNS.get(column, column)


def stream_units(name: str, columns: tuple[str, ...] | None, where: str = "") -> list:
    """[(unit, "bigquery")] of the streams of a read session on the source `name` with the
    canonical `columns` ('#id', '#source', '#target' and features; None: every column)."""
    source = parse(name)
    text = label(source, where)
    key = (name, None if columns is None else tuple(columns))
    with _LOCK:
        found = _recent(_SESSIONS, key)
    if found is None:
        try:
            found = _open_session(source, columns, text)
        except UserError as e:
            raise clients.fault(e, text) from None
        except Exception as e:  # noqa: BLE001 - any client error becomes one line
            if not _is_client_error(e):
                raise
            raise clients.fault(e, text) from e
        with _LOCK:
            _SESSIONS[key] = (time.monotonic(), found)
    session, schema, streams, total = found
    share = total // max(len(streams), 1)
    schema_text = base64.b64encode(schema).decode()
    return [
        (
            json.dumps(
                {"stream": stream, "label": text, "index": i, "schema": schema_text, "bytes": share}
            ),
            UNIT_FORMAT,
        )
        for i, stream in enumerate(streams)
    ]


def _recent(cache: dict, key):
    """The value cached under `key` if made less than REUSE_S ago, else None."""
    found = cache.get(key)
    return found[1] if found is not None and time.monotonic() - found[0] < REUSE_S else None


def _is_client_error(error: BaseException) -> bool:
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    return isinstance(
        error, (exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError)
    ) or clients.transient(error)


def _open_session(source: BigQuerySource, columns, text: str):
    from google.cloud.bigquery_storage_v1 import types

    if source.is_query:
        project, dataset, table = _query_result(source.sql)
    else:
        project, dataset, table = (
            (source.project or clients.project()),
            source.dataset,
            source.table,
        )
    wanted = None if columns is None else [_bq_name(c) for c in columns]
    options = types.ReadSession.TableReadOptions(selected_fields=wanted or [])
    request = types.ReadSession(
        table=f"projects/{project}/datasets/{dataset}/tables/{table}",
        data_format=types.DataFormat.ARROW,
        read_options=options,
    )
    session = clients.read_client().create_read_session(
        parent=f"projects/{clients.project()}",
        read_session=request,
        max_stream_count=MAX_STREAMS,
        retry=clients.retry(),
        timeout=clients.call_timeout(),
    )
    schema_bytes = session.arrow_schema.serialized_schema
    streams = [stream.name for stream in session.streams]
    if wanted:
        schema = pa.ipc.read_schema(pa.py_buffer(schema_bytes))
        missing = [c for c in wanted if c not in schema.names]
        if missing:
            raise UserError(f"missing column '{missing[0]}' (the table has {schema.names})")
    return session.name, schema_bytes, streams, int(session.estimated_total_bytes_scanned)


def _query_result(sql: str) -> tuple[str, str, str]:
    """(project, dataset, table) holding the result of `sql`, made once per process."""
    with _LOCK:
        found = _recent(_RESULTS, sql)
        if found is not None:
            return found
    from google.cloud import bigquery

    client = clients.rest_client()
    project = clients.project()
    dry = client.query(
        sql,
        job_config=bigquery.QueryJobConfig(dry_run=True, use_query_cache=False),
        retry=clients.retry(),
        job_retry=None,
        timeout=clients.call_timeout(),
    )
    kind = dry.statement_type
    if kind and kind != "SELECT":
        raise UserError(f"the sql is a {kind} statement; it must be a query (SELECT)")
    location = dry.location or "US"
    dataset = f"{TEMP_DATASET}_{location.lower().replace('-', '_')}"
    made = bigquery.Dataset(f"{project}.{dataset}")
    made.location = location
    made.default_table_expiration_ms = RESULT_LIFETIME_DAYS * 86_400_000
    made.description = "Query results read by beam-graph-sampler; each expires after a day."
    client.create_dataset(
        made, exists_ok=True, retry=clients.retry(), timeout=clients.call_timeout()
    )
    table = f"q_{uuid.uuid4().hex}"
    body = sql.strip().rstrip(";").rstrip()
    statement = (
        f"CREATE TABLE `{project}.{dataset}.{table}` OPTIONS(expiration_timestamp="
        f"TIMESTAMP_ADD(CURRENT_TIMESTAMP(), INTERVAL {RESULT_LIFETIME_DAYS} DAY)) AS\n{body}\n"
    )
    job = client.query(
        statement,
        location=location,
        retry=clients.retry(),
        job_retry=None,
        timeout=clients.call_timeout(),
    )
    with _LOCK:
        if not _MADE:
            atexit.register(delete_results, os.getpid())
        _MADE.append((project, dataset, table))
    job.result(retry=clients.retry())
    with _LOCK:
        _RESULTS[sql] = (time.monotonic(), (project, dataset, table))
    return project, dataset, table


def delete_results(pid: int | None = None) -> None:
    """Deletes the query result tables this process made (at exit; best effort: they expire).
    `pid`: only in that process (not in a child forked from it)."""
    if pid is not None and pid != os.getpid():
        return
    with _LOCK:
        made, _MADE[:] = list(_MADE), []
        _RESULTS.clear()
        _SESSIONS.clear()
    for project, dataset, table in made:
        try:
            clients.rest_client().delete_table(
                f"{project}.{dataset}.{table}",
                not_found_ok=True,
                retry=clients.retry().with_timeout(5.0),
                timeout=5.0,
            )
        except Exception:  # noqa: BLE001 - the table expires anyway
            pass


# --------------------------------------------------------------------------- one stream


def unit_fields(unit: str) -> dict:
    return json.loads(unit)


def unit_bytes(unit: str) -> int:
    """The stream's share of its session's bytes (the server's estimate)."""
    return int(unit_fields(unit)["bytes"])


def unit_columns(unit: str) -> list[str]:
    """The canonical names of a stream's columns ('#id' for BigQuery's 'id', ...)."""
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(unit_fields(unit)["schema"])))
    canonical = {bq: name for name, bq in ID_COLUMNS.items()}
    return [canonical.get(name, name) for name in schema.names]


def read_unit(unit: str, id_columns, specs, batch_rows: int, report) -> Iterator[pa.Table]:
    """The rows of one stream as canonical tables of at most `batch_rows` rows (readers'
    contract: bad rows to `report`, a column of the wrong type a UserError)."""
    fields = unit_fields(unit)
    text = f"{fields['label']}, stream {fields['index']}"
    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(fields["schema"])))
    names = [*id_columns, *specs]
    missing = [c for c in names if _bq_name(c) not in schema.names]
    if missing:
        raise UserError(
            f"{fields['label']}: missing column '{_bq_name(missing[0])}' "
            f"(the session has {schema.names})"
        )
    wanted = [_bq_name(c) for c in names]
    renamed = pa.schema([schema.field(c).with_name(n) for c, n in zip(wanted, names, strict=True)])
    check_column_types(fields["label"], renamed, id_columns, specs)

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in bigquery_stream.record_batches(fields["stream"], schema, text):
            batch = pa.RecordBatch.from_arrays([batch.column(c) for c in wanted], schema=renamed)
            for start in range(0, batch.num_rows, batch_rows):
                yield batch.slice(start, batch_rows)

    yield from canonical_tables(text, batches(), id_columns, specs, report)


# --------------------------------------------------------------------------- tools


def signature(name: str, where: str) -> list:
    """[[table, bytes, version]]: what the stats tool's cache compares, as [path, size, mtime]
    of a file; `where` names the sets that read the table, for messages. The version is a table's modification time, rows and etag; a query's result may
    change at any time, so its version is never the same twice."""
    source = parse(name)
    size = sum(unit_bytes(unit) for unit, _ in stream_units(name, None, where))
    if source.is_query:
        return [[source.describe(), size, uuid.uuid4().hex]]
    try:
        table = clients.rest_client().get_table(
            source.table_id(source.project or clients.project()),
            retry=clients.retry(),
            timeout=clients.call_timeout(),
        )
    except Exception as e:  # noqa: BLE001 - one line
        if isinstance(e, UserError) or not _is_client_error(e):
            raise
        raise clients.fault(e, label(source, where)) from e
    modified = table.modified.isoformat() if table.modified else ""
    return [[source.describe(), size, f"{modified} {table.num_rows} {table.etag}"]]
