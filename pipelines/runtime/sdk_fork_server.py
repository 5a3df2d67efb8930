"""SDK worker processes forked from one warm process, for the local runner's multi_processing.

Beam's local runner starts every SDK worker as `python -m apache_beam.runners.worker.sdk_worker_main`:
each one imports Beam, numpy, pyarrow and this project again (about 1.6 CPU-seconds and
200 MB apiece), so 8 workers on 2 cores spend most of a small run starting up, and hold 8
copies of the same modules. Here the runner starts one server that imports all that once;
each worker command is a tiny client (`sdk_fork_client.py`, standard library only) that asks
the server to fork a worker with the client's environment (the runner's control and logging
addresses, the pipeline options) and stderr, and exits with the worker's exit code. The
forked workers share the server's imported pages copy-on-write, and the kernels' machine
code that the server loaded from numba's cache (each worker would otherwise import numba and
read the cache itself, about 0.5 CPU-seconds apiece).

A CLI run as a program forks the server from itself, before its runner starts a thread
(`_ForkedServer`): the CLI has imported Beam and the project already, so the server only
loads the kernels (0.7 CPU-seconds where its own imports took 1.8). Elsewhere (a CLI's main
called in-process, a second pipeline of one process) the server is a new process:

  python -c "...; from pipelines.runtime.sdk_fork_server import serve; serve(SOCKET)" SOCKET

The server has imported gRPC but never opened a channel or started a thread of its own (the
libraries it imports start two: OpenBLAS's thread server and pyarrow's jemalloc background
thread, seen with gdb; no fork has been seen to hang on them, in 583 forks under load); it
exits when the runner closes its stdin (the runner ends, or dies), and removes its folder
however it ends (a MemoryError while it imports under `ulimit -v`, a SIGTERM).

A server that dies (killed, out of memory) costs no worker and hangs nothing: a client that
cannot reach it, or that the server leaves before it forked a worker, runs Beam's cold worker
command itself (given to it as its second argument); a worker the server forked goes on.
"""

from __future__ import annotations

import array
import contextlib
import gc
import importlib
import json
import logging
import os
import pkgutil
import selectors
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

# Ctrl-C is the runner's to handle (it closes our stdin): the server ignores SIGINT from its
# first line, before `pipelines` installs its start-up handler for CLIs; the forked workers
# take it as Beam's cold workers do.
_SERVER = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    "from pipelines.runtime.sdk_fork_server import serve; serve(sys.argv[1])"
)
CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdk_fork_client.py")
_START_TIMEOUT_S = 120
_MAX_SOCKET_DIR = 80  # AF_UNIX paths hold at most 107 bytes: the folder, "/fork.sock.tmp"


class ForkServer:
    """The server process, started by the runner; `worker_command` is what Beam runs per worker."""

    def __init__(self, log_path: str):
        """Starts the server (its errors go to `log_path`, the workers' log); it imports in the
        background until `wait_ready`."""
        self._dir = tempfile.mkdtemp(prefix="beam-graph-fork-")
        if len(self._dir) > _MAX_SOCKET_DIR and os.path.isdir("/tmp"):
            shutil.rmtree(self._dir, ignore_errors=True)  # a socket's path has ~107 bytes
            self._dir = tempfile.mkdtemp(prefix="beam-graph-fork-", dir="/tmp")
        self.socket_path = os.path.join(self._dir, "fork.sock")
        if _fork_allowed():
            self._process = _ForkedServer(self.socket_path, log_path)
            return
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-c", _SERVER, self.socket_path],
                stdin=subprocess.PIPE,
                stdout=log,  # its workers' too (the CLI's may be closed or a full device)
                stderr=log,
            )

    def wait_ready(self) -> None:
        deadline = time.time() + _START_TIMEOUT_S
        while not os.path.exists(self.socket_path):
            if self._process.poll() is not None or time.time() > deadline:
                self.stop()
                raise OSError("the SDK worker fork server did not start (see the worker log)")
            time.sleep(0.02)

    def worker_command(self, cold_command: str) -> str:
        """The command of one worker: the client, which falls back to `cold_command` (Beam's
        own worker command) when the server is gone."""
        parts = [sys.executable, "-I", CLIENT, self.socket_path, cold_command]
        return " ".join(shlex.quote(p) for p in parts)

    def alive(self) -> bool:
        return self._process.poll() is None

    def stop(self) -> None:
        if self._process.poll() is None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        shutil.rmtree(self._dir, ignore_errors=True)


