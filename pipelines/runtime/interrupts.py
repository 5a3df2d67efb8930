"""Signals and dead processes while a CLI runs: one line each, never a traceback or a hang.

* **Ctrl-C, SIGTERM, SIGHUP** (`Interrupt`): the first one raises KeyboardInterrupt in the main
  thread, so that the CLI bodies remove their partial output as for any failed run; run_main
  then prints one line and returns 128 + the signal (130, 143, 129). A second one, while that
  cleanup runs, exits at once.
* **A Ctrl-C that library code swallowed** (a `__del__`, a callback that catches
  BaseException): the handler records the signal before it raises, and `check_interrupted`
  (called by the CLI bodies once their pipeline has ended) and run_main (once the body has
  returned) raise it again. A signal is never lost while a run goes on.
* **A signal that reaches another thread** (the kernel gives a process's signal to any thread
  that does not block it): Python runs its handler in the main thread only once that thread
  wakes, and a main thread blocked on a lock without a timeout (the runner waiting for its
  bundles) never wakes. A watcher thread reads the signal from `signal.set_wakeup_fd` and, until
  the handler has run, wakes the main thread with WAKE sent to that thread alone.
* **A Ctrl-C swallowed while the run waits for workers it ended**: STUCK_S after the handler
  ran, if the CLI has not begun its clean-up (`cleaning`), the watcher raises KeyboardInterrupt
  in the main thread again; STUCK_S later still, it runs `on_stuck` (run_main's clean-up and
  exit), so that a signal never ends in a hang.
* **A runner thread that ran out of memory or threads** (under `ulimit -v`, Beam's runner and
  gRPC start threads whose stacks do not fit; the error ends that thread only, or gRPC logs it,
  and the main thread waits forever): `fail` records the run's one line and raises it in the
  main thread as RunFailed.
* **A dead worker process** (`WorkerDied`, raised by pipelines.runtime.worker_deaths) and **a
  MemoryError** (`memory_error_line`) become one line in run_main.
"""

from __future__ import annotations

import _thread
import contextlib
import logging
import os
import resource
import select
import signal
import sys
import threading
import time

# The signals that end a run cleanly, with the words of their line.
SIGNALS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
# Sent to the main thread alone to wake it from a wait, so that Python runs a pending handler
# there; ignored by default, and its handler here does nothing.
WAKE = signal.SIGWINCH
WAKE_S = 0.2  # how long a signal may wait for the main thread before the watcher wakes it
STUCK_S = 20.0  # how long a handled signal may wait for the CLI's clean-up (see the docstring)


def exit_code(signum: int) -> int:
    """128 + the signal, as a shell reports a process that a signal ended (130 for Ctrl-C)."""
    return 128 + int(signum)


class RunFailed(RuntimeError):
    """A failure that ends the run in one line: the message is the line run_main prints."""


class WorkerDied(RunFailed):
    """A worker process of the local runner ended while the run needed it."""


def out_of_resources(error: BaseException | None) -> bool:
    """Whether `error` says the process ran out of memory or threads: a MemoryError, or the
    `can't start new thread` of a thread whose stack did not fit (ulimit -v)."""
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and "can't start new thread" in str(error)
    )


