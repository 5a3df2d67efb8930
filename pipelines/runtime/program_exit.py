"""How a CLI program's run ends: its report on a stream that cannot be written, and its exit.

* **A standard output or error that cannot be written**: a pipe whose reader is gone
  (`beam-graph sample ... | head -1`: BrokenPipeError), a full device (`>/dev/full`: ENOSPC),
  a stream closed by the shell (`>&-`, `2>&-`). The run is the point, not its report:
  `guard_streams` wraps both streams so that a failed write swallows the rest of the report
  (the descriptor then points at /dev/null, so that no later flush fails either, and the
  processes the run starts inherit /dev/null), the run goes on to write every file it owes,
  and `closed_note` is the one line that says so (on stderr, when stderr can be written).
  `reopen_closed_streams`, called first thing in a program, puts /dev/null on descriptors
  0-2 that were closed at exec: else the next file the run opens would get descriptor 1 or 2,
  and the report would be written into it.
* **The exit** (`exit_program`): a run that has ended leaves the interpreter without its
  finalization. Python resets the signal handlers to the default while it finalizes, so a
  SIGTERM or Ctrl-C in the fraction of a second after `summary:` would end the process with
  no line; here the handler of pipelines/__init__.py stays until the process is gone. The
  atexit functions run and the streams are flushed first.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import sys

# Descriptors 0-2 found closed at start (reopen_closed_streams), by number.
CLOSED_AT_START: set[int] = set()


def reopen_closed_streams() -> None:
    """/dev/null on each of descriptors 0, 1 and 2 that is closed (see the module docstring),
    and sys.stdin, sys.stdout and sys.stderr on them where Python left None."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            devnull = os.open(os.devnull, os.O_RDWR)  # the lowest free descriptor: fd itself
            if devnull != fd:
                os.dup2(devnull, fd)
                os.close(devnull)
            CLOSED_AT_START.add(fd)
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        if getattr(sys, name) is None:
            stream = open(fd, mode, closefd=False)  # noqa: SIM115 - the process's own stream
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)


class GuardedStream:
    """A text stream whose writes and flushes never raise an OS error: once one failed (the
    pipe's reader is gone, the device is full, the descriptor was closed), the rest goes to
    /dev/null and `lost` holds the error."""

    def __init__(self, stream, fd: int):
        self._stream = stream
        self._fd = fd
        self.lost: BaseException | None = None
        if fd in CLOSED_AT_START:
            self.lost = OSError(errno.EBADF, "closed")

    @property
    def closed_early(self) -> bool:
        return self.lost is not None

    def write(self, text: str) -> int:
        if self.lost is None:
            try:
                return self._stream.write(text)
            except (OSError, ValueError, AttributeError) as e:  # ValueError: a closed file
                self._lose(e)
        return len(text)

    def flush(self) -> None:
        if self.lost is None:
            try:
                self._stream.flush()
            except (OSError, ValueError, AttributeError) as e:
                self._lose(e)

    def _lose(self, error: BaseException) -> None:
        self.lost = error
        with contextlib.suppress(OSError, ValueError):  # the buffered bytes then go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._fd)
            finally:
                os.close(devnull)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard_streams() -> tuple[GuardedStream, GuardedStream]:
    """sys.stdout and sys.stderr, guarded (once); returns the guards."""
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout, 1)
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr, 2)
    return sys.stdout, sys.stderr


def unguard_streams(saved: tuple) -> None:
    """Puts back the streams `guard_streams` replaced (a caller of main() in its own process)."""
    sys.stdout, sys.stderr = saved


def closed_note() -> str | None:
    """The line that says the report was cut short by a standard output that could not be
    written, if it was."""
    if not isinstance(sys.stdout, GuardedStream) or sys.stdout.lost is None:
        return None
    from sampler.io.files import os_reason

    error = sys.stdout.lost
    if isinstance(error, BrokenPipeError):
        why = "was closed before the report ended (its reader exited)"
    elif getattr(error, "errno", None) == errno.EBADF or not isinstance(error, OSError):
        why = "was closed (the report went nowhere)"
    else:
        why = f"could not be written ({os_reason(error)}; the report went nowhere)"
    return f"note: standard output {why}; the run went on to its end"


def exit_program(code: int) -> None:
    """Ends the program with `code` now: atexit functions, streams flushed, no finalization
    (see the module's docstring)."""
    with contextlib.suppress(Exception):  # noqa: BLE001 - the exit below must happen
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(int(code))
