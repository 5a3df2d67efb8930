"""Progress of a sampling run while it runs, and the summary of its Beam counters at the end.

* `CountOutput`: a pass-through step before Write that counts the subgraphs for the
  progress line. The records are not changed.
* `Progress`: a context manager. Every `interval` seconds it prints one line to stderr,
  `progress: 12s  stage Sample/Op/seed->paper  subgraphs 1,234 (102/s)`, or
  `progress: 12s  compiling the kernels (once per machine)` while a process of this machine
  compiles them (sampler/jit_cache.py); on a terminal the line is redrawn in place every
  second instead. Before each line, and when the pipeline ends, what the SDK worker
  processes said about the kernels (compiling them, and why; a damaged cache), each once. The stage comes from the local
  runner's log of the bundle it runs; the count from `CountOutput` (same process), or
  from the runner's metrics for a remote job (whose stage is the job state). With
  `--direct_running_mode=multi_processing` the workers are other processes: the line
  shows the stage, and the count only at the end.
* `summary_lines`: mean nodes and edges per set, bad records, and time per stage when
  the runner reports it (the local runner does; Dataflow shows it in its console).
"""

from __future__ import annotations

import collections
import logging
import re
import sys
import threading
import time

import apache_beam as beam

from sampler import jit_cache

NAMESPACE = "sampler"
_FN_RUNNER_LOGGER = "apache_beam.runners.portability.fn_api_runner.fn_runner"
_STAGE = re.compile(r"([A-Z][A-Za-z]*/[^()+]+)")
# Sub-transforms of ReadGraph / Sample that exist once per op, node set or edge set.
_PER_NAME_GROUPS = {
    "Op", "Nodes", "Induced", "ReadEdges", "ReadNodes", "NodeTable", "Adjacency", "Requests",
}  # fmt: skip
_EXECUTION_TIME = "ptransform_execution_time:total_msecs:v1"
# Counters of rows that were unreadable (and skipped under --max_bad_records) or dropped.
BAD_RECORD_COUNTERS = (
    "bad_records",
    "duplicate_node_ids",
    "seeds_not_in_node_set",
    "nodes_not_in_node_set",
    "edges_with_missing_endpoint",
)


