"""What a local run used: peak memory by process role, and the bytes that crossed stages.

For sizing a Dataflow job from a local run (run_summary.json's `resources` section):

- `runner_peak_rss_mb`: the peak RSS of this process. The local runner (FnApiRunner) holds
  every shuffle here; on Dataflow the shuffle service does, so this is not a worker figure.
- `largest_sdk_worker_peak_rss_mb`: with `--direct_running_mode=multi_processing`, the peak
  RSS of the largest SDK worker process (the largest reaped child, `getrusage`): the figure a
  Dataflow worker needs. In-process runs have no worker processes (null).
- `shuffle_bytes`: the encoded bytes written to every GroupByKey, exactly as the runner
  received them from the workers' data channel; `shuffle_by_step` lists the largest, and
  `shuffle_by_op` adds up those of each sampling op's steps (`.../Op/<op>/...`: the
  `sharded` placement's joins, hop by hop).
- `side_input_bytes`: the encoded bytes of the PCollections read as side inputs (the `worker`
  placement's graph, the `topology` placement's topology); every worker reads them whole.
- `stage_bytes`: every byte that crossed from one fused stage to another (shuffles, side
  inputs and materialized PCollections such as a Flatten's).
- `slowest_stages`: the wall seconds of the fused stages that took longest, named by their
  first two steps. The local runner runs one stage at a time, so these add up to the run.
- `stage_cpu`: the same stages' CPU seconds, the runner process's (`runner_s`) apart from
  its SDK worker processes' (`workers_s`: every process below the runner, from /proc), in
  the order they ran, so that the run's CPU is told stage by stage and process by process.

The counts come from the local runner's buffers (`count_run` wraps the append of
Beam 2.77's FnApiRunner buffers, in the runner process); Beam's own `sampled_byte_size`
metric is a sample whose mean is biased when element sizes vary along a bundle. For a
Dataflow job the section is null (its console shows shuffle bytes and worker memory).
"""

from __future__ import annotations

import collections
import contextlib
import re
import resource
import sys
import threading
import time
import typing

from apache_beam.portability import common_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner

from pipelines.beam_patches import targets
from pipelines.reporting.process_cpu import descendants_cpu_seconds

GROUP_BY_KEY = common_urns.primitives.GROUP_BY_KEY.urn
PAR_DO = common_urns.primitives.PAR_DO.urn
TOP_STEPS = 8
OP_STEP = re.compile(r"(?:^|/)Op/([^/]+)/")  # a sampling op's steps (the `sharded` placement)

_BUFFER_ID = "_beam_graph_buffer_id"
_lock = threading.Lock()

BEAM_VERSIONS = ("2.77",)  # the Beam versions its wrappers of Beam's runner were written for
# What _install() wraps: (owner, attribute, source digest), checked first
# (pipelines.beam_patches.targets).
TARGETS = (
    (execution.BundleContextManager, "get_buffer", "587b5d725d2a0c23"),
    (execution.ListBuffer, "append", "bba22324d1719ca9"),
    (execution.GroupingBuffer, "append", "37ae1befc20c5bde"),
    (fn_runner.FnApiRunner, "_execute_bundle", "5803171d1e2f4dda"),
)
_counts: collections.Counter | None = None  # buffer id -> bytes, while a run counts
_seconds: collections.Counter | None = None  # stage name -> wall seconds, while a run counts
_cpu: collections.Counter | None = None  # (stage name, process role) -> CPU-s, while a run counts


def _counting_append(append):
    def counted(self, data: bytes) -> None:
        counts = _counts
        if counts is not None:
            counts[getattr(self, _BUFFER_ID, b"?")] += len(data)
        append(self, data)

    counted.__wrapped__ = append
    return counted


def _tagging_get_buffer(get_buffer):
    def tagged(self, buffer_id: bytes, transform_id: str):
        buffer = get_buffer(self, buffer_id, transform_id)
        setattr(buffer, _BUFFER_ID, buffer_id)
        return buffer

    tagged.__wrapped__ = get_buffer
    return tagged


