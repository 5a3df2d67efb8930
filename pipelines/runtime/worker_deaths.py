"""A worker process of the local runner that ends while the run needs it ends the run, at once.

Beam 2.77's FnApiRunner starts each SDK worker process (multi_processing) from a thread that
waits for it and raises `RuntimeError: Worker subprocess exited with return code N` in that
thread only, where nobody looks. The runner's main thread goes on waiting for the worker:

* a worker that never connected (its process failed to start: the fork server died just
  after it began to listen) is waited for forever;
* a worker that died during a bundle (SIGKILL from the kernel's out-of-memory killer) ends the
  run with `RuntimeError: Channel closed prematurely.` and about 80 lines of traceback.

`install()` (once per process; LocalRunner calls it) starts each worker from a thread that,
when the process ends before the runner closes it, records the death in words (which worker,
which signal or exit code) and aborts the worker's pending and later control requests with
WorkerDied: the main thread stops waiting. LocalRunner raises the first death recorded during
a failed run as WorkerDied, which run_main prints in one line. A run is not retried: its
bundles may have written part files, and the CLI removes a failed run's partial output.

The runner's close waited for each worker process without a bound too; a worker process that
has not ended STOP_S after its close is killed with what it started (`_bounded_stop`). So did
its close of a control connection, for the thread that reads the worker's responses: a run that
failed in the runner (a thread it could not start under `ulimit -v`) waited there forever for a
worker that never answers; it waits STOP_S (`_bounded_close`). The close of the runner's gRPC
servers waits for each server's serving thread to see the shutdown; a serving thread that
ended with that error never does: the wait is bounded too (`_bounded_server_close`).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading

import grpc
from apache_beam.portability.api import beam_fn_api_pb2_grpc, endpoints_pb2
from apache_beam.runners.portability import local_job_service
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.utils import thread_pool_executor
from google.protobuf import json_format, text_format

from pipelines.beam_patches import targets
from pipelines.runtime.interrupts import (
    WorkerDied,
    descendants,
    exit_status_words,
    memory_limit_words,
)

STOP_S = 30  # how long a closed worker process may take to end before it is killed

_EXITED = re.compile(r"Worker subprocess exited with return code (-?\d+)")
_lock = threading.Lock()

BEAM_VERSIONS = ("2.77",)  # the Beam versions this patch of Beam's runner was written for
# What install() replaces or wraps: (owner, attribute, source digest), checked first
# (pipelines.beam_patches.targets).
TARGETS = (
    (worker_handlers.SubprocessSdkWorkerHandler, "start_worker", "eb622509cbc26327"),
    (worker_handlers.SubprocessSdkWorkerHandler, "stop_worker", "ddfef6451cfa7f26"),
    (worker_handlers.SubprocessSdkWorkerHandler, "close", "7e44d64a1e68f7f5"),
    (worker_handlers.ControlConnection, "push", "987ae86b0ab9add5"),
    (worker_handlers.ControlConnection, "close", "4e227a7307b71f7b"),
    (worker_handlers.GrpcServer, "close", "a00eb24f9e3ef67b"),
)
_deaths: list[str] = []  # the run in progress's, in the order they were seen


def deaths() -> list[str]:
    with _lock:
        return list(_deaths)


def clear() -> None:
    with _lock:
        _deaths.clear()


class _Worker(local_job_service.SubprocessSdkWorker):
    """Beam 2.77's SubprocessSdkWorker.run, keeping its process (`process`) so that a stop
    that waits too long can end it."""

    process = None

    def run(self) -> None:
        options = [("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0)]
        logging_server = grpc.server(
            thread_pool_executor.shared_unbounded_instance(), options=options
        )
        logging_port = logging_server.add_insecure_port("[::]:0")
        logging_server.start()
        beam_fn_api_pb2_grpc.add_BeamFnLoggingServicer_to_server(
            local_job_service.BeamFnLoggingServicer(), logging_server
        )
        try:
            url = endpoints_pb2.ApiServiceDescriptor
            env = dict(
                os.environ,
                CONTROL_API_SERVICE_DESCRIPTOR=text_format.MessageToString(
                    url(url=self._control_address)
                ),
                LOGGING_API_SERVICE_DESCRIPTOR=text_format.MessageToString(
                    url(url=f"localhost:{logging_port}")
                ),
                PIPELINE_OPTIONS=json_format.MessageToJson(
                    self._provision_info.provision_info.pipeline_options
                ),
            )
            if self._worker_id:
                env["WORKER_ID"] = self._worker_id
            with worker_handlers.SUBPROCESS_LOCK:
                self.process = subprocess.Popen(self._worker_command_line, shell=True, env=env)
            self.process.wait()
            if self.process.returncode:
                raise RuntimeError(
                    f"Worker subprocess exited with return code {self.process.returncode}"
                )
        finally:
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
            logging_server.stop(0)


def _bounded_stop(self) -> None:
    """SubprocessSdkWorkerHandler.stop_worker: waits STOP_S for the worker process to end once
    the runner closed it, then kills it and what it started (a worker that cannot exit must not
    hold the run forever)."""
    self.worker_thread.join(timeout=STOP_S)
    process = getattr(self.worker, "process", None)
    if self.worker_thread.is_alive() and process is not None:
        for pid in [*descendants(process.pid), process.pid]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        self.worker_thread.join(timeout=STOP_S)


def _watched_start(self) -> None:
    """SubprocessSdkWorkerHandler.start_worker, with the worker's end watched."""
    worker = _Worker(
        self._worker_command_line, self.control_address, self.provision_info, self.worker_id
    )
    self.worker = worker

    def run() -> None:
        try:
            worker.run()
            if getattr(self, "_closing", False):
                return  # the runner closed it: its normal end
            what = exit_status_words(0)  # before the runner was done with it
        except RuntimeError as e:
            match = _EXITED.search(str(e))
            what = exit_status_words(int(match.group(1))) if match else _failed_to_start(e)
        except Exception as e:  # noqa: BLE001 - e.g. MemoryError under ulimit -v: one line
            what = _failed_to_start(e)
        line = f"SDK worker process {self.worker_id} {what}"
        with _lock:
            _deaths.append(line)
        if not getattr(self, "_closing", False):  # else the runner is ending it (a Ctrl-C)
            error = WorkerDied(line)
            self.control_conn._died = error
            self.control_conn.abort(error)

    self.worker_thread = threading.Thread(name="run_worker", target=run, daemon=True)
    self.worker_thread.start()