_FORKED = [False]  # a server forked from this process already
_STOPS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}


def _fork_allowed() -> bool:
    """Whether the next server may be forked from this process: a CLI run as a program
    (pipelines.AS_PROGRAM; never a process that calls a CLI's main in-process), its first
    server, while its only other Python thread is the interrupt watcher (no runner has started
    Beam's threads yet), no library has started threads that a fork leaves broken (gRPC's,
    once a channel was opened: reading a BigQuery table) and /proc lists its descriptors."""
    import pipelines

    others = [t for t in threading.enumerate() if t is not threading.current_thread()]
    allowed = (
        pipelines.AS_PROGRAM
        and not _FORKED[0]
        and threading.current_thread() is threading.main_thread()
        and all(t.name == "interrupt-watcher" for t in others)
        and _only_fork_safe_native_threads()
        and os.path.isdir("/proc/self/fd")
    )
    _FORKED[0] = _FORKED[0] or allowed
    return allowed


def _only_fork_safe_native_threads() -> bool:
    """Every thread of the process is named as the main one (Python's threads, OpenBLAS's) or
    is jemalloc's background thread; gRPC's (event_engine, grpc_global_tim, lifeguard) and
    any other library's named threads are not."""
    try:
        with open("/proc/self/comm") as f:
            main = f.read().strip()
        names = set()
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as f:
                names.add(f.read().strip())
    except OSError:
        return False
    return names <= {main, "jemalloc_bg_thd"}


class _ForkedServer:
    """The server as a fork of the CLI (what subprocess.Popen gives otherwise: pid, stdin,
    poll, wait, kill). The CLI has imported Beam, numpy, pyarrow and the project already:
    the fork saves the server about 1 CPU-second of imports. The child keeps nothing of the
    CLI but its memory: its descriptors become /dev/null (an output folder's lock is not held
    by the server), its signal handlers, hooks and log handlers Python's own; it ends with
    os._exit (never the CLI's atexit functions)."""

    def __init__(self, socket_path: str, log_path: str):
        read_fd, write_fd = os.pipe()
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        for stream in (sys.stdout, sys.stderr):  # nothing of the CLI's printed twice
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        # The CLI's signal handlers must not run in the child: blocked until it has its own.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOPS)
        try:
            self.pid = os.fork()
            if self.pid == 0:
                _serve_forked(socket_path, read_fd, log_fd, blocked)  # never returns
        except OSError:  # no fork (out of processes or memory): the caller's cold workers
            for fd in (read_fd, write_fd, log_fd):
                os.close(fd)
            raise
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        os.close(read_fd)
        os.close(log_fd)
        self.stdin = os.fdopen(write_fd, "wb")  # closed: the server ends
        self.returncode = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("sdk fork server", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)


