"""Where the compiled kernels are cached, and the machine-wide lock under which they compile
(no numba here: the CLIs and the progress line use it without loading the compiler).

The cache is numba's: beside the source (`__pycache__`), or, when the package is read-only
(site-packages on a worker), in the user's cache folder; when neither can be written, in a
temporary folder that the processes of one run share (the CLI makes it before it starts its
SDK workers, who find it in RUN_ENV) and that the run removes when it ends (`end_run`, from
pipelines.runtime.runner.run_main; at exit for a process outside a CLI): such a run compiles
the kernels once, and says why. NUMBA_CACHE_DIR overrides.

What a process says about the kernels (compiling, a damaged cache) goes to its stderr, and
from the SDK worker processes of a local run (whose stderr is a log file) to the run's CLI,
through the file NOTICES_ENV names, which the CLI relays (`relay`) once per distinct line.

A kernel's index file (which signatures it has machine code of, and in which data file) is
rewritten by every process that saves a signature: numba reads it, adds one, writes it back,
without a lock, so two processes that save at once (workers that compile a signature the cache
lacks, or a run that bypassed the compile lock below) lose each other's entries or give two
signatures one data file. `index_lock` makes each such update one at a time.

One process compiles at a time (`machine_lock`): processes that start together on a cold
cache (the SDK workers of a first run) wait for it and then load what it compiled. A lock held
longer than BEAM_GRAPH_COMPILE_WAIT_S seconds (default 120: a stuck or stopped earlier run) is
reported in one line and bypassed: the run compiles for itself.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import functools
import os
import shutil
import sys
import tempfile
import time

from sampler import settings
from sampler.errors import UserError
from sampler.io import no_follow

PACKAGE = os.path.dirname(os.path.abspath(__file__))
LOCK_NAME = ".sampler-compile.lock"
INDEX_LOCK_NAME = ".sampler-index.lock"  # in each folder of kernel files (index_lock)
WAIT_ENV = settings.COMPILE_WAIT_S
RUN_ENV = "BEAM_GRAPH_RUN_KERNEL_CACHE"  # the temporary cache of this run (chosen_folder)
NOTICES_ENV = "BEAM_GRAPH_KERNEL_NOTICES"  # "PID:PATH": the lines for the run's CLI (relay)
_RUN = {"created": None, "notices": None, "offset": 0, "said": set(), "compiling": False}
_RUN["index_unlocked"] = False  # index_lock waited its limit once in this process


def _writable(path: str) -> bool:
    probe = path
    while not os.path.exists(probe):  # a folder not made yet: its first existing parent
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK | os.X_OK)


@functools.cache
def chosen_folder() -> str | None:
    """The folder to cache in when numba's own choices (beside the source) are not writable,
    else None. Decided once, before numba loads; a temporary folder is removed at exit."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    if _writable(os.path.join(PACKAGE, "__pycache__")):
        return None
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if _writable(user):
        return os.path.join(user, "beam-graph-sampler", "numba")
    shared = os.environ.get(RUN_ENV)
    if shared and os.path.isdir(shared):  # the run's, made by its CLI (which removes it)
        return shared
    folder = tempfile.mkdtemp(prefix="sampler-numba-")
    _RUN["created"] = folder
    os.environ[RUN_ENV] = folder  # for the processes this one starts from now on
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # (a CLI: end_run)
    return folder


def temporary() -> bool:
    """Whether the cache is a run's temporary folder: the install's cache is read-only."""
    return bool(os.environ.get(RUN_ENV)) and folder() == os.environ[RUN_ENV]


def folder() -> str:
    """The cache's root: NUMBA_CACHE_DIR, the chosen folder, or the package's __pycache__."""
    return (
        os.environ.get("NUMBA_CACHE_DIR") or chosen_folder() or os.path.join(PACKAGE, "__pycache__")
    )


def lock_path() -> str:
    return os.path.join(folder(), LOCK_NAME)


def warn(message: str) -> None:
    """One line on stderr (and so in a Beam worker's log), relayed by the run's CLI."""
    say(f"warning: {message}")


