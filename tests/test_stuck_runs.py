"""Reliability round 3, class J: a run whose runner ran out of memory or threads (`ulimit -v`) ends in one
line, never a hang (pipelines.runtime.interrupts, runner, worker_deaths).

Under a tight `ulimit -v`, Beam's runner and gRPC fail to start threads. The error ended the
thread that hit it, or gRPC logged it, and the main thread waited forever for that thread's
work; the runner's close then waited for the reader of a worker that never answers, and the
interpreter's exit for the threads left behind. Each case runs `run_main` in a child process
over a body that waits without a timeout, as the runner does, and raises the error where a
runner thread meets it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import logging, os, sys, threading, time
import pipelines
from pipelines.runtime import interrupts, runner
"""
OUT_OF_MEMORY = "error: out of memory: a process of the run could not allocate memory"


def run_child(body: str, tmp_path, timeout=60):
    """(exit code, stderr, seconds) of the child running PRELUDE + body."""
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT),
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    return done.returncode, done.stderr, time.monotonic() - start


def test_a_runner_thread_that_cannot_start_a_thread_ends_the_run(tmp_path):
    body = """
    def fails():
        raise RuntimeError("can't start new thread")  # threading.Thread.start under ulimit -v

    def main(argv):
        threading.Thread(target=fails).start()
        threading.Event().wait()  # the runner waiting for that thread's work

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path)
    assert code == 1, err
    assert err.startswith(OUT_OF_MEMORY) and len(err.strip().splitlines()) == 1, err


def test_a_memory_error_in_a_runner_thread_ends_the_run(tmp_path):
    body = """
    def fails():
        raise MemoryError

    def main(argv):
        threading.Thread(target=fails).start()
        threading.Event().wait()

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path)
    assert code == 1, err
    assert err.startswith(OUT_OF_MEMORY) and len(err.strip().splitlines()) == 1, err


def test_a_thread_that_grpc_could_not_start_ends_the_run(tmp_path):
    """gRPC's server catches the error of a response stream and logs it with its traceback."""
    body = """
    def serve():
        try:
            raise RuntimeError("can't start new thread")
        except RuntimeError:
            logging.getLogger("grpc._server").exception("Exception iterating responses")

    def main(argv):
        threading.Thread(target=serve).start()
        threading.Event().wait()

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path)
    assert code == 1, err
    # one line: the logged traceback goes to the worker log, not stderr
    assert err.startswith(OUT_OF_MEMORY) and len(err.strip().splitlines()) == 1, err
    log = err.split("(worker logs: ")[1].split(")")[0]
    assert "can't start new thread" in open(log).read()


def test_the_grpc_record_never_reaches_stderr_after_the_run(tmp_path):
    """The thread that logs goes on logging while the main thread ends the run: however slow
    it is, its record went to the worker log before the run could end."""
    body = """
    class Slow(logging.Handler):  # after the run's own: the logging thread is late
        def emit(self, record):
            time.sleep(1.0)

    def serve():
        try:
            raise RuntimeError("can't start new thread")
        except RuntimeError:
            logging.getLogger("grpc._server").exception("Exception iterating responses")

    def main(argv):
        logging.getLogger("grpc._server").addHandler(Slow())
        threading.Thread(target=serve).start()
        threading.Event().wait()

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path)
    assert code == 1, err
    assert err.startswith(OUT_OF_MEMORY) and len(err.strip().splitlines()) == 1, err


def test_threads_left_behind_do_not_hold_the_programs_exit(tmp_path):
    """A run that failed leaves a thread that never ends (not a daemon): the program still
    exits, with the run's code."""
    body = """
    pipelines.AS_PROGRAM = True  # as `python -m pipelines.sample` is
    interrupts.EXIT_S = 1.0

    def main(argv):
        threading.Thread(target=threading.Event().wait, name="left-behind").start()
        raise MemoryError

    sys.exit(runner.run_main(main, []))
    """
    code, err, took = run_child(body, tmp_path)
    assert code == 1, err
    assert err.startswith(OUT_OF_MEMORY) and len(err.strip().splitlines()) == 1, err
    assert took < 30, took