def _timing_execute_bundle(execute):
    def timed(self, context, bundle_context_manager, bundle_input):
        start = time.perf_counter()
        cpu = _cpu is not None and (_cpu_seconds(resource.RUSAGE_SELF), descendants_cpu_seconds())
        try:
            return execute(self, context, bundle_context_manager, bundle_input)
        finally:
            seconds = _seconds
            if seconds is not None:
                seconds[bundle_context_manager.stage.name] += time.perf_counter() - start
            stage_cpu = _cpu
            if stage_cpu is not None and cpu:
                runner, workers = cpu
                name = bundle_context_manager.stage.name
                stage_cpu[name, "runner"] += _cpu_seconds(resource.RUSAGE_SELF) - runner
                now = descendants_cpu_seconds()
                if now is not None and workers is not None:
                    stage_cpu[name, "workers"] += now - workers

    timed.__wrapped__ = execute
    return timed


def _install() -> None:
    """Wraps the local runner's buffer appends and bundle runs (once per process)."""
    if hasattr(execution.BundleContextManager.get_buffer, "__wrapped__"):
        return
    targets.check(__name__, BEAM_VERSIONS, TARGETS)
    manager = execution.BundleContextManager
    manager.get_buffer = _tagging_get_buffer(manager.get_buffer)
    for cls in (execution.ListBuffer, execution.GroupingBuffer):
        cls.append = _counting_append(cls.append)
    runner = fn_runner.FnApiRunner
    runner._execute_bundle = _timing_execute_bundle(runner._execute_bundle)


class RunCounts(typing.NamedTuple):
    buffer_bytes: collections.Counter  # buffer id -> bytes the runner buffered
    stage_seconds: collections.Counter  # fused stage name -> wall seconds of its bundles
    # (fused stage name, "runner" or "workers") -> CPU seconds of its bundles
    stage_cpu: collections.Counter = collections.Counter()


@contextlib.contextmanager
def count_run():
    """Counts, while open, the bytes the local runner buffers and the time of each stage."""
    global _counts, _seconds, _cpu
    with _lock:
        _install()
        counts = RunCounts(collections.Counter(), collections.Counter(), collections.Counter())
        _counts, _seconds, _cpu = counts
    try:
        yield counts
    finally:
        _counts = _seconds = _cpu = None


def stage_label(name: str) -> str:
    """A fused stage's name, e.g. '((A/Read)+(ref_AppliedPTransform_B-C_12))+(...)', as
    its first two steps: 'A/Read + B-C'."""
    steps = [re.sub(r"^ref_AppliedPTransform_|_\d+$", "", s.strip("() ")) for s in name.split("+")]
    return " + ".join(steps[:2])


def slowest_stages(stage_seconds: dict[str, float]) -> dict[str, float]:
    """The TOP_STEPS stages that took longest, by label, in seconds."""
    top = sorted(stage_seconds.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_STEPS]
    return {stage_label(name): round(seconds, 2) for name, seconds in top}


def stage_cpu(stage_seconds: dict[str, float], cpu: dict[tuple[str, str], float]) -> dict:
    """{stage label: {"wall_s", "runner_s", "workers_s"}} of every stage, in the order they ran;
    stages with the same label add up."""
    out: dict[str, dict[str, float]] = {}
    for name, seconds in stage_seconds.items():
        entry = out.setdefault(
            stage_label(name), {"wall_s": 0.0, "runner_s": 0.0, "workers_s": 0.0}
        )
        entry["wall_s"] += seconds
        entry["runner_s"] += cpu.get((name, "runner"), 0.0)
        entry["workers_s"] += cpu.get((name, "workers"), 0.0)
    return {
        label: {key: round(value, 2) for key, value in entry.items()}
        for label, entry in out.items()
    }


def _peak_mb(who: int) -> float:
    kib = resource.getrusage(who).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(kib / (2**20 if sys.platform == "darwin" else 2**10), 1)


def _cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return round(usage.ru_utime + usage.ru_stime, 2)


