"""Samples one GraphTensor tf.Example per seed from a Unigraph, on any Beam runner.

The CLI `python -m pipelines.sample`; its flags, their --help text (sample_config.DESCRIPTION)
and their checks are in pipelines.sample_config. `load(argv)` parses them once, loads the schema
and plan once and validates them; `build` adds the sampling stages to a pipeline; `main_body`
runs it and reports.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import re
import time
import uuid
from typing import TYPE_CHECKING

from google.protobuf import text_format

from pipelines import sample_in_memory
from pipelines.reporting import accounting
from pipelines.reporting import cost as run_cost
from pipelines.runtime.interrupts import check_interrupted
from pipelines.runtime.runner import new_pipeline, note_output, output_shards, run_main, submit
from pipelines.sample_config import SampleConfig, check_link_flags, check_numbers, parse_args
from sampler.errors import UserError
from sampler.io import files, graph_tables
from sampler.sample import temporal
from sampler.sample.encode import output_schema
from sampler.sample.link import link_output_schema
from sampler.sample.plan import SamplingPlan, load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import GraphInfo, load_graph
from sampler.tools import sharded_bound
from sampler.tools.placement_cost import process_gb

if TYPE_CHECKING:
    import apache_beam as beam

# Beam (apache_beam, sampler.beam, pipelines.reporting.progress and pipelines.reporting.resources) is imported by
# the functions that build and run a pipeline: `--runner InMemory` never loads it.


@dataclasses.dataclass(frozen=True)
class Loaded:
    """The flags, and the schema and plan they name: loaded once per run."""

    config: SampleConfig
    beam_args: list[str]
    graph: GraphInfo
    plan: SamplingPlan


def load(argv, check_outputs: bool = True) -> Loaded:
    """Parses `argv` once, loads the schema and plan once, validates: the numbers first, then
    schema and spec errors, then the output (unless not `check_outputs`: a dry run)."""
    config, beam_args = parse_args(argv)
    check_numbers(config)
    graph = load_graph(config.graph_schema)
    plan = make_plan(
        graph,
        load_sampling_spec(config.sampling_spec),
        config.edge_aggregation_method,
        config.seed_edge_set,
    )
    check_link_flags(plan, config)
    if check_outputs:
        check_output(graph, config)
    return Loaded(config, beam_args, graph, plan)


def build(pipeline, graph, plan, config: SampleConfig, temp_dir: str | None = None, parts=None):
    """Adds the sampling stages to `pipeline` (through sampler.beam.sample.graph_tensors, the library
    entry point's code path); returns its SampledBatches. `temp_dir`: the run's temporary
    folder (the `worker` placement's graph snapshot goes there); `parts`: the writer's
    ShardParts, which the `worker` placement writes where it samples."""
    from sampler.beam.sample.graph_tensors import SamplingOptions, sample_graph_tensors

    picked = placement(graph, config, plan)
    num_shards, num_buckets = config.num_shards, config.num_buckets
    if picked == "sharded":
        bound = sharded_bound_flags(graph, plan, config)
        num_shards, num_buckets = bound.num_shards, bound.num_buckets
    options = SamplingOptions(
        Randomness(config.seed),
        picked,
        config.input_seeds,
        num_shards,
        num_buckets,
        config.max_bad_records,
        config.negatives_per_seed,
        config.keep_seed_edges,
        temp_dir,
        sampling_threads=1 if config.sampling_threads is None else config.sampling_threads,
    )
    sampled = sample_graph_tensors(pipeline, graph, plan, options, parts)
    accounting.write_bad_records(sampled.bad_records, output_dir_of(config.output_samples))
    accounting.write_rejected_seeds(sampled.rejected_seeds, output_dir_of(config.output_samples))
    return sampled


def sharded_bound_flags(graph, plan: SamplingPlan, config: SampleConfig):
    """The `sharded` placement: --num_shards and --num_buckets raised until the largest SDK
    process fits --worker_memory_mb (sampler.tools.sharded_bound); says which."""
    whole_bytes, _ = graph_tables.size_estimates(graph)
    seeds = sharded_bound.count_seeds(
        graph, plan, config.input_seeds, config.negatives_per_seed or 0
    )
    bound = sharded_bound.sharded_flags(
        whole_bytes,
        seeds,
        config.worker_memory_mb,
        num_shards=config.num_shards,
        num_buckets=config.num_buckets,
    )
    print(bound.line())  # stdout, beside the `graph placement:` line
    return bound


def output_dir_of(output_samples: str) -> str:
    prefix = output_shards(output_samples)[0]
    return prefix.rsplit("/", 1)[0] if "/" in prefix else ""


TEMP_OUTPUTS = [
    r"\.temp-samples-[0-9a-f]+/.*",
    r"beam-temp-bad_records-[0-9a-f]+/.*",
    r"beam-temp-rejected_seeds-[0-9a-f]+/.*",
]


def owned_outputs(args: SampleConfig) -> list[str]:
    """Regular expressions (relative to the output folder) of the files a run writes."""
    prefix, _, template = output_shards(args.output_samples)
    base = re.escape(prefix.rsplit("/", 1)[-1])
    samples = base if template == "" else rf"{base}-\d{{5}}-of-\d{{5}}"
    return [samples, r"schema\.pbtxt", accounting.REJECTED_SEEDS_FILE, *TEMP_OUTPUTS]


def output_examples(args: SampleConfig) -> list[str]:
    """One name (relative to the output folder) of each kind of file a run writes, for the
    check that no input pattern would read them (pipelines.outputs.input_checks); one per owned
    pattern, and accounting.COMMON_OUTPUTS (tests/test_output_folders.py checks)."""
    prefix, count, template = output_shards(args.output_samples)
    base = prefix.rsplit("/", 1)[-1]
    samples = [base] if template == "" else [files.shard_name(base, 0, count)]
    return [
        *samples,
        "schema.pbtxt",
        ".schema.pbtxt.partial-12345",  # a file being written (files.write_output)
        "rejected_seeds-00000-of-00001.jsonl",
        ".temp-samples-0123456789ab/graph/part-00000-01234567",
        "beam-temp-bad_records-0123456789ab/part-0",
        "beam-temp-rejected_seeds-0123456789ab/part-0",
        accounting.SUMMARY_NAME,
        "bad_records-00000-of-00001.jsonl",
        accounting.MANIFEST_NAME,
    ]


def check_output(graph, args: SampleConfig) -> None:
    """Configuration errors of the output, before anything runs (pipelines.reporting.accounting), and
    the hold of the output folder (pipelines.outputs.output_lock); then the manifest of the run's files
    is written (a folder that cannot be written fails here)."""
    output_dir = output_dir_of(args.output_samples)
    accounting.parse_strict(args.strict)
    owned = owned_outputs(args)
    flag = "--output_samples"
    inputs = accounting.input_patterns(graph, args.sampling_spec, args.input_seeds)
    input_files = accounting.input_files(graph, args.sampling_spec, args.input_seeds)
    accounting.check_output(
        output_dir, owned, inputs, args.overwrite, flag,
        files=input_files, examples=output_examples(args),
    )  # fmt: skip
    note_output(output_dir)  # held by this run: its clean-up may remove what it wrote
    accounting.write_manifest(output_dir, owned, input_files)


def placement(graph, args: SampleConfig, plan: SamplingPlan | None = None) -> str:
    """'worker', 'topology' or 'sharded': identical records, different speed and scale.

    auto prints one line saying which it picked and why.
    """
    if args.graph_placement != "auto":
        return args.graph_placement
    whole_bytes, topology_bytes = graph_tables.size_estimates(graph)
    need = {  # MB per SDK process, from the measured rates of sampler/tools/placement_cost.py
        name: process_gb(name, whole_bytes, topology_bytes, 1) * 1e9 / 2**20
        for name in ("worker", "topology")
    }
    whole, topology = whole_bytes / 2**20, topology_bytes / 2**20
    budget = args.worker_memory_mb
    if need["worker"] <= budget:
        picked = "worker"
        why = (
            f"the process building the whole graph (~{whole:,.0f} MB of tables) needs"
            f" ~{need['worker']:,.0f} MB"
        )
    elif need["topology"] <= budget:
        picked = "topology"
        why = (
            f"the whole graph needs ~{need['worker']:,.0f} MB per process, its topology"
            f" (~{topology:,.0f} MB of ~{whole:,.0f} MB of tables) ~{need['topology']:,.0f} MB"
        )
    else:
        picked = "sharded"
        why = (
            f"not even the topology fits (~{need['topology']:,.0f} MB per process for"
            f" ~{topology:,.0f} MB of ~{whole:,.0f} MB of tables)"
        )
    # stdout, with the run's other report lines: stderr holds only a failure's one line.
    print(f"graph placement: {picked}: {why} --worker_memory_mb {budget:,.0f}")
    return picked


def write_output_schema(graph, output_dir: str, plan: SamplingPlan | None = None) -> str:
    path = files.join(output_dir, "schema.pbtxt") if output_dir else "schema.pbtxt"
    schema = (
        graph.schema
        if plan is None or plan.link is None
        else link_output_schema(graph.schema, plan)
    )
    if plan is not None:
        schema = temporal.output_schema(schema, plan.seed_time)
    with files.write_output(path) as f:
        f.write(text_format.MessageToString(output_schema(schema)).encode())
    return path


@dataclasses.dataclass
class Construction:
    """A sampling pipeline built from the CLI flags but not run yet."""

    pipeline: beam.Pipeline
    graph: object
    output_dir: str
    output_samples: str
    temp_dir: str  # part files of the writer; removed after the run


def construct(argv) -> Construction:
    """Parses `argv` and builds the whole pipeline (read, sample, write) without running it.

    `main` runs what `construct_loaded` returns; tests build the same pipeline for other runners
    (for example a Dataflow dry run) through exactly this code path.
    """
    return construct_loaded(load(argv, check_outputs=False))


def construct_loaded(loaded: Loaded) -> Construction:
    """Builds the whole pipeline from flags already loaded. Input files are listed here."""
    import apache_beam as beam

    from pipelines.reporting.progress import CountOutput, count_records
    from sampler.beam.sample.write import ShardParts, WriteRecordShards

    config, graph = loaded.config, loaded.graph
    prefix, num_shards, template = output_shards(config.output_samples)
    output_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    if output_dir and "://" not in output_dir:
        os.makedirs(output_dir, exist_ok=True)
    pipeline = new_pipeline(loaded.beam_args, config.runner)
    temp_dir = files.join(output_dir or ".", f".temp-samples-{uuid.uuid4().hex[:12]}")
    local = "://" not in temp_dir
    snapshots = files.join(os.path.abspath(temp_dir) if local else temp_dir, "graph")
    parts = ShardParts(temp_dir, num_shards, count_records)
    sampled = build(pipeline, graph, loaded.plan, config, snapshots, parts)
    writer = WriteRecordShards(
        prefix, num_shards, template == "", temp_dir, parts_given=sampled.parts_written
    )
    if sampled.parts_written:  # the `worker` placement wrote the shards' records as parts
        _ = sampled.batches | "Write" >> writer
    else:
        _ = sampled.batches | "CountOutput" >> beam.ParDo(CountOutput()) | "Write" >> writer
    return Construction(pipeline, graph, output_dir, config.output_samples, temp_dir)


def main_body(argv) -> None:
    start = time.time()
    loaded = load(argv)
    config = loaded.config
    if config.runner == sample_in_memory.IN_MEMORY:
        main_in_memory(loaded, start)
        return
    from pipelines.reporting.progress import Progress

    job = construct_loaded(loaded)
    note_output(job.output_dir, lambda: remove_interrupted_run(job.output_dir, config))
    try:
        with Progress(config.progress_interval) as progress:
            result = submit(job.pipeline)  # prints a Dataflow job's id and console URL
            progress.result = result  # a remote job returns at once: poll its counters
            result.wait_until_finish()
        check_interrupted()  # a Ctrl-C that a library caught during the run
    except BaseException:
        # A failed or interrupted run (a full disk while concatenating, a Ctrl-C) leaves no
        # shard that could pass for a complete output; the dead letters stay.
        remove_partial_samples(job.output_dir, config)
        raise
    finally:
        accounting.remove_leftovers(job.output_dir, TEMP_OUTPUTS)
    counters = counters_of(result)
    accounting.check_bad_records(counters, config.max_bad_records, job.output_dir)
    try:
        accounting.check_shuffle(counters)
    except UserError:
        remove_partial_samples(job.output_dir, config)  # written, but not complete
        raise
    issues = accounting.graph_issues(job.graph, counters)
    accounting.check_strict(issues, accounting.parse_strict(config.strict))
    with completing(job.output_dir, config):
        schema_path = write_output_schema(job.graph, job.output_dir, loaded.plan)
        print_summary(result, job.output_samples, schema_path, time.time() - start)
        from pipelines.reporting.resources import resource_lines

        used = sample_resources(job.pipeline, result, config, counters)
        for line in resource_lines(used, used and used.get("output_bytes")):
            print(line)
        cost = used and run_cost.beam_cost(used, counters.get("subgraphs", 0), used["output_bytes"])
        seconds = time.time() - start
        write_run_summary(
            argv, config, counters, job.output_dir, seconds, issues, resources=used, cost=cost
        )
        inputs = accounting.input_files(job.graph, config.sampling_spec, config.input_seeds)
        accounting.write_manifest(job.output_dir, owned_outputs(config), inputs)


@contextlib.contextmanager
def completing(output_dir: str, config: SampleConfig):
    """Around the files that mark a complete run (schema.pbtxt, run_summary.json, the
    manifest's list): when one cannot be written (a full disk), no shard or marker stays."""
    try:
        yield
    except BaseException:
        remove_interrupted_run(output_dir, config)
        raise


def sample_resources(pipeline, result, config: SampleConfig, counters) -> dict | None:
    """pipelines.reporting.resources' figures, with the output's bytes and shuffle bytes per subgraph."""
    from pipelines.reporting.resources import run_resources

    used = run_resources(pipeline)
    if used is None:
        return None
    output = samples_bytes(config)
    subgraphs = counters.get("subgraphs", 0)
    return {
        **used,
        "output_bytes": output,
        "shuffle_bytes_per_subgraph": round(used["shuffle_bytes"] / subgraphs) if subgraphs else 0,
    }


def samples_bytes(config: SampleConfig) -> int:
    """The bytes of the sample shards this run wrote, as they lie on disk (or GCS)."""
    prefix = output_shards(config.output_samples)[0]
    shards = re.compile(owned_outputs(config)[0])
    found = files.stat_files([prefix + "*"])
    return sum(size for path, size, _ in found if shards.fullmatch(path.rsplit("/", 1)[-1]))


def remove_partial_samples(output_dir: str, config: SampleConfig) -> None:
    """Removes the sample shards of a failed run; the dead letters stay."""
    partial = [p for p in owned_outputs(config) if p != accounting.REJECTED_SEEDS_FILE]
    accounting.remove_leftovers(output_dir, partial)


def remove_interrupted_run(output_dir: str, config: SampleConfig) -> None:
    """A run that a signal ended, also once its files were written: only the manifest and the
    dead letters stay (run_main calls this)."""
    partial = [p for p in owned_outputs(config) if p != accounting.REJECTED_SEEDS_FILE]
    accounting.remove_leftovers(output_dir, [*partial, re.escape(accounting.SUMMARY_NAME)])


def write_run_summary(
    argv,
    args,
    counters,
    output_dir: str,
    seconds: float,
    issues,
    resources=None,
    stages=None,
    cost=None,
) -> None:
    """run_summary.json beside the samples, written last (see pipelines.reporting.accounting);
    `stages`: the seconds of each stage of an in-memory run (pipelines.reporting.stage_clock);
    `cost`: what a subgraph cost (pipelines.reporting.cost), also printed as one line."""
    sections = {"stages": stages} if stages is not None else {}
    line = run_cost.cost_line(cost)
    if line:
        print(line)
    data = accounting.summary(
        argv,
        args,
        counters,
        seconds,
        samples=accounting.sample_accounting(counters),
        graph_issues=issues,
        resources=resources,
        cost=cost,
        **sections,
    )
    print(f"summary: {accounting.write_run_summary(output_dir, data)}")


def main_in_memory(loaded: Loaded, start: float) -> None:
    """--runner InMemory: the same records without Beam (see pipelines.sample_in_memory)."""
    config, graph = loaded.config, loaded.graph
    prefix = output_shards(config.output_samples)[0]
    output_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
    if output_dir and "://" not in output_dir:
        os.makedirs(output_dir, exist_ok=True)
    note_output(output_dir, lambda: remove_interrupted_run(output_dir, config))
    from pipelines.reporting.stage_clock import StageClock

    clock = StageClock()
    try:
        counters = sample_in_memory.run(config, graph, loaded.plan, output_dir, clock)
        check_interrupted()
    except BaseException:  # a Ctrl-C or a failure: no partial shard stays (as on Beam)
        remove_partial_samples(output_dir, config)
        raise
    # The same graph issues and --strict as on Beam: a strict failure leaves no completion
    # marker (schema.pbtxt, run_summary.json).
    issues = accounting.graph_issues(graph, counters)
    accounting.check_strict(issues, accounting.parse_strict(config.strict))
    with completing(output_dir, config):
        schema_path = write_output_schema(graph, output_dir, loaded.plan)
        print(f"samples: {config.output_samples}")
        print(f"schema:  {schema_path}")
        print(
            f"subgraphs: {counters.get('subgraphs', 0)} in {time.time() - start:.1f} s (in memory)"
        )
        print(clock.line())
        seconds = time.time() - start
        summary = clock.summary()
        subgraphs = counters.get("subgraphs", 0)
        cost = run_cost.in_process_cost(subgraphs, samples_bytes(config), "InMemory")
        write_run_summary(
            argv_of(config),
            config,
            counters,
            output_dir,
            seconds,
            issues,
            stages=summary,
            cost=cost,
        )
        inputs = accounting.input_files(graph, config.sampling_spec, config.input_seeds)
        accounting.write_manifest(output_dir, owned_outputs(config), inputs)


def argv_of(args) -> list[str]:
    return [f"--{k}={v}" for k, v in sorted(vars(args).items()) if v not in (None, False)]


def counters_of(result) -> dict[str, int]:
    out = collections.Counter()
    for counter in result.metrics().query()["counters"]:
        if counter.key.metric.namespace == "sampler":
            out[counter.key.metric.name] += counter.committed or counter.attempted or 0
    return dict(sorted(out.items()))


def print_summary(result, output: str, schema_path: str, seconds: float) -> None:
    from pipelines.reporting.progress import stage_times, summary_lines

    counters = counters_of(result)
    print(f"samples: {output}")
    print(f"schema:  {schema_path}")
    print(f"subgraphs: {counters.get('subgraphs', 0)} in {seconds:.1f} s")
    for name, value in counters.items():
        if name != "subgraphs" and value and not name.startswith("output_"):
            print(f"  {name}: {value}")
    for line in summary_lines(counters, stage_times(result)):
        print(line)


def main(argv=None) -> int:
    return run_main(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