def say(line: str) -> None:
    """`line` on stderr, and for the run's CLI when this process is one of its workers."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
    _RUN["said"].add(line)  # (the run's CLI: not relayed again)
    owner, _, path = os.environ.get(NOTICES_ENV, "").partition(":")
    if path and owner != str(os.getpid()):
        with contextlib.suppress(OSError):  # (one short write: lines of processes never mix)
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
            try:
                os.write(fd, (line + "\n").encode())
            finally:
                os.close(fd)


def say_compiling(quiet: bool = False) -> None:
    """Says, once per process, that it compiles kernels (sampler.jit sees each compile)."""
    if _RUN["compiling"]:
        return
    _RUN["compiling"] = True
    if quiet:
        return
    if temporary():
        say("progress: compiling the kernels (about a minute, in every run: the install's"
            f" kernel cache {os.path.join(PACKAGE, '__pycache__')} is read-only; compile them"
            " when installing, `python -m sampler.jit_warm`, or set NUMBA_CACHE_DIR to a"
            " writable folder)")  # fmt: skip
    else:
        say(f"progress: compiling the kernels into the cache {folder()} (once per machine,"
            " about a minute; `python -m sampler.jit_warm` does it at install)")  # fmt: skip


def start_run() -> None:
    """A CLI's run starts: its workers' lines come to a file of its own (relay)."""
    with contextlib.suppress(OSError):
        fd, path = tempfile.mkstemp(prefix="beam_graph_kernels_", suffix=".txt")
        os.close(fd)
        _RUN.update(notices=path, offset=0)
        os.environ[NOTICES_ENV] = f"{os.getpid()}:{path}"


def relay() -> list[str]:
    """The workers' lines that arrived since the last call, each distinct line once."""
    path = _RUN["notices"]
    if path is None:
        return []
    try:
        with open(path, "rb") as f:
            f.seek(_RUN["offset"])
            data = f.read()
    except OSError:
        return []
    data = data[: data.rfind(b"\n") + 1]  # whole lines only
    _RUN["offset"] += len(data)
    lines = []
    for line in data.decode(errors="replace").splitlines():
        if line not in _RUN["said"]:
            _RUN["said"].add(line)
            lines.append(line)
    return lines


def end_run() -> None:
    """A CLI's run ends: the workers' last lines on stderr; the run's temporary cache, if this
    process made it, and the file of lines removed."""
    for line in relay():
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    path, _RUN["notices"] = _RUN["notices"], None
    if path is not None:
        with contextlib.suppress(OSError):
            os.remove(path)
        os.environ.pop(NOTICES_ENV, None)
    made, _RUN["created"] = _RUN["created"], None
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        if os.environ.get(RUN_ENV) == made:
            os.environ.pop(RUN_ENV)
        chosen_folder.cache_clear()


def compiling() -> bool:
    """Whether a process holds the compile lock now (it compiles, or waits to)."""
    try:
        fd = os.open(lock_path(), os.O_RDONLY | os.O_NONBLOCK)  # never waits on a FIFO
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # (closing releases a shared lock it took)
    return False


@contextlib.contextmanager
def machine_lock():
    """The compile lock, exclusive; no lock where it can't be made (a read-only or full
    folder), and none once it has been held by another process for BEAM_GRAPH_COMPILE_WAIT_S."""
    try:
        os.makedirs(folder(), exist_ok=True)
        fd = no_follow.open_regular(lock_path(), os.O_RDWR | os.O_CREAT, 0o666)  # a FIFO: one line
    except OSError:
        yield
        return
    try:
        held = _acquire(fd, settings.seconds(WAIT_ENV))
        if held:
            with contextlib.suppress(OSError):  # the holder's pid, for whoever waits on it
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def index_lock(cache_path: str):
    """Held (exclusive) while this process updates a kernel's index and data files in
    `cache_path` (a few milliseconds); none where it can't be made, and none once another
    process has held it for BEAM_GRAPH_COMPILE_WAIT_S (a stopped process), said in one line."""
    try:
        os.makedirs(cache_path, exist_ok=True)
        path = os.path.join(cache_path, INDEX_LOCK_NAME)
        fd = no_follow.open_regular(path, os.O_RDWR | os.O_CREAT, 0o666)
    except (OSError, UserError):  # (a read-only or full folder: the save says so, or a FIFO)
        yield
        return
    try:
        wait = 0.0 if _RUN["index_unlocked"] else settings.seconds(WAIT_ENV)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:  # once per process: later saves don't wait
                    if not _RUN["index_unlocked"]:
                        _RUN["index_unlocked"] = True
                        warn(f"the kernel cache lock {path} has been held for {wait:g} s by"
                             f" another process: saving without it ({WAIT_ENV} sets the wait)")  # fmt: skip
                    break
                time.sleep(0.005)
        yield
    finally:
        os.close(fd)  # releases the lock


def _acquire(fd: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
    warn(
        f"the kernel compile lock {lock_path()} has been held for {wait:g} s by another"
        f" process (pid {holder}): compiling without it ({WAIT_ENV} sets the wait)"
    )
    return False