def _failed_to_start(error: BaseException) -> str:
    """Why the runner could not start (or wait for) a worker process, in words."""
    text = str(error).splitlines()[0] if str(error) else ""
    words = f"could not be started: {type(error).__name__}" + (f": {text}" if text else "")
    limits = memory_limit_words()
    if limits and (isinstance(error, MemoryError) or "can't start new thread" in text):
        words += f" (within the process limit: {limits})"
    return words


def _closing(close):
    def close_marked(self) -> None:
        self._closing = True
        close(self)

    close_marked.__wrapped__ = close
    return close_marked


def _aborted_push(push):
    """ControlConnection.push: a request to a worker that already died fails at once."""

    def push_checked(self, req):
        future = push(self, req)
        died = getattr(self, "_died", None)
        if died is not None and future is not None:
            future.abort(died)
        return future

    push_checked.__wrapped__ = push
    return push_checked


def _bounded_close(self) -> None:
    """Beam 2.77's ControlConnection.close, its wait for the reading thread bounded by STOP_S
    (the worker process is then stopped by `_bounded_stop`)."""
    connection = worker_handlers.ControlConnection
    with connection._lock:
        if self._state == worker_handlers.BeamFnControlServicer.STARTED_STATE:
            self.push(worker_handlers.BeamFnControlServicer._DONE_MARKER)
            self._read_thread.join(timeout=STOP_S)
        self._state = worker_handlers.BeamFnControlServicer.DONE_STATE


def _bounded_server_close(self) -> None:
    """Beam 2.77's GrpcServer.close, each server's shutdown waited for at most its grace plus
    STOP_S."""
    self.control_handler.done()
    grace = self._DEFAULT_SHUTDOWN_TIMEOUT_SECS
    servers = (self.control_server, self.data_server, self.state_server, self.logging_server)
    for stopped in [server.stop(grace) for server in servers]:
        stopped.wait(timeout=grace + STOP_S)


def install() -> None:
    """Watches every SDK worker process this process's runners start (once per process)."""
    with _lock:
        handler = worker_handlers.SubprocessSdkWorkerHandler
        if hasattr(handler.close, "__wrapped__"):
            return
        targets.check(__name__, BEAM_VERSIONS, TARGETS)
        handler.start_worker = _watched_start
        handler.stop_worker = _bounded_stop
        handler.close = _closing(handler.close)
        connection = worker_handlers.ControlConnection
        connection.push = _aborted_push(connection.push)
        _bounded_close.__wrapped__ = connection.close
        connection.close = _bounded_close
        _bounded_server_close.__wrapped__ = worker_handlers.GrpcServer.close
        worker_handlers.GrpcServer.close = _bounded_server_close
