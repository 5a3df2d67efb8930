"""Plumbing shared by the inspection tools (validate, estimate, stats, show).

Exit codes: 0 success, 1 runtime failure (a check failed, a file is unreadable...),
2 usage error (bad flags; argparse exits with 2 itself). A UserError raised by the tool
body becomes one line on stderr; whether it is a usage error or a runtime failure is
the tool's choice (`ToolFailure` for the latter).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

from pipelines.runtime.runner import run_main
from sampler.errors import UserError
from sampler.io.files import os_reason
from sampler.sample.plan import EDGE, NODE


class ToolFailure(Exception):
    """A runtime failure the tool has already explained: exit code 1, no traceback."""

    def __init__(self, message: str = ""):
        super().__init__(message)


def run_tool(body, argv=None) -> int:
    """Runs body(argv) -> exit code; UserError -> one line and 2, ToolFailure -> 1."""
    status = {"code": 0}

    def wrapped(args) -> int:
        try:
            status["code"] = body(args) or 0
        except ToolFailure as e:
            if str(e):
                print(f"error: {e}", file=sys.stderr)
            status["code"] = 1
        return status["code"]

    return run_main(wrapped, sys.argv[1:] if argv is None else argv)


@contextlib.contextmanager
def writing_to(flag: str, path: str):
    """`with writing_to("--output_dir", out):` an OS error while the tool writes its outputs
    (a file where a folder should be, a folder where a file should be, a read-only place, a
    full disk) is one line naming the flag and the place."""
    try:
        yield
    except FileExistsError as e:
        raise UserError(f"{flag} {path}: cannot write there (a file of that name exists)") from e
    except OSError as e:
        reason = os_reason(e)
        reason = reason[:1].lower() + reason[1:]
        raise UserError(f"{flag} {path}: cannot write there ({reason})") from e


def make_output_dir(flag: str, path: str) -> str:
    with writing_to(flag, path):
        os.makedirs(path, exist_ok=True)
    return path


class RowProgress:
    """`progress(table, rows)` callback printing a rate-limited line on stderr.

    On a terminal the line is redrawn in place every second; otherwise one line every
    `interval` seconds. `interval <= 0` prints nothing.
    """

    def __init__(self, what: str, interval: float = 10.0, stream=None):
        self.what = what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.interval = min(interval, 1.0) if self.tty else interval
        self.start = time.time()
        self.last = self.start
        self.rows = 0
        self.printed = False
        self._table = None
        self._base = 0

    def __call__(self, table: str, rows: int) -> None:
        if table != self._table:
            self._table, self._base = table, self.rows
        self.rows = self._base + rows
        now = time.time()
        if self.interval <= 0 or now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.start
        name = table.rsplit("/", 1)[-1]
        text = (
            f"progress: {elapsed:5.0f}s  {self.what}  {name}  rows {self.rows:,}"
            f" ({self.rows / elapsed:,.0f}/s)"
        )
        self.stream.write(("\r" + text.ljust(100)) if self.tty else text + "\n")
        self.stream.flush()
        self.printed = True

    def done(self) -> None:
        if self.tty and self.printed:
            self.stream.write("\n")
            self.stream.flush()


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} PB"


def add_graph_flags(parser, seeds_help: str) -> None:
    """The flags every tool that reads a graph and a spec shares with `pipelines.sample`."""
    parser.add_argument("--graph_schema", required=True, help="GraphSchema pbtxt or its dir.")
    parser.add_argument("--sampling_spec", required=True, help="SamplingSpec pbtxt.")
    parser.add_argument("--input_seeds", help=seeds_help)
    parser.add_argument("--edge_aggregation_method", choices=[EDGE, NODE], default=EDGE)
    parser.add_argument(
        "--seed_edge_set",
        help="For a symmetric_link_seed_op: the edge set whose edges are the seeds.",
    )
