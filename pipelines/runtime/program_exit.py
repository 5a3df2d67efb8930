"""How a CLI program's run ends: its report on a closed pipe, and its exit.

* **A closed standard output or error** (`beam-graph sample ... | head -1`): the reader of the
  pipe is gone, and the next write raises BrokenPipeError. The run is the point, not its
  report: `guard_streams` wraps both streams so that a closed one swallows the rest of the
  report (its descriptor then points at /dev/null, so that no later flush fails either), the
  run goes on to write every file it owes, and `closed_note` is the one line that says so.
* **The exit** (`exit_program`): a run that has ended leaves the interpreter without its
  finalization. Python resets the signal handlers to the default while it finalizes, so a
  SIGTERM or Ctrl-C in the fraction of a second after `summary:` would end the process with
  no line; here the handler of pipelines/__init__.py stays until the process is gone. The
  atexit functions run and the streams are flushed first.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys


class GuardedStream:
    """A text stream whose writes and flushes never raise BrokenPipeError: once the reader is
    gone, the rest goes to /dev/null and `closed` is set."""

    def __init__(self, stream):
        self._stream = stream
        self.closed_early = False

    def write(self, text: str) -> int:
        if not self.closed_early:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._lose()
        return len(text)

    def flush(self) -> None:
        if not self.closed_early:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._lose()

    def _lose(self) -> None:
        self.closed_early = True
        with contextlib.suppress(OSError, ValueError):  # the buffered bytes then go nowhere
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self._stream.fileno())
            finally:
                os.close(devnull)
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def guard_streams() -> tuple[GuardedStream, GuardedStream]:
    """sys.stdout and sys.stderr, guarded (once); returns the guards."""
    if not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout)
    if not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr)
    return sys.stdout, sys.stderr


def unguard_streams(saved: tuple) -> None:
    """Puts back the streams `guard_streams` replaced (a caller of main() in its own process)."""
    sys.stdout, sys.stderr = saved


def closed_note() -> str | None:
    """The line that says the report was cut short by a closed standard output, if it was."""
    if isinstance(sys.stdout, GuardedStream) and sys.stdout.closed_early:
        return (
            "note: standard output was closed before the report ended (its reader exited);"
            " the run went on to its end"
        )
    return None


def exit_program(code: int) -> None:
    """Ends the program with `code` now: atexit functions, streams flushed, no finalization
    (see the module's docstring)."""
    with contextlib.suppress(Exception):  # noqa: BLE001 - the exit below must happen
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(int(code))
