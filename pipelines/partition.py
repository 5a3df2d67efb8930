"""Partitions a Unigraph into the folder `dgl.distributed.partition_graph` writes, on Beam.

  python -m pipelines.partition --graph_schema G --output_dir OUT --graph_name mag \\
      --num_parts 4 [--part_method random|metis|lp] [--balance_ntypes train_mask] \\
      [--balance_edges] [--num_hops 1] [--seed 0] [--split paper:0.8,0.1,0.1] \\
      [--layout dgl|graphstorm] [--labels label] [--runner InMemory]

Writes OUT/<graph_name>.json, OUT/part<i>/{graph,node_feat,edge_feat,orig_nids,orig_eids}.dgl,
OUT/node_ids/<node set>/*.parquet (#id -> type-wise ids), OUT/cut_report.json (edge cut
and balance) and, with --layout graphstorm, OUT/raw_id_mappings/<node set>/part-*.parquet.
No DGL or torch is needed. Every flag this CLI does not define goes to Beam's
PipelineOptions. With --runner InMemory the same files come from one process without Beam
(pipelines/partition_in_memory.py), for graphs that fit its memory.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time

from pipelines import cli, flags, partition_in_memory
from pipelines.reporting import accounting
from pipelines.runtime.interrupts import check_interrupted
from pipelines.runtime.runner import note_output, run_main
from sampler.beam.partition.config import METHODS, PartitionConfig
from sampler.errors import UserError
from sampler.io import files
from sampler.partition.assign import METIS_MAX_ADJACENCY
from sampler.partition.graph import GraphTypes
from sampler.partition.output_format import DEFAULT_LABELS, LAYOUTS, RAW_ID_DIR, parse_split
from sampler.partition.report import LEGACY_REPORT_NAME, REPORT_NAME
from sampler.schema import load_graph

PART_FILES = "graph|node_feat|edge_feat|orig_nids|orig_eids"  # part<i>/<name>.dgl


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.partition",
        description=__doc__,
        epilog=cli.guide("partition"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--graph_schema", required=True, help="GraphSchema pbtxt, or a directory holding one."
    )
    parser.add_argument("--output_dir", required=True, help="Folder for the partitions.")
    parser.add_argument(
        "--graph_name", required=True, help="Letters, digits and underscores (DGL's rule)."
    )
    parser.add_argument("--num_parts", type=int, required=True, help="Number of partitions.")
    parser.add_argument("--part_method", choices=METHODS, default="random")
    parser.add_argument(
        "--balance_ntypes",
        default=None,
        help="A scalar integer node feature (e.g. a train mask): its values are balanced "
        "per node type, like DGL's balance_ntypes.",
    )
    parser.add_argument(
        "--balance_edges", action="store_true", help="Also balance the edges each part owns."
    )
    parser.add_argument(
        "--num_hops",
        type=int,
        default=1,
        help="HALO hops: in-edges walked back from each partition's nodes (DGL's num_hops).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Same seed, same output bytes.")
    parser.add_argument(
        "--split",
        action="append",
        default=[],
        metavar="NTYPE:TRAIN,VAL,TEST",
        help="Write train_mask, val_mask and test_mask (1-D int8) for the nodes of NTYPE, "
        "drawn per node from its id and --seed (e.g. paper:0.8,0.1,0.1); repeat per node set.",
    )
    parser.add_argument(
        "--layout",
        choices=LAYOUTS,
        default="dgl",
        help="dgl: DGL's dtypes. graphstorm: what GraphStorm's gconstruct writes (numeric "
        "features other than --labels and masks as 2-D float32, plus raw_id_mappings/).",
    )
    parser.add_argument(
        "--labels",
        default=None,
        help="Comma-separated feature names that are training targets: --layout graphstorm "
        "keeps them as they are (default: label).",
    )
    parser.add_argument(
        "--num_shards",
        type=int,
        default=8,
        help="Node shards per node type: the parallelism of the node-sharded stages (raise it "
        "with the graph on Dataflow; the partition files are the same bytes for any value).",
    )
    parser.add_argument(
        "--lp_rounds",
        type=int,
        default=5,
        help="Balanced label propagation rounds that refine lp's start (--part_method lp).",
    )
    parser.add_argument(
        "--lp_cluster_rounds",
        type=int,
        default=6,
        help="--part_method lp: rounds of label propagation clustering whose clusters, packed "
        "into parts, are the start of the --lp_rounds rounds (0: start from random parts).",
    )
    parser.add_argument(
        "--metis_max_adjacency",
        type=int,
        default=METIS_MAX_ADJACENCY,
        help="metis refuses graphs with more adjacency entries (both directions) than this.",
    )
    parser.add_argument(
        "--runner",
        default=None,
        help="Beam runner (default: local FnApiRunner, offline), or InMemory: the same files "
        "from one process without Beam, for a graph that fits in --memory_mb.",
    )
    parser.add_argument(
        "--memory_mb",
        type=int,
        default=None,
        help="--runner InMemory: the memory it may use (default: what the machine has "
        "available, /proc/meminfo); a graph estimated to need more is refused.",
    )
    parser.add_argument(
        "--max_bad_records",
        type=int,
        default=0,
        help="Input rows that cannot be read are skipped and written to"
        " OUT/bad_records-*.jsonl; more than this many fail the run.",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace the partitions of an earlier run in --output_dir (deleted first).",
    )
    parser.add_argument(
        "--strict",
        default="",
        help="Comma-separated graph checks that fail the run instead of being counted:"
        " dangling_edges,duplicate_ids,self_loops,parallel_edges,empty_sets (or all).",
    )
    return flags.parse(parser, argv, RUNNER_RULES)


# --memory_mb sizes --runner InMemory's one process: the Beam runners refuse it
# (pipelines.flags); InMemory takes every other flag of this CLI.
RUNNER_RULES = flags.RunnerRules(beam_ignores=("memory_mb",))


def make_config(args, graph) -> PartitionConfig:
    flags.check_graph_name(args.graph_name)
    check_numbers(args)
    split = tuple(parse_split(text, args.seed) for text in args.split)
    names = [ntype for ntype, _ in split]
    if len(set(names)) < len(names):
        raise UserError(f"--split: node set '{names[0]}' is given more than once")
    labels = DEFAULT_LABELS if args.labels is None else tuple(args.labels.split(","))
    types = GraphTypes.from_graph(graph, splits=dict(split), layout=args.layout, labels=labels)
    if args.labels is not None:
        features = {n for specs in types.node_features.values() for n in specs}
        features |= {n for specs in types.edge_features.values() for n in specs}
        missing = [n for n in labels if n not in features]
        if missing:
            raise UserError(f"--labels: no node or edge set has a feature '{missing[0]}'")
    if args.balance_ntypes:
        found = False
        for name, specs in types.node_features.items():
            spec = specs.get(args.balance_ntypes)
            if spec is None:
                continue
            if spec.kind != "int" or spec.shape:
                raise UserError(
                    f"--balance_ntypes {args.balance_ntypes}: node set '{name}' has it as a "
                    f"{spec.kind} feature of shape {list(spec.shape)}; it must be a scalar "
                    "integer or boolean"
                )
            found = True
        if not found:
            raise UserError(
                f"--balance_ntypes {args.balance_ntypes}: no node set has a feature of that name"
            )
    return PartitionConfig(
        graph_name=args.graph_name,
        num_parts=args.num_parts,
        part_method=args.part_method,
        seed=args.seed,
        num_shards=args.num_shards,
        balance_ntypes=args.balance_ntypes,
        balance_edges=args.balance_edges,
        num_hops=args.num_hops,
        lp_rounds=args.lp_rounds,
        lp_cluster_rounds=args.lp_cluster_rounds,
        metis_max_adjacency=args.metis_max_adjacency,
        layout=args.layout,
        split=split,
        labels=labels,
    )


def check_numbers(args) -> None:
    """Every count and seed in its range, one line each (before anything is read)."""
    if args.num_hops < 1:
        raise UserError(
            f"--num_hops {args.num_hops}: must be at least 1 (with 0, DGL keeps no edge "
            "between partitions, so cut edges would be lost)"
        )
    flags.check_bounds(args, flags.PARTITION_BOUNDS)


@dataclasses.dataclass
class Construction:
    """A partition pipeline built from the CLI flags but not run yet."""

    pipeline: object  # apache_beam.Pipeline
    graph: object
    output_dir: str  # --output_dir without a trailing slash
    config: PartitionConfig


def construct(argv) -> Construction:
    """Parses `argv`, checks the flags against the graph and builds the whole pipeline (read,
    partition, write, bad records) without running it.

    `main` runs what this returns; tests build the same pipeline for other runners (for
    example a Dataflow dry run) through exactly this code path. Nothing is written, and
    --output_dir is not looked at (check_output does that).
    """
    from pipelines.runtime.runner import new_pipeline
    from sampler.beam.partition import PartitionGraph

    args, beam_args = parse_args(argv)
    graph = load_graph(args.graph_schema)
    config = make_config(args, graph)  # type-name and feature-name checks before running
    output_dir = args.output_dir.rstrip("/")
    pipeline = new_pipeline(beam_args, args.runner)
    partition = pipeline | "Partition" >> PartitionGraph(
        graph, config, output_dir, args.max_bad_records
    )
    accounting.write_bad_records(partition.bad_records, output_dir)
    return Construction(pipeline, graph, output_dir, config)


def main_body(argv) -> None:
    start = time.time()
    args, beam_args = parse_args(argv)
    if args.runner == partition_in_memory.IN_MEMORY:
        hooks = partition_in_memory.PartitionCli(
            make_config, check_output, owned_outputs, remove_interrupted_run, print_summary
        )
        partition_in_memory.main(argv, args, beam_args, start, hooks)
        return
    from pipelines.reporting.resources import resource_lines, run_resources
    from pipelines.runtime.runner import submit

    job = construct(argv)
    output_dir = job.output_dir
    check_output(job.graph, args, output_dir)
    note_output(output_dir, lambda: remove_interrupted_run(output_dir, args))
    try:
        result = submit(job.pipeline)  # prints a Dataflow job's id and console URL
        result.wait_until_finish()
        check_interrupted()  # a Ctrl-C that a library caught during the run
    except BaseException:
        # A failed or interrupted run (a full disk, a Ctrl-C) leaves no part folder, node id table, DGL config
        # or report that could pass for a complete partitioning: only the manifest stays.
        accounting.remove_leftovers(output_dir, owned_outputs(args))
        raise
    finally:
        accounting.remove_leftovers(output_dir, [r"beam-temp-bad_records-[0-9a-f]+/.*"])
    counters = accounting.beam_counters(result)
    issues = accounting.graph_issues(job.graph, counters)
    try:
        accounting.check_bad_records(counters, args.max_bad_records, output_dir)
        accounting.check_strict(issues, accounting.parse_strict(args.strict))
    except UserError:
        # Nothing of a failed run could pass for partitions (the DGL config marks them as
        # loadable): all its files go, every folder (raw_id_mappings/ too); dead letters stay.
        accounting.remove_leftovers(output_dir, owned_outputs(args))
        raise
    with files.open_stream(f"{output_dir}/{REPORT_NAME}") as f:
        report = json.loads(f.read().decode("utf-8"))
    print_summary(report, output_dir, time.time() - start)
    used = run_resources(job.pipeline)
    for line in resource_lines(used):
        print(f"{line.split(':', 1)[0] + ':':11s} {line.split(':', 1)[1].strip()}")
    data = accounting.summary(
        argv, args, counters, time.time() - start,
        partition=accounting.partition_accounting(job.graph, report, counters),
        graph_issues=issues,
        resources=used,
    )  # fmt: skip
    try:  # a full disk: no part, table or marker of the run stays
        print(f"summary:    {accounting.write_run_summary(output_dir, data)}")
        inputs = accounting.input_files(job.graph)
        accounting.write_manifest(output_dir, owned_outputs(args), inputs)
    except BaseException:
        remove_interrupted_run(output_dir, args)
        raise


def remove_interrupted_run(output_dir: str, args) -> None:
    """A run that a signal ended, also once its files were written: only the manifest and the
    dead letters stay (run_main calls this)."""
    patterns = [*owned_outputs(args), re.escape(accounting.SUMMARY_NAME)]
    accounting.remove_leftovers(output_dir, patterns)


def owned_outputs(args) -> list[str]:
    """Regular expressions (relative to --output_dir) of the files a run writes."""
    return [
        re.escape(f"{args.graph_name}.json"),
        re.escape(REPORT_NAME),
        rf"part\d+/({PART_FILES})\.dgl",
        r"node_ids/[^/]+/[^/]+-\d{5}-of-\d{5}\.parquet",
        re.escape(RAW_ID_DIR) + r"/[^/]+/part-\d{5}\.parquet",
        re.escape(LEGACY_REPORT_NAME),  # an earlier version's report
    ]


def output_examples(args, graph) -> list[str]:
    """One name (relative to --output_dir) of each kind of file a run writes, for the check
    that no input pattern would read them (pipelines.outputs.input_checks); one per owned pattern, and
    accounting.COMMON_OUTPUTS (tests/test_output_folders.py checks)."""
    out = [f"{args.graph_name}.json", REPORT_NAME, LEGACY_REPORT_NAME]
    out += [f"part0/{name}.dgl" for name in PART_FILES.split("|")]
    for name in graph.node_sets:
        out += [f"node_ids/{name}/{name}-00000-of-00001.parquet"]
        out += [f"{RAW_ID_DIR}/{name}/part-00000.parquet"]
    out += [accounting.SUMMARY_NAME, "bad_records-00000-of-00001.jsonl"]
    out += ["part0/.graph.dgl.partial-12345"]  # a file being written (files.write_output)
    return out + [accounting.MANIFEST_NAME, "beam-temp-bad_records-0123456789ab/part-0"]


def check_output(graph, args, output_dir: str) -> None:
    """Configuration errors of --output_dir before anything runs (pipelines.reporting.accounting), and
    the hold of the folder (pipelines.outputs.output_lock); then the manifest of the run's files is
    written (a folder that cannot be written fails here)."""
    accounting.parse_strict(args.strict)
    owned = owned_outputs(args)
    input_files = accounting.input_files(graph)
    accounting.check_output(
        output_dir, owned, accounting.input_patterns(graph), args.overwrite, "--output_dir",
        dedicated=True, files=input_files, examples=output_examples(args, graph),
    )  # fmt: skip
    note_output(output_dir)  # held by this run: its clean-up may remove what it wrote
    accounting.write_manifest(output_dir, owned, input_files)


def print_summary(report: dict, output_dir: str, seconds: float) -> None:
    print(f"partitions: {output_dir}/{report['graph_name']}.json")
    print(f"report:     {output_dir}/{REPORT_NAME}")
    print(
        f"{report['part_method']}: {report['num_parts']} parts, {report['num_nodes']:,} nodes, "
        f"{report['num_edges']:,} edges in {seconds:.1f} s"
    )
    print(f"  edge cut {report['edge_cut']:.4f} ({report['cut_edges']:,} edges)")
    for name, b in report["node_balance"].items():
        print(f"  {name:20s} nodes per part {b['counts']} (max/mean {b['max_over_mean']:.3f})")
    b = report["edge_balance"]
    print(f"  {'edges':20s} owned per part {b['counts']} (max/mean {b['max_over_mean']:.3f})")


def main(argv=None) -> int:
    return run_main(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