class Interrupt:
    """SIGINT, SIGTERM and SIGHUP while a CLI runs (see the module's docstring)."""

    active: Interrupt | None = None  # the one of the run in progress, for check_interrupted

    def __init__(self, on_thread_error=None, on_stuck=None):
        self.signum: int | None = None
        self.cleaning = False  # set by the CLI once its clean-up has begun
        self._saved: dict[int, object] = {}
        self._on_thread_error = on_thread_error
        self._on_stuck = on_stuck
        self._reraise = False  # the next SIGINT handled is the watcher's (see _check_stuck)
        self._raised_again = False
        self._swallowed = False  # the handler's exception was dropped in a finalizer
        self._handled_at: float | None = None
        self._pipe: tuple[int, int] | None = None
        self._saved_wakeup_fd = -1
        self._failure: RunFailed | None = None  # to raise in the main thread (see fail)
        # Set once the run has ended (its clean-up runs): a signal then raises nothing, it is
        # kept in `deferred` and run_main reports it once the clean-up is over.
        self.ending = False
        self.deferred: int | None = None

    @property
    def seen(self) -> bool:
        return self.signum is not None

    def __enter__(self):
        self._saved_hook = threading.excepthook
        threading.excepthook = self._thread_error
        self._saved_unraisable = sys.unraisablehook
        sys.unraisablehook = self._unraisable
        for signum in [*SIGNALS, WAKE]:
            try:
                handler = self._on_signal if signum in SIGNALS else _woken
                self._saved[signum] = signal.signal(signum, handler)
            except ValueError:  # not the main thread: leave Python's own handlers
                break
        if self._saved:
            self._watch()
        Interrupt.active = self
        return self

    def _watch(self) -> None:
        """Starts the watcher thread (see the module's docstring)."""
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        self._pipe = (read_fd, write_fd)
        self._saved_wakeup_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        main = threading.main_thread().ident
        threading.Thread(
            target=self._watcher, args=(read_fd, main), name="interrupt-watcher", daemon=True
        ).start()

    def _watcher(self, read_fd: int, main: int) -> None:
        try:
            self._watch_signals(read_fd, main)
        finally:
            os.close(read_fd)

    def _watch_signals(self, read_fd: int, main: int) -> None:
        received = False
        while True:
            ready, _, _ = select.select([read_fd], [], [], WAKE_S)
            if ready:
                data = os.read(read_fd, 64)
                if not data:  # __exit__ closed the pipe: the run is over
                    return
                received = received or any(b in SIGNALS for b in data)
            if self._pipe is None:
                return
            if self._swallowed:  # the handler's exception, dropped in a finalizer
                self._swallowed = False
                self._reraise = True
                _thread.interrupt_main(self.signum or signal.SIGINT)
                with contextlib.suppress(OSError, ValueError):
                    signal.pthread_kill(main, WAKE)
            # the handler is still to run (a failure's, once raised, is not waited for)
            if received and self.signum is None and (self._failure is None or self._reraise):
                with contextlib.suppress(OSError, ValueError):
                    signal.pthread_kill(main, WAKE)
            elif self.signum is not None and not self.cleaning:
                self._check_stuck(main)

    def _check_stuck(self, main: int) -> None:
        """A signal handled STUCK_S ago without the CLI's clean-up: raise it again in the main
        thread, and after twice that, clean up from here."""
        waited = time.monotonic() - (self._handled_at or time.monotonic())
        if waited >= 2 * STUCK_S and self._on_stuck is not None:
            self._on_stuck(self.signum)
        elif waited >= STUCK_S and not self._raised_again:
            self._raised_again = self._reraise = True
            _thread.interrupt_main(self.signum)
            with contextlib.suppress(OSError, ValueError):
                signal.pthread_kill(main, WAKE)

    def fail(self, line: str) -> None:
        """From any thread: ends the run with `line` (RunFailed, raised in the main thread)
        unless a signal or another failure came first."""
        if self.signum is not None or self._failure is not None:
            return
        self._failure = RunFailed(line)
        self._reraise = True
        _thread.interrupt_main(signal.SIGINT)
        with contextlib.suppress(OSError, ValueError):
            signal.pthread_kill(threading.main_thread().ident, WAKE)

    def _on_signal(self, signum, frame):
        if self._reraise and self._failure is not None and self.signum is None:
            self._reraise = False
            raise self._failure
        if self._reraise:  # the watcher's second try (see _check_stuck)
            self._reraise = False
            raise KeyboardInterrupt
        if self.signum is not None:
            from pipelines.outputs import output_lock

            output_lock.release_all()  # the folder is free again (its marker is removed)
            os._exit(exit_code(self.signum))
        self.signum = signum
        self._handled_at = time.monotonic()
        if self.ending:
            self.deferred = signum
            self.cleaning = True  # the watcher has nothing to raise again
            return
        # Local worker processes (multi_processing) get a Ctrl-C from the terminal with the
        # whole process group, but not a signal sent to this process alone: end them, else
        # the runner's cleanup waits for them forever.
        end_child_processes(signal.SIGTERM)
        raise KeyboardInterrupt

    def _unraisable(self, unraisable) -> None:
        """The handler's KeyboardInterrupt (or failure) raised inside a finalizer, where Python
        cannot raise it (a signal that lands in an llvmlite object's __del__): Python would
        print it as "Exception ignored in" with a traceback, and drop it. It is raised again in
        the main thread within WAKE_S instead (not from here: raised in this hook, it would be
        dropped again), with no traceback."""
        error = unraisable.exc_value
        if (isinstance(error, KeyboardInterrupt) and self.signum is not None) or (
            error is not None and error is self._failure
        ):
            self._swallowed = True  # the watcher raises it again, from its thread
            return
        self._saved_unraisable(unraisable)

    def _thread_error(self, args):
        """An error that ends one of the runner's threads (e.g. its worker processes ended by the
        same Ctrl-C) goes to the worker log, not stderr: the main thread reports the run's."""
        if args.exc_type is SystemExit:
            return
        if self._on_thread_error is not None:
            self._on_thread_error(args)
        if out_of_resources(args.exc_value):
            self.fail(memory_error_line())

    def __exit__(self, *exc):
        threading.excepthook = self._saved_hook
        sys.unraisablehook = self._saved_unraisable
        if self._pipe is not None:
            signal.set_wakeup_fd(self._saved_wakeup_fd)
            read_fd, write_fd = self._pipe
            self._pipe = None
            os.close(write_fd)  # the watcher reads the end of the pipe and returns
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)
        Interrupt.active = None
        return False


def _woken(signum, frame) -> None:
    """WAKE's handler: the signal has done its work by interrupting the main thread's wait."""


EXIT_S = 20.0  # how long threads that a run left behind may hold the program's exit