class _LocalCount:
    """Records that passed CountOutput in this process (the local runner's workers)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.value = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.value += n


LOCAL_COUNT = _LocalCount()


def count_records(n: int) -> None:
    """Counts `n` records written in this process (the progress line's count)."""
    LOCAL_COUNT.add(n)


class CountOutput(beam.DoFn):
    """Pass-through before Write: counts the records for the progress line.

    The per-set `output_nodes/<set>` and `output_edges/<set>` counters come from the
    sampling DoFns, which know the sizes without parsing the records again.
    """

    def process(self, batch):
        count_records(len(batch[2]))  # (bucket, chunk, [records])
        yield batch


def stage_label(name: str) -> str | None:
    """'Sample/Op/seed->paper' from a fused stage name of the local runner."""
    match = _STAGE.search(name)
    if not match:
        return None
    return "/".join(match.group(1).split("/")[:3])


class _StageHandler(logging.Handler):
    """Catches the local runner's 'Running bundle for stage' debug lines; forwards warnings."""

    def __init__(self, progress: Progress):
        super().__init__(logging.DEBUG)
        self._progress = progress

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            logging.getLogger().handle(record)
            return
        if isinstance(record.msg, str) and record.msg.startswith("Running bundle for stage"):
            label = stage_label(str(record.args[0])) if record.args else None
            if label:
                self._progress.stage = label


class Progress:
    """Periodic progress lines on stderr while a pipeline runs (see the module docstring)."""

    def __init__(self, interval: float, stream=None, what: str = "subgraphs"):
        self.interval = float(interval)
        self.stream = stream if stream is not None else sys.stderr
        self.what = what
        self.stage = "starting"
        self.result = None  # a remote job's PipelineResult, polled for its counter
        self._start = time.time()
        self._base = LOCAL_COUNT.value
        self._stop = threading.Event()
        self._thread = None
        self._tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._handler = None
        self._saved = None
        self.lines = 0

    def count(self) -> int:
        local = LOCAL_COUNT.value - self._base
        if local or self.result is None:
            return local
        try:
            for counter in self.result.metrics().query()["counters"]:
                if counter.key.metric.name == "subgraphs":
                    return int(counter.attempted or 0)
        except Exception:  # noqa: BLE001 - a runner without live metrics: show no count
            return 0
        return 0

    def line(self) -> str:
        elapsed = time.time() - self._start
        done = self.count()
        rate = done / elapsed if elapsed > 0 else 0.0
        stage = self.stage
        if self.result is not None and stage == "starting":  # a remote job: its state
            stage = str(getattr(self.result, "state", stage))
        elif jit_cache.compiling():  # a worker compiles the kernels (a cold cache: once)
            why = (
                "the install's kernel cache is read-only: every run compiles them"
                if jit_cache.temporary()
                else "once per machine"
            )
            return f"progress: {elapsed:5.0f}s  compiling the kernels ({why})"
        return f"progress: {elapsed:5.0f}s  stage {stage}  {self.what} {done:,} ({rate:,.0f}/s)"

    def _run(self) -> None:
        period = min(1.0, self.interval) if self._tty else self.interval
        while not self._stop.wait(period):
            self.emit()

    def relay(self) -> None:
        """What the worker processes said of the kernels (sampler/jit_cache.py), each once."""
        for text in jit_cache.relay():
            self.stream.write(("\r" + text.ljust(100) if self._tty else text) + "\n")
        self.stream.flush()

    def emit(self) -> None:
        self.relay()
        text = self.line()
        if self._tty:
            self.stream.write("\r" + text[:160].ljust(100))
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
        self.lines += 1

    def __enter__(self) -> Progress:
        if self.interval <= 0:
            return self
        logger = logging.getLogger(_FN_RUNNER_LOGGER)
        self._saved = (logger.level, logger.propagate)
        self._handler = _StageHandler(self)
        logger.addHandler(self._handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        self._thread = threading.Thread(target=self._run, name="progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            self.relay()  # (the workers have ended: all they said)
            return
        self._stop.set()
        self._thread.join()
        logger = logging.getLogger(_FN_RUNNER_LOGGER)
        logger.removeHandler(self._handler)
        logger.setLevel(self._saved[0])
        logger.propagate = self._saved[1]
        if self._tty and self.lines:
            self.stream.write("\n")
            self.stream.flush()
        self.relay()


def stage_times(result) -> dict[str, float]:
    """Seconds per stage (summed over its transforms) when the runner reports them, else {}."""
    monitoring = getattr(result, "monitoring_metrics", None)
    if monitoring is None:
        return {}
    try:
        counters = monitoring().query()["counters"]
    except Exception:  # noqa: BLE001 - runners without system metrics report nothing
        return {}
    times = collections.Counter()
    for counter in counters:
        if not counter.key.metric.name.endswith(_EXECUTION_TIME) or not counter.key.step:
            continue
        parts = counter.key.step.split("/")
        depth = 1
        if parts[0] in ("ReadGraph", "Sample"):
            depth = 3 if len(parts) > 1 and parts[1] in _PER_NAME_GROUPS else 2
        value = counter.committed if counter.committed is not None else counter.attempted
        times["/".join(parts[:depth])] += (value or 0) / 1000.0
    return {name: seconds for name, seconds in times.items() if seconds > 0}


def summary_lines(counters: dict[str, int], times: dict[str, float], top: int = 8) -> list[str]:
    """The end-of-run summary below 'subgraphs: N in T s' (see the module docstring)."""
    lines = []
    subgraphs = counters.get("subgraphs", 0)
    for kind in ("nodes", "edges"):
        sizes = {
            name.split("/", 1)[1]: value
            for name, value in counters.items()
            if name.startswith(f"output_{kind}/")
        }
        if sizes and subgraphs:
            mean = ", ".join(f"{k} {v / subgraphs:.1f}" for k, v in sorted(sizes.items()))
            lines.append(f"{kind} per subgraph (mean): {mean}")
            total = ", ".join(f"{k} {v:,}" for k, v in sorted(sizes.items()))
            lines.append(f"{kind} in total: {total}")
    # Unreadable rows (run_summary.json's bad_records) apart from graph issues (graph_issues).
    found = {
        name: value
        for name, value in counters.items()
        if name.split("/", 1)[0] in BAD_RECORD_COUNTERS and value
    }
    bad = {k: v for k, v in found.items() if k.startswith("bad_records/")}
    issues = {k: v for k, v in found.items() if k not in bad}
    lines.append(
        f"bad records: {sum(bad.values()):,}"
        + (
            " ("
            + ", ".join(f"{k[len('bad_records/') :]} {v:,}" for k, v in sorted(bad.items()))
            + ")"
            if bad
            else ""
        )
    )
    if issues:
        lines.append(
            f"graph issues: {sum(issues.values()):,} ("
            + ", ".join(f"{k} {v:,}" for k, v in sorted(issues.items()))
            + ")"
        )
    times = {name: seconds for name, seconds in times.items() if seconds >= 0.05}
    if times:
        ranked = sorted(times.items(), key=lambda kv: -kv[1])
        shown = ", ".join(f"{name} {seconds:.1f}s" for name, seconds in ranked[:top])
        rest = sum(seconds for _, seconds in ranked[top:])
        more = f", {len(ranked) - top} more {rest:.1f}s" if len(ranked) > top else ""
        lines.append(f"time per stage (runner-reported): {shown}{more}")
    return lines
