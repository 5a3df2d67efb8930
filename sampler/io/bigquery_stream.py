"""One stream of a BigQuery read session as Arrow record batches: every row once, in time.

* **Resuming.** A lost connection is asked again with ReadRows' `offset` = the rows read. The
  Storage Read API starts there; a server that ignores the offset (bqemulator) starts the
  stream again from its first row. So the answer's position is checked, not trusted: an answer
  whose first rows are not the stream's first rows started at the offset; one that begins as
  the stream began may be either, and the stream is then asked from row 0 (which both kinds
  start at), its rows before the offset skipped. A stream that ends before the rows already
  read is one line, never fewer rows.
* **Deadlines.** Waiting for a message (the first one included) counts as an outage once it
  lasts BEAM_GRAPH_GCS_RETRY_S: the call is cancelled and retried while the process's outage
  lasts less than that (sampler.io.bigquery_client.in_outage_budget), then one line (a
  UserError). Time spent by the consumer of the batches is not counted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pyarrow as pa

from sampler.errors import UserError
from sampler.io import bigquery_client as clients
from sampler.io import gcs

FIRST_ROWS = 16  # the stream's first rows kept (as text) to recognise a stream sent again


class _Stalled(Exception):
    """The server sent nothing for the deadline (the call was cancelled)."""


class _Watch:
    """Cancels `call` when one wait for its next message lasts `seconds`."""

    def __init__(self, call, seconds: float):
        self._call, self._seconds = call, seconds
        self._since: float | None = None
        self._done = threading.Event()
        self.fired = False
        threading.Thread(target=self._watch, daemon=True, name="bigquery-read-deadline").start()

    def _watch(self) -> None:
        while not self._done.wait(min(self._seconds / 4, 1.0)):
            since = self._since
            if since is not None and time.monotonic() - since >= self._seconds:
                self.fired = True
                self._call.cancel()
                return

    def next(self):
        """The call's next message (StopIteration at its end); _Stalled when none came in
        time."""
        self._since = time.monotonic()
        try:
            return next(self._call)
        except Exception:
            if self.fired:
                raise _Stalled() from None
            raise
        finally:
            self._since = None

    def close(self) -> None:
        self._done.set()
        self._call.cancel()


def _rows_text(batch: pa.RecordBatch, count: int) -> list[str]:
    """The first `count` rows of `batch` as text (NaN equal to NaN, every value exact)."""
    return [repr(row) for row in batch.slice(0, count).to_pylist()]


def record_batches(stream: str, schema: pa.Schema, text: str) -> Iterator[pa.RecordBatch]:
    """The stream's record batches, every row once (see the module docstring); `text` names
    the set, its table and the stream in messages."""
    from google.api_core import exceptions
    from google.api_core.gapic_v1 import routing_header
    from google.cloud.bigquery_storage_v1 import types

    client = clients.read_client()
    metadata = [routing_header.to_grpc_metadata((("read_stream", stream),))]
    read = 0  # rows of the stream passed on
    first: list[str] = []  # the stream's first rows, as text
    offset, pause = 0, 0.2
    while True:
        watch = None
        started = time.monotonic()
        try:
            request = types.ReadRowsRequest(read_stream=stream, offset=offset)
            watch = _Watch(client.transport.read_rows(request, metadata=metadata), _deadline())
            at = offset  # the stream's row the next message starts at (when known)
            known = offset == 0
            while True:
                try:
                    response = watch.next()
                except StopIteration:
                    break
                started = time.monotonic()
                clients.succeeded()
                pause = 0.2
                data = response.arrow_record_batch.serialized_record_batch
                if not data:
                    continue
                batch = pa.ipc.read_record_batch(pa.py_buffer(data), schema)
                if not batch.num_rows:
                    continue
                if not known:
                    count = min(len(first), batch.num_rows)
                    if _rows_text(batch, count) == first[:count]:
                        offset = 0  # from the start or from the offset: ask from the start
                        break
                    known = True  # not the stream's start: the server began at the offset
                if at == 0 and len(first) < FIRST_ROWS:
                    first = _rows_text(batch, FIRST_ROWS)
                skip = read - at  # >= 0: `at` began at 0 or at `read`
                at += batch.num_rows
                if skip >= batch.num_rows:
                    continue
                read = at
                yield batch.slice(skip) if skip else batch
            if offset == 0 and not known:
                continue  # asked again from row 0
            if at < read:
                raise UserError(
                    f"{text}: the server sent the stream again with {at} rows, where "
                    f"{read} were read before"
                )
            return
        except GeneratorExit:
            raise
        except UserError:
            raise
        except Exception as e:  # noqa: BLE001 - transient ones are retried, the rest one line
            error = _as_client_error(e, exceptions)
            if error is None:
                raise
            if not clients.transient(error) or not clients.in_outage_budget(error, started):
                raise clients.fault(error, text) from e
            offset = read
            time.sleep(pause)
            pause = min(pause * 2, 5.0)
        finally:
            if watch is not None:
                watch.close()


def _deadline() -> float:
    return gcs.retry_seconds()


def _as_client_error(error: BaseException, exceptions) -> BaseException | None:
    """`error` as google-api-core's exception (a gRPC error converted), or None when it is
    none of the client's."""
    import grpc

    if isinstance(error, _Stalled):
        return exceptions.DeadlineExceeded(f"no answer for {_deadline():g} s")
    if isinstance(error, grpc.RpcError) and hasattr(error, "code"):
        return exceptions.from_grpc_error(error)
    if isinstance(error, exceptions.GoogleAPIError) or clients.transient(error):
        return error
    return None