def _side_inputs(pipeline_proto) -> set[str]:
    """The PCollection ids some ParDo reads as a side input."""
    out = set()
    for transform in pipeline_proto.components.transforms.values():
        if transform.spec.urn == PAR_DO:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            out.update(transform.inputs[name] for name in payload.side_inputs)
    return out


def stage_bytes(pipeline_proto, buffer_bytes: dict[bytes, int]) -> dict:
    """{shuffle_bytes, shuffle_by_step, shuffle_by_op, side_input_bytes, stage_bytes} of a
    local run."""
    transforms = pipeline_proto.components.transforms
    side_inputs = _side_inputs(pipeline_proto)
    by_step: dict[str, int] = collections.Counter()
    side = 0
    for buffer_id, size in buffer_bytes.items():
        kind, _, name = buffer_id.decode().partition(":")
        if kind == "group":
            step = transforms[name].unique_name if name in transforms else name
            by_step[step.removesuffix("/GroupByKey")] += size
        elif kind == "materialize" and name in side_inputs:
            side += size
    top = sorted(by_step.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_STEPS]
    by_op: dict[str, int] = collections.Counter()
    for step, size in by_step.items():
        op = OP_STEP.search(step)
        if op:
            by_op[op.group(1)] += size
    return {
        "shuffle_bytes": sum(by_step.values()),
        "shuffle_by_step": dict(top),
        "shuffle_by_op": dict(by_op),
        "side_input_bytes": side,
        "stage_bytes": sum(buffer_bytes.values()),
    }


def run_resources(pipeline) -> dict | None:
    """The `resources` section of run_summary.json; None unless the local runner ran it."""
    runner = pipeline.runner
    proto = getattr(runner, "pipeline_proto", None)
    if proto is None:
        return None
    multi = runner.worker_processes
    return {
        "runner_peak_rss_mb": _peak_mb(resource.RUSAGE_SELF),
        "largest_sdk_worker_peak_rss_mb": _peak_mb(resource.RUSAGE_CHILDREN) if multi else None,
        # CPU seconds of the runner process itself, and of its SDK worker processes (reaped)
        "runner_cpu_seconds": _cpu_seconds(resource.RUSAGE_SELF),
        "sdk_workers_cpu_seconds": _cpu_seconds(resource.RUSAGE_CHILDREN) if multi else None,
        **stage_bytes(proto, runner.counts.buffer_bytes),
        "slowest_stages": slowest_stages(runner.counts.stage_seconds),
        "stage_cpu": stage_cpu(runner.counts.stage_seconds, runner.counts.stage_cpu),
    }


def resource_lines(resources: dict | None, output_bytes: int | None = None) -> list[str]:
    """The CLI's summary lines for `resources`."""
    if not resources:
        return []
    worker = resources["largest_sdk_worker_peak_rss_mb"]
    memory = f"memory: runner peak {resources['runner_peak_rss_mb']:,.0f} MB" + (
        f", largest SDK worker {worker:,.0f} MB" if worker is not None else " (in-process)"
    )
    shuffled = f"shuffled: {resources['shuffle_bytes'] / 2**20:,.1f} MB"
    if output_bytes:
        shuffled += f" ({resources['shuffle_bytes'] / output_bytes:.2f}x the output)"
    if resources["side_input_bytes"]:
        shuffled += f"; side inputs {resources['side_input_bytes'] / 2**20:,.1f} MB per worker"
    lines = [memory, shuffled]
    workers_cpu = resources.get("sdk_workers_cpu_seconds")
    if workers_cpu:
        runner_cpu = resources["runner_cpu_seconds"]
        share = runner_cpu / (runner_cpu + workers_cpu)
        lines.append(
            f"cpu: runner {runner_cpu:,.1f} s, SDK workers {workers_cpu:,.1f} s"
            f" (the runner's share {share:.0%})"
        )
    slowest = list(resources.get("slowest_stages", {}).items())[:3]
    if slowest:
        lines.append("slowest stages: " + "; ".join(f"{n} {t:,.1f} s" for n, t in slowest))
    return lines