def _serve_forked(socket_path: str, stdin_fd: int, log_fd: int, mask) -> None:
    """In the CLI's forked child: the server, on `stdin_fd` and `log_fd`; never returns.
    Signals stay blocked until its handlers are in place, then `mask` is restored."""
    code = 1
    try:
        gc.freeze()  # the CLI's objects are never finalized here (their descriptors go below)
        signal.set_wakeup_fd(-1)
        for signum in signal.valid_signals():
            with contextlib.suppress(OSError, ValueError):
                signal.signal(signum, signal.SIG_DFL)
        for signum in (signal.SIGPIPE, signal.SIGXFSZ):  # as Python starts: an OSError, not death
            signal.signal(signum, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the runner's to handle, as in _SERVER
        signal.signal(signal.SIGTERM, _exit_on_sigterm)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        sys.excepthook = sys.__excepthook__
        sys.unraisablehook = sys.__unraisablehook__
        threading.excepthook = threading.__excepthook__
        from pipelines.runtime.interrupts import Interrupt

        Interrupt.active = None  # the CLI's run is not the server's, nor its workers'
        for handler in list(logging.root.handlers):
            logging.root.removeHandler(handler)
        logging.root.setLevel(logging.WARNING)
        os.dup2(stdin_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd > 2 and fd != devnull:
                os.dup2(devnull, fd)  # its number stays taken: a stale file object closes null
        sys.stdin = sys.__stdin__ = open(0, closefd=False)  # the CLI's may be None or guarded
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", buffering=1, closefd=False)
        serve(socket_path)
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the server's own failure, to the workers' log
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError, AttributeError):
                stream.flush()
        os._exit(code)


# What every SDK worker of this project imports, once, here: Beam's worker and every module
# of the project's transforms (what the workers unpickle), by name. Never the CLIs: they
# import this module (through the local runner), and the import graph has no circle.
PRELOAD_PACKAGES = ("sampler.beam",)  # sampler.beam first: gcs.prepare before any GCS client


def _preload() -> None:
    """What every worker would otherwise do for itself: the imports, Beam's DoFn
    introspection once per DoFn (each bundle processor asks twice per DoFn), and
    the kernels' machine code from numba's cache (never compiled here: a kernel the cache
    lacks is compiled by the first worker that runs it, under the machine-wide lock)."""
    import apache_beam.runners.worker.sdk_worker_main  # noqa: F401

    from pipelines.beam_patches import dofn_specs
    from sampler import jit_loader

    for package in PRELOAD_PACKAGES:
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, f"{package}."):
            importlib.import_module(info.name)
    dofn_specs.install()
    jit_loader.load_cached()
    # Arrow's own allocator (mimalloc) in a forked worker kept the pages that the tables
    # read and freed in the snapshot's build had held: at ogbn-mag's size the building
    # worker peaked at 2.4-2.5 GB against 1.9 GB in a process of its own, and 1.7 GB with
    # the system allocator, whose large blocks go back to the system when freed.
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())


def _receive(conn: socket.socket) -> tuple[dict, int]:
    """The client's environment and stderr descriptor."""
    fds = array.array("i")
    chunks = []
    while True:
        data, ancdata, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(fds.itemsize))
        for level, kind, payload in ancdata:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            break
        chunks.append(data)
        if data.endswith(b"\n"):
            break
    return json.loads(b"".join(chunks)), fds[0]


def _run_worker(env: dict, stderr_fd: int) -> None:
    """In the forked child: Beam's SDK harness with the client's environment; never returns."""
    code = 1
    try:
        os.dup2(stderr_fd, 2)
        os.close(stderr_fd)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.environ.clear()
        os.environ.update(env)
        from apache_beam.runners.worker import sdk_worker_main

        from pipelines.runtime import worker_buffers

        worker_buffers.bound()
        sdk_worker_main.main([])
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - the worker's own failure, reported on its stderr
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(socket_path: str) -> None:
    """Forks workers until the runner closes stdin; the folder goes with the server."""
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        _serve(socket_path)
    finally:
        shutil.rmtree(os.path.dirname(socket_path), ignore_errors=True)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


def _serve(socket_path: str) -> None:
    _preload()
    gc.freeze()  # the garbage collector leaves the imported objects alone: their pages stay shared
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path + ".tmp")
    listener.listen(64)
    os.rename(socket_path + ".tmp", socket_path)  # the runner waits for this name
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(0, selectors.EVENT_READ, "runner")  # stdin
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    while True:
        for key, _ in selector.select(timeout=0.05):
            if key.data == "runner":  # the runner closed our stdin (or exited): it is done
                for pid in children:
                    os.kill(pid, signal.SIGKILL)
                listener.close()
                return
            if key.data == "accept":
                conn, _ = listener.accept()
                env, stderr_fd = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    conn.close()
                    _run_worker(env, stderr_fd)
                os.close(stderr_fd)
                try:
                    conn.sendall(f"pid {pid}\n".encode())  # the client waits for this line
                except OSError:
                    pass
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            else:  # a client went away before its worker ended: end the worker too
                pid = key.data
                selector.unregister(key.fileobj)
                if pid in children:
                    os.kill(pid, signal.SIGKILL)
        for pid in list(children):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                conn = children.pop(pid)
                code = os.waitstatus_to_exitcode(status)
                try:
                    selector.unregister(conn)
                except KeyError:
                    pass
                try:
                    conn.sendall(f"{code}\n".encode())
                except OSError:
                    pass
                conn.close()
