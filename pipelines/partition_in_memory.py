"""`pipelines.partition --runner InMemory`: the same partition files without Beam, in one process.

The kernels of the Beam stage called on whole node types (sampler/partition/in_memory.py),
for graphs that fit the machine: the same DGL files, node id tables, report and dead letters
as the Beam pipeline for the same flags, and the pipeline's oracle in the tests. apache_beam
is never imported on this path (local files; gs:// paths load Beam's filesystems only).
A graph estimated to need more than --memory_mb is refused in one line.
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from collections.abc import Callable

from pipelines.reporting import accounting
from pipelines.runtime.interrupts import check_interrupted, memory_limit_words, process_limit_mb
from pipelines.runtime.runner import note_output
from sampler.errors import UserError
from sampler.io import graph_tables
from sampler.partition import in_memory
from sampler.schema import load_graph

IN_MEMORY = "InMemory"

# Peak memory of a run, from the bytes of its table files: a fixed part (the interpreter,
# numpy, pyarrow) plus a multiple of the input per format. Measured on the MAG-shaped graph
# (scripts/bench_partition.py, docs/notes-issue-24.md): peak RSS of lp (the most) 33x its
# Parquet bytes at 100k and at 1M papers (random: 23x); the same graph takes 3.2x the bytes
# as CSV and 8.3x as TFRecord. About 10% of room on top. A set in BigQuery counts by its read
# session's estimate of its (uncompressed) bytes, as TFRecord bytes.
BASE_MB = 300
PER_INPUT_BYTE = {"parquet": 36.0, "csv": 11.0, "tfrecord": 4.5, "bigquery": 4.5}


def available_mb() -> tuple[int, str]:
    """(MB, what limits it): what this process may allocate now, the least of the machine's
    MemAvailable (/proc/meminfo) and the process's own limits (ulimit -v, ulimit -d, the
    cgroup's memory.max: pipelines.runtime.interrupts.process_limit_mb)."""
    machine = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    machine = int(line.split()[1]) // 1024
    except OSError:
        pass
    if machine is None:
        import os

        machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1 << 20)
    limit = process_limit_mb()
    if limit is not None and limit < machine:
        return limit, f"what the process limit leaves ({memory_limit_words()})"
    return machine, "the machine's available memory"


def estimate_mb(graph) -> int:
    """Estimated peak memory (MB) of partitioning `graph` in memory, from its files' sizes."""
    total = 0.0
    for pattern, where in graph_tables.graph_patterns(graph).items():
        for path, fmt in graph_tables.table_files(pattern, None, where):
            total += graph_tables.unit_size(path, fmt) * PER_INPUT_BYTE.get(fmt, 36.0)
    return int(BASE_MB + total / (1 << 20))


def check_memory(graph, memory_mb: int | None) -> tuple[int, int]:
    """(estimate, budget) in MB; UserError when the estimate passes the budget (--memory_mb, or
    what the machine and the process's limits leave: available_mb)."""
    if memory_mb is not None:
        budget, what = memory_mb, f"--memory_mb {memory_mb:,}"
    else:
        budget, what = available_mb()
        what = f"{what}, {budget:,} MB"
    need = estimate_mb(graph)
    if need > budget:
        raise UserError(
            f"--runner InMemory: the graph needs about {need:,} MB in one process, more than "
            f"{what}; use the Beam runner (leave out --runner, or --runner DataflowRunner)"
        )
    return need, budget


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclasses.dataclass(frozen=True)
class PartitionCli:
    """What the body takes from pipelines.partition, handed in by it (this module never imports
    its CLI back: no import circle)."""

    make_config: Callable
    check_output: Callable
    owned_outputs: Callable
    remove_interrupted_run: Callable
    print_summary: Callable


def main(argv, args, beam_args, start: float, cli: PartitionCli) -> None:
    """The CLI body for --runner InMemory (`args`: pipelines.partition's parsed flags)."""
    # Beam flags were refused with the other flags this runner ignores (pipelines.flags).
    graph = load_graph(args.graph_schema)
    config = cli.make_config(args, graph)  # type-name and feature-name checks before running
    need, budget = check_memory(graph, args.memory_mb)
    output_dir = args.output_dir.rstrip("/")
    cli.check_output(graph, args, output_dir)
    note_output(output_dir, lambda: cli.remove_interrupted_run(output_dir, args))
    bad_lines: list[str] = []
    try:
        report, counters = in_memory.run(graph, config, output_dir, bad_lines)
        check_interrupted()  # a Ctrl-C that a library caught during the run
    except BaseException:
        # As the Beam runner: no file of a failed run could pass for a complete partitioning.
        accounting.remove_leftovers(output_dir, cli.owned_outputs(args))
        raise
    finally:
        accounting.write_bad_records_file(bad_lines, output_dir)
    issues = accounting.graph_issues(graph, counters)
    try:
        accounting.check_bad_records(counters, args.max_bad_records, output_dir)
        accounting.check_strict(issues, accounting.parse_strict(args.strict))
    except UserError:
        # Nothing of a failed run could pass for partitions (the DGL config marks them as
        # loadable): all its files go, every folder (raw_id_mappings/ too); dead letters stay.
        accounting.remove_leftovers(output_dir, cli.owned_outputs(args))
        raise
    seconds = time.time() - start
    cli.print_summary(report, output_dir, seconds)
    rss = peak_rss_mb()
    print(f"memory:     peak RSS {rss:,.0f} MB in one process (estimated {need:,} of {budget:,})")
    used = {
        "runner": IN_MEMORY,
        "peak_rss_mb": round(rss),
        "estimated_mb": need,
        "memory_mb": budget,
    }
    data = accounting.summary(
        argv, args, counters, time.time() - start,
        partition=accounting.partition_accounting(graph, report, counters),
        graph_issues=issues,
        resources=used,
    )  # fmt: skip
    try:  # a full disk: no part, table or marker of the run stays
        print(f"summary:    {accounting.write_run_summary(output_dir, data)}")
        inputs = accounting.input_files(graph)
        accounting.write_manifest(output_dir, cli.owned_outputs(args), inputs)
    except BaseException:
        cli.remove_interrupted_run(output_dir, args)
        raise
    sys.stdout.flush()
