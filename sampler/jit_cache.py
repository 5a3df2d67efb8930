"""Where the compiled kernels are cached, and the machine-wide lock under which they compile
(no numba here: the CLIs and the progress line use it without loading the compiler).

The cache is numba's: beside the source (`__pycache__`), or, when the package is read-only
(site-packages on a worker), in the user's cache folder; when neither can be written, in a
temporary folder removed at exit (the run then compiles again). NUMBA_CACHE_DIR overrides.

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

from sampler.io import no_follow

PACKAGE = os.path.dirname(os.path.abspath(__file__))
LOCK_NAME = ".sampler-compile.lock"
WAIT_ENV = "BEAM_GRAPH_COMPILE_WAIT_S"


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
    folder = tempfile.mkdtemp(prefix="sampler-numba-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # nothing left in TMPDIR
    return folder


def folder() -> str:
    """The cache's root: NUMBA_CACHE_DIR, the chosen folder, or the package's __pycache__."""
    return (
        os.environ.get("NUMBA_CACHE_DIR") or chosen_folder() or os.path.join(PACKAGE, "__pycache__")
    )


def lock_path() -> str:
    return os.path.join(folder(), LOCK_NAME)


def warn(message: str) -> None:
    """One line on stderr (and so in a Beam worker's log)."""
    sys.stderr.write(f"warning: {message}\n")
    sys.stderr.flush()


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
        held = _acquire(fd, float(os.environ.get(WAIT_ENV) or 120))
        if held:
            with contextlib.suppress(OSError):  # the holder's pid, for whoever waits on it
                os.ftruncate(fd, 0)
                os.pwrite(fd, str(os.getpid()).encode(), 0)
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