def guard_exit(code: int | None) -> None:
    """Called where a CLI program's run has ended with `code`: a thread that the run's
    libraries left behind (Beam's reader of a worker's control stream, after a run that failed
    in the runner) would hold the interpreter's exit forever; EXIT_S from now the process ends
    anyway, with the same code (the run's line is already printed)."""
    code = int(code or 0)

    def end() -> None:
        time.sleep(EXIT_S)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(code)

    threading.Thread(target=end, name="exit-guard", daemon=True).start()


def check_interrupted() -> None:
    """Raises KeyboardInterrupt if a signal came during the run, also one that library code
    caught and dropped: called where a CLI body commits its output."""
    if Interrupt.active is not None and Interrupt.active.seen:
        raise KeyboardInterrupt


def log_thread_error(logger_name: str):
    """The excepthook of Interrupt's threads: the error goes to `logger_name` (the worker log)."""

    def log(args) -> None:
        logging.getLogger(logger_name).error(
            "thread %s ended", getattr(args.thread, "name", "?"),
            exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
        )  # fmt: skip

    return log


def child_processes() -> list[int]:
    """The ids of this process's descendants (Linux /proc; [] where there is none)."""
    return descendants(os.getpid())


def descendants(root: int) -> list[int]:
    """The ids of `root`'s descendants (Linux /proc; [] where there is none)."""
    parents: dict[int, list[int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents.setdefault(int(fields[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def end_child_processes(sig: int, wait_s: float = 0.0) -> None:
    """Sends `sig` to every descendant; with `wait_s`, then waits that long for them to end
    and kills what is left (no orphan outlives an interrupted run)."""
    for pid in child_processes():
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    deadline = time.monotonic() + wait_s
    while wait_s and child_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    if wait_s:
        for pid in child_processes():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def print_line(line: str) -> None:
    """`line` on stderr; a terminal that hung up (SIGHUP) may have no stderr left."""
    with contextlib.suppress(OSError, ValueError):
        print(line, file=sys.stderr, flush=True)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status_words(code: int) -> str:
    """How a worker process ended during the run, in words: Popen's -N and a shell's 128+N
    are signals."""
    if code < 0 or 128 < code < 128 + 65:
        signum = -code if code < 0 else code - 128
        words = f"was killed by {signal_name(signum)} during the run"
        if signum == signal.SIGKILL:
            words += " (the kernel's out-of-memory killer sends SIGKILL: see `dmesg`)"
        return words
    return f"exited with code {code} during the run"


def memory_error(error: BaseException) -> bool:
    """Whether `error` is a MemoryError, also one a runner re-raised from a worker as text."""
    seen = error
    while seen is not None:
        if out_of_resources(seen) or "MemoryError" in str(seen).split("\n", 1)[0]:
            return True
        seen = seen.__cause__ or seen.__context__
    return "\nMemoryError" in str(error)


def memory_limit_words() -> str:
    """The process limits that make allocations fail before the machine's memory is used up."""
    parts = []
    for name, limit in (("ulimit -v", resource.RLIMIT_AS), ("ulimit -d", resource.RLIMIT_DATA)):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            parts.append(f"{name} {soft // 1024:,} kB")
    cgroup = cgroup_limit_bytes()
    if cgroup is not None:
        parts.append(f"cgroup memory.max {cgroup >> 20:,} MB")
    return ", ".join(parts)


def memory_error_line() -> str:
    limits = memory_limit_words()
    where = f"the process limit ({limits})" if limits else "the machine's memory"
    return (
        f"out of memory: a process of the run could not allocate memory within {where}; "
        "raise the limit, or use fewer workers (--direct_num_workers) or a placement that holds "
        "less per worker (--graph_placement sharded)"
    )


def cgroup_limit_bytes() -> int | None:
    """memory.max of this process's cgroup (v2) less what it uses, or None when unlimited."""
    try:
        with open("/proc/self/cgroup", encoding="ascii") as f:
            paths = [line.rstrip("\n").split(":", 2)[2] for line in f if line.startswith("0::")]
        if not paths:
            return None
        folder = "/sys/fs/cgroup" + paths[0]
        with open(os.path.join(folder, "memory.max"), encoding="ascii") as f:
            text = f.read().strip()
        if text == "max":
            return None
        with open(os.path.join(folder, "memory.current"), encoding="ascii") as f:
            used = int(f.read().strip())
        return max(0, int(text) - used)
    except (OSError, ValueError, IndexError):
        return None


def process_limit_mb() -> int | None:
    """What this process may still allocate under its own limits, in MB (None: no limit):
    RLIMIT_AS less its address space now, RLIMIT_DATA less its data now, and the cgroup's
    memory.max less its use."""
    room: list[int] = []
    status = _proc_status_kb()
    for limit, used_key in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            room.append(max(0, soft - status.get(used_key, 0) * 1024))
    cgroup = cgroup_limit_bytes()
    if cgroup is not None:
        room.append(cgroup)
    return min(room) >> 20 if room else None


def _proc_status_kb() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if value.strip().endswith("kB"):
                    out[key] = int(value.split()[0])
    except OSError:
        pass
    return out
