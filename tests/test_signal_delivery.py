"""A signal ends a CLI's run in one line wherever the kernel delivers it and whatever the run's
libraries do with the KeyboardInterrupt (pipelines.runtime.interrupts' watcher).

Each case runs `run_main` in a child process over a body that waits without a timeout, as
Beam's runner waits for its bundles. The kernel gives a process's signal to any thread that does
not block it: the body blocks SIGINT in its main thread, so that the signal lands on another
thread, which is what made `test_interrupts.py`'s Ctrl-C test hang about once in ten runs on a
loaded machine (the main thread never woke to run the handler).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PRELUDE = """
import os, signal, sys, threading, time
from pipelines.runtime import interrupts, runner

interrupts.STUCK_S = 1.0  # the watcher's grace, short for the test
"""


def run_child(body: str, tmp_path, sig=signal.SIGINT, timeout=60):
    """Starts the child, waits for its "ready" line, sends `sig` to the process, and returns
    (exit code, stderr, seconds from the signal to the exit)."""
    script = tmp_path / "child.py"
    script.write_text(PRELUDE + textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path / "out")],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout.readline().strip() == "ready", proc.stderr.read()
        sent = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=timeout)
        return proc.returncode, err, time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_signal_on_another_thread_wakes_the_waiting_main_thread(tmp_path):
    body = """
    def main(argv):
        # a thread that may take the signal, started before the main thread blocks it
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        print("ready", flush=True)
        threading.Event().wait()  # a lock acquired without a timeout

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path)
    assert code == 130, err
    assert err.strip() == "error: interrupted (Ctrl-C); nothing written", err


def test_sigterm_on_another_thread_too(tmp_path):
    body = """
    def main(argv):
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        print("ready", flush=True)
        threading.Event().wait()

    sys.exit(runner.run_main(main, []))
    """
    code, err, _ = run_child(body, tmp_path, sig=signal.SIGTERM)
    assert code == 143, err
    assert err.strip() == "error: interrupted (SIGTERM); nothing written", err


def test_a_swallowed_interrupt_still_ends_the_run_and_removes_its_output(tmp_path):
    """A body that catches every KeyboardInterrupt and waits again (a library that drops it
    while the runner waits for workers the signal ended): the watcher raises it again, then
    cleans up and exits, instead of a hang."""
    body = """
    def main(argv):
        out = argv[0] if argv else sys.argv[1]
        os.makedirs(out)
        open(os.path.join(out, "part-0"), "w").write("partial")
        runner.note_output(out, lambda: os.remove(os.path.join(out, "part-0")))
        caught = 0
        while True:
            try:
                if not caught:
                    print("ready", flush=True)  # in the try: the signal may come at once
                threading.Event().wait()
            except KeyboardInterrupt:
                caught += 1
                print(f"swallowed {caught}", file=sys.stderr, flush=True)

    sys.exit(runner.run_main(main, sys.argv[1:]))
    """
    code, err, took = run_child(body, tmp_path)
    lines = err.strip().splitlines()
    assert code == 130, err
    # the handler's KeyboardInterrupt and the watcher's second try were both swallowed
    assert lines[:2] == ["swallowed 1", "swallowed 2"], err
    assert lines[2].startswith("error: interrupted (Ctrl-C); the run's partial output in"), err
    assert len(lines) == 3, err
    assert not (tmp_path / "out" / "part-0").exists()
    assert took < 30, took  # 2 x STUCK_S (1 s here) and the clean-up, far from a hang


def test_a_signal_in_a_finalizer_ends_the_run_in_one_line(tmp_path):
    """A signal that lands while a finalizer runs (an llvmlite object's __del__, freed by the
    garbage collector anywhere in a run): Python cannot raise the handler's KeyboardInterrupt
    there, prints it as "Exception ignored in" with a traceback and drops it. The run still
    ends in its one line, at once (STUCK_S is 600 s here: no help from the watcher), and
    nothing else."""
    body = """
    interrupts.STUCK_S = 600.0

    class Finalized:
        def __del__(self):
            print("ready", flush=True)
            time.sleep(30)  # the signal comes in here

    def main(argv):
        Finalized()  # freed at once: its __del__ runs
        time.sleep(60)  # where the run is when the interrupt is raised again

    sys.exit(runner.run_main(main, []))
    """
    code, err, took = run_child(body, tmp_path, sig=signal.SIGTERM)
    assert code == 143, err
    assert err.strip() == "error: interrupted (SIGTERM); nothing written", err
    assert took < 25, took  # not the finalizer's 30 s, nor the body's 60 s
