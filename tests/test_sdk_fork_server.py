"""The local runner's SDK worker fork server (pipelines.runtime.sdk_fork_server) outside a pipeline."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipelines.runtime import sdk_fork_server


def test_a_long_temp_folder_still_gives_a_socket_path_that_fits(tmp_path, monkeypatch):
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr("tempfile.tempdir", None)
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    try:
        server.wait_ready()
        assert len((server.socket_path + ".tmp").encode()) < 108
        folder = os.path.dirname(server.socket_path)
        assert os.path.exists(server.socket_path)
    finally:
        server.stop()
    assert not os.path.exists(folder)


def test_a_client_gets_the_exit_code_of_its_forked_worker(tmp_path):
    """The client relays the forked worker's exit code: a worker without a runner to talk to
    fails (Beam's harness needs CONTROL_API_SERVICE_DESCRIPTOR), and so does the client."""
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    try:
        server.wait_ready()
        env = {k: v for k, v in os.environ.items() if "SERVICE_DESCRIPTOR" not in k}
        done = subprocess.run(
            [sys.executable, "-I", sdk_fork_server.CLIENT, server.socket_path],
            env=env,
            capture_output=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert done.returncode == 1, done
    assert b"CONTROL_API_SERVICE_DESCRIPTOR" in done.stderr  # the worker's own error, relayed


# What a worker forked from the server starts with: the server's state after _preload().
PRELOADED = """
import json, sys
import numba
from apache_beam.transforms import userstate
from pipelines.runtime import sdk_fork_server
from sampler import jit_loader

sdk_fork_server._preload()
kernels = [
    v for name in jit_loader.kernel_modules() if name in sys.modules
    for v in vars(sys.modules[name]).values()
    if isinstance(v, numba.core.dispatcher.Dispatcher) and v.py_func.__module__ == name
]
print(json.dumps({
    "modules": sorted(name for name in jit_loader.kernel_modules() if name in sys.modules),
    "with_machine_code": sorted(k.py_func.__qualname__ for k in kernels if k.overloads),
    "compiled": sum(sum(k.stats.cache_misses.values()) for k in kernels),
    "dofn_specs_remembered": hasattr(userstate.get_dofn_specs, "__wrapped__"),
    "arrow_pool": __import__("pyarrow").default_memory_pool().backend_name,
}))
"""


def _preloaded(env: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PRELOADED], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_the_workers_start_with_the_kernels_loaded_and_the_dofn_specs_remembered():
    """Each forked worker would otherwise import numba, read every kernel it runs from the
    cache and inspect each DoFn twice per bundle processor, all on its own."""
    from sampler import jit_loader

    jit_loader.warm_all()  # the install's cache (scripts/bootstrap.sh): loaded, not compiled
    state = _preloaded(dict(os.environ))
    assert state["modules"] == jit_loader.kernel_modules()
    assert {"fingerprints", "pick_uniform", "chunk_edges", "write_into"} <= set(
        state["with_machine_code"]
    )
    assert state["compiled"] == 0
    assert state["dofn_specs_remembered"]
    # Arrow's mimalloc pool kept the freed pages of the tables read in a forked worker (the
    # snapshot's builder peaked 2.4-2.5 GB at ogbn-mag's size, 1.7 GB with the system's)
    assert state["arrow_pool"] == "system"


def test_the_server_compiles_no_kernel_that_the_cache_lacks(tmp_path):
    """An empty cache: the server starts without compiling (the first worker that runs a
    kernel compiles them all, under the machine-wide lock), so it is ready at once."""
    state = _preloaded({**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)})
    assert state["with_machine_code"] == []
    assert state["compiled"] == 0
    assert not list(tmp_path.rglob("*.nbi"))  # nothing written to the cache


# A CLI run as a program (pipelines.AS_PROGRAM) forks its server: what the server keeps of it.
FORKED_FROM_A_CLI = """
import fcntl, json, logging, os, signal, subprocess, sys
import pipelines
pipelines.AS_PROGRAM = True  # as `python -m pipelines.X` sets it
from pipelines.runtime import sdk_fork_server

log, lock_path, grpc_first = sys.argv[1], sys.argv[2], sys.argv[3] == "grpc"
if grpc_first:  # a gRPC channel opened before the pipeline (a BigQuery read): its threads
    import grpc
    channel = grpc.insecure_channel("localhost:1")
lock = open(lock_path, "w")
fcntl.flock(lock, fcntl.LOCK_EX)  # as an output folder's lock
logging.getLogger().addHandler(logging.StreamHandler(sys.stdout))  # the CLI's own handler
print("the CLI's line", end="")  # unflushed at the fork
server = sdk_fork_server.ForkServer(log)
server.wait_ready()
pid = server._process.pid
lock.close()  # the CLI lets go: nobody else may hold the lock now
again = open(lock_path, "w")
try:
    fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)
    free = True
except BlockingIOError:
    free = False
env = {k: v for k, v in os.environ.items() if "SERVICE_DESCRIPTOR" not in k}
worker = subprocess.run([sys.executable, "-I", sdk_fork_server.CLIENT, server.socket_path],
                        env=env, capture_output=True, timeout=120)
with open(f"/proc/{pid}/cmdline", "rb") as f, open("/proc/self/cmdline", "rb") as g:
    forked = f.read() == g.read()
with open(f"/proc/{pid}/status") as f:
    ignored = int(next(l.split()[1] for l in f if l.startswith("SigIgn:")), 16)
pipe_ignored = bool(ignored >> (signal.SIGPIPE - 1) & 1)  # as Python starts
server.stop()
print(json.dumps({"forked": forked, "lock_free": free, "pipe_ignored": pipe_ignored, "worker_code": worker.returncode,
                  "worker_err": worker.stderr.decode()[-2000:], "server_code": server._process.returncode}))
"""


@pytest.mark.parametrize("before", ["nothing", "grpc"])
def test_a_cli_program_forks_its_server_which_keeps_no_descriptor_of_it(tmp_path, before):
    """The server forked from the CLI (no second import of Beam): it holds none of the CLI's
    descriptors (an output folder's lock goes when the CLI lets go), prints nothing of the
    CLI's twice, ignores SIGPIPE as Python does (a client gone must not kill it or its
    workers), forks working workers and ends with the runner. Fails on the exec'd server
    (not a fork) and on a fork that keeps the CLI's descriptors (the lock stays held). Once
    gRPC's threads run in the CLI, the server is a process of its own (a fork would inherit
    gRPC's state without its threads), and works the same."""
    log = tmp_path / "workers.log"
    done = subprocess.run(
        [sys.executable, "-c", FORKED_FROM_A_CLI, str(log), str(tmp_path / "lock"), before],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the CLI's line{") and done.stdout.count("the CLI's line") == 1
    report = json.loads(done.stdout[len("the CLI's line") :])
    assert report["forked"] == (before == "nothing") and report["lock_free"], report
    assert report["pipe_ignored"], report  # a client gone is an OSError to it, not its death
    assert report["worker_code"] == 1, report  # Beam's harness without a runner: its own error
    assert "CONTROL_API_SERVICE_DESCRIPTOR" in report["worker_err"], report
    assert report["server_code"] == 0, report
    assert "the CLI's line" not in log.read_text()
