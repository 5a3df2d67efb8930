"""run_summary.json's `cost` block: what one subgraph cost this run, to project a Dataflow job.

The figures `beam-graph estimate --from_run` turns into machines, workers, hours and dollars
(sampler/tools/run_cost.py; docs/dataflow.md, "Cost read off a run"):

- `subgraphs`: the records written (the `subgraphs` counter).
- `output_bytes`: the bytes of the sample shards on disk (TFRecord framing included), and
  `output_bytes_per_subgraph`.
- `cpu_seconds`: the whole process tree's CPU (user + system): this process and every process
  below it, the ended ones included (pipelines.reporting.process_cpu). `runner_cpu_seconds` is
  the local runner's own share (the process that holds every shuffle: on Dataflow the shuffle
  service does that work), `worker_cpu_seconds` the rest: the SDK worker processes with
  `--direct_running_mode=multi_processing`. In one process (`--runner InMemory`, or Beam
  in_memory) there is no runner apart: `runner_cpu_seconds` is null and the process's CPU is
  the workers'. `cpu_seconds_per_subgraph` is `worker_cpu_seconds / subgraphs`; it includes
  the run's fixed costs (start-up, reading and building the graph), so a small run
  overstates it.
- `shuffle_bytes` (and per subgraph): bytes written to the runner's GroupByKeys (0 in memory);
  `shuffle_bytes_per_subgraph_by_op`: those of the `sharded` placement's per-op joins
  (`Sample/Op/<op>/...`), per op.
- `largest_worker_peak_rss_mb`: the largest SDK worker process's peak RSS (the one process of
  an in-process run); `runner_peak_rss_mb`: the runner's (null without a runner apart).

No Beam import: `--runner InMemory` writes the block too.
"""

from __future__ import annotations

import resource
import sys

from pipelines.reporting.process_cpu import descendants_cpu_seconds


def _per(value: float | None, count: int, digits: int) -> float | None:
    if value is None or not count:
        return None
    return round(value / count, digits)


def cost_block(
    subgraphs: int,
    output_bytes: int,
    worker_cpu_seconds: float,
    runner_cpu_seconds: float | None,
    largest_worker_peak_rss_mb: float | None,
    runner_peak_rss_mb: float | None,
    shuffle_bytes: int = 0,
    shuffle_by_op: dict[str, int] | None = None,
    runner: str = "",
) -> dict:
    """The `cost` block (module doc) from the run's measured totals."""
    cpu = worker_cpu_seconds + (runner_cpu_seconds or 0.0)
    return {
        "runner": runner,
        "subgraphs": subgraphs,
        "output_bytes": output_bytes,
        "output_bytes_per_subgraph": _per(output_bytes, subgraphs, 1),
        "cpu_seconds": round(cpu, 2),
        "runner_cpu_seconds": runner_cpu_seconds,
        "worker_cpu_seconds": round(worker_cpu_seconds, 2),
        "cpu_seconds_per_subgraph": _per(worker_cpu_seconds, subgraphs, 6),
        "shuffle_bytes": shuffle_bytes,
        "shuffle_bytes_per_subgraph": _per(shuffle_bytes, subgraphs, 1),
        "shuffle_bytes_per_subgraph_by_op": {
            op: _per(size, subgraphs, 1) for op, size in (shuffle_by_op or {}).items()
        },
        "largest_worker_peak_rss_mb": largest_worker_peak_rss_mb,
        "runner_peak_rss_mb": runner_peak_rss_mb,
    }


def _peak_mb(who: int) -> float:
    kib = resource.getrusage(who).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(kib / (2**20 if sys.platform == "darwin" else 2**10), 1)


def tree_cpu_seconds() -> float:
    """CPU seconds of this process and of every process below it (ended ones included)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    below = descendants_cpu_seconds()
    if below is None:  # no /proc: the reaped children only
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        below = children.ru_utime + children.ru_stime
    return usage.ru_utime + usage.ru_stime + below


def in_process_cost(subgraphs: int, output_bytes: int, runner: str) -> dict:
    """The block of a run in one process (`--runner InMemory`, Beam in_memory): no runner apart,
    the process is the worker."""
    return cost_block(
        subgraphs,
        output_bytes,
        worker_cpu_seconds=tree_cpu_seconds(),
        runner_cpu_seconds=None,
        largest_worker_peak_rss_mb=_peak_mb(resource.RUSAGE_SELF),
        runner_peak_rss_mb=None,
        runner=runner,
    )


def beam_cost(resources: dict, subgraphs: int, output_bytes: int) -> dict:
    """The block of a local Beam run from its `resources` (pipelines.reporting.resources)."""
    shuffle = resources.get("shuffle_bytes", 0)
    by_op = resources.get("shuffle_by_op") or {}
    if resources.get("largest_sdk_worker_peak_rss_mb") is None:  # in-process Beam
        block = in_process_cost(subgraphs, output_bytes, "beam, one process")
        block.update(
            shuffle_bytes=shuffle,
            shuffle_bytes_per_subgraph=_per(shuffle, subgraphs, 1),
            shuffle_bytes_per_subgraph_by_op={op: _per(b, subgraphs, 1) for op, b in by_op.items()},
        )
        return block
    runner_cpu = resources["runner_cpu_seconds"]
    below = descendants_cpu_seconds()
    workers = below if below is not None else resources["sdk_workers_cpu_seconds"]
    return cost_block(
        subgraphs,
        output_bytes,
        worker_cpu_seconds=max(workers, resources["sdk_workers_cpu_seconds"] or 0.0),
        runner_cpu_seconds=runner_cpu,
        largest_worker_peak_rss_mb=resources["largest_sdk_worker_peak_rss_mb"],
        runner_peak_rss_mb=resources["runner_peak_rss_mb"],
        shuffle_bytes=shuffle,
        shuffle_by_op=by_op,
        runner="beam, SDK worker processes",
    )


def cost_line(cost: dict | None) -> str | None:
    """The CLI's one `cost:` line."""
    if not cost or not cost["subgraphs"]:
        return None
    runner = (
        f" (runner {cost['runner_cpu_seconds']:,.1f} CPU-s apart)"
        if cost["runner_cpu_seconds"] is not None
        else ""
    )
    memory = f"peak RSS: largest worker {cost['largest_worker_peak_rss_mb']:,.0f} MB" + (
        f", runner {cost['runner_peak_rss_mb']:,.0f} MB"
        if cost["runner_peak_rss_mb"] is not None
        else ""
    )
    return (
        f"cost: {cost['subgraphs']:,} subgraphs; per subgraph"
        f" {cost['cpu_seconds_per_subgraph'] * 1000:,.2f} CPU-ms{runner},"
        f" {cost['output_bytes_per_subgraph'] / 1000:,.1f} kB of records,"
        f" {cost['shuffle_bytes_per_subgraph'] / 1000:,.1f} kB shuffled; {memory}"
    )
