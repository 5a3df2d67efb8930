"""A resumed stream on a server that honours ReadRows' offset, as BigQuery's Storage Read API
does (bqemulator, the project's other test server, ignores it: tests/test_bigquery_resume.py).

The server here is a real gRPC server on a loopback port that serves one stream of a table in
messages of MESSAGE_ROWS rows from the offset asked for, and breaks the first call after two
messages (UNAVAILABLE): the reader (sampler.io.bigquery_stream) reads every row once, also when
the rows after the offset begin as the stream began (a table of equal rows), and a stream sent
again shorter than what was read is one line.
"""

from __future__ import annotations

from concurrent import futures

import grpc
import pyarrow as pa
import pytest

from sampler.errors import UserError
from sampler.io import bigquery_stream

MESSAGE_ROWS = 100
SERVICE = "/google.cloud.bigquery.storage.v1.BigQueryRead/ReadRows"


class HonouringServer:
    """ReadRows of `table` from the request's offset (with `honour`, else from row 0); the first
    call fails after `break_after` messages; `shorter` rows are dropped from every call after
    the first (a stream that changed)."""

    def __init__(self, table: pa.Table, honour=True, break_after: int = 2, shorter: int = 0):
        self.table, self.honour, self.break_after = table, honour, break_after
        self.shorter = shorter
        self.offsets: list[int] = []
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        self.server.add_generic_rpc_handlers([self])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    def service(self, details):
        if details.method == SERVICE:
            return grpc.unary_stream_rpc_method_handler(self._read_rows)
        return None

    def _read_rows(self, request_bytes: bytes, context):
        from google.cloud.bigquery_storage_v1 import types

        request = types.ReadRowsRequest.deserialize(request_bytes)
        first_call = not self.offsets
        self.offsets.append(request.offset)
        table = self.table if first_call else self.table.slice(0, len(self.table) - self.shorter)
        for sent, batch in enumerate(
            table.slice(request.offset if self.honour else 0).to_batches(max_chunksize=MESSAGE_ROWS)
        ):
            if first_call and sent == self.break_after:
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost (test server)")
            data = batch.serialize().to_pybytes()
            response = types.ReadRowsResponse(
                row_count=batch.num_rows,
                arrow_record_batch=types.ArrowRecordBatch(serialized_record_batch=data),
            )
            yield types.ReadRowsResponse.serialize(response)

    def stop(self) -> None:
        self.server.stop(None)


def read_through(server: HonouringServer, monkeypatch) -> pa.Table:
    monkeypatch.setenv("BEAM_GRAPH_BIGQUERY_EMULATOR_HOST", f"127.0.0.1:9,127.0.0.1:{server.port}")
    monkeypatch.setenv("BEAM_GRAPH_GCS_RETRY_S", "20")
    batches = list(bigquery_stream.record_batches("s/streams/0", server.table.schema, "stream 0"))
    return pa.Table.from_batches(batches, server.table.schema)


@pytest.mark.parametrize(
    "ids, asked",
    [
        # distinct rows: resumed at the offset, in one call
        ([f"n{i:04d}" for i in range(450)], [0, 200]),
        # equal rows: the resumed rows begin as the stream did; asked again from row 0
        (["same"] * 450, [0, 200, 0]),
    ],
)
def test_a_server_that_honours_the_offset_is_read_on_from_there(monkeypatch, ids, asked):
    server = HonouringServer(pa.table({"id": ids}))
    try:
        got = read_through(server, monkeypatch)
    finally:
        server.stop()
    assert server.offsets == asked
    assert got.column("id").to_pylist() == ids


def test_a_server_that_ignores_the_offset_has_the_rows_read_skipped(monkeypatch):
    ids = [f"n{i:04d}" for i in range(450)]
    server = HonouringServer(pa.table({"id": ids}), honour=False)
    try:
        got = read_through(server, monkeypatch)
    finally:
        server.stop()
    assert server.offsets == [0, 200, 0]
    assert got.column("id").to_pylist() == ids


def test_a_stream_sent_again_shorter_is_one_line(monkeypatch):
    ids = [f"n{i:04d}" for i in range(450)]
    server = HonouringServer(pa.table({"id": ids}), honour=False, shorter=300)
    try:
        with pytest.raises(UserError) as caught:
            read_through(server, monkeypatch)
    finally:
        server.stop()
    assert str(caught.value) == (
        "stream 0: the server sent the stream again with 150 rows, where 200 were read before"
    )
