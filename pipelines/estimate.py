"""Predicts what a sampling run will produce, and what it takes, before paying for it.

  python -m pipelines.estimate --graph_schema G --sampling_spec S [--input_seeds T]
      [--edge_aggregation_method edge|node] [--seed 0] [--probe_seeds 256]
      [--target_minutes 60] [--num_shards 32] [--stats_cache auto|none|PATH]
      [--refresh_stats] [--json OUT]

1. Degree statistics per edge set (sampler/degree_stats.py): one streaming pass over the
   tables, cached beside the schema in `<schema file>.degree_stats.json` and recomputed
   when a table file's size or modification time changes.
2. A probe (sampler/probe.py): the real sampling kernels on --probe_seeds seeds, one
   streaming pass over the spec's edge tables per hop. It measures the overlap between
   neighbourhoods that degrees alone cannot see; the degree statistics then remove most
   of the probe's noise (sampler/estimate.py). --probe_seeds 0 skips it: the estimate is
   then the degree model alone, which over-predicts on clustered graphs.
3. The prediction, per op and for the whole spec: expected nodes and edges per subgraph,
   bytes per subgraph (exact tf.Example sizes) and in total, and a Dataflow worker count
   and machine type for --target_minutes.
4. Per graph placement (worker, topology, sharded): memory per SDK process, the machine
   type that holds it, vCPU-hours, shuffle GB and a list-price cost, from the rates this
   project measured (sampler/tools/placement_cost.py, docs/dataflow.md).

From a run (--from_run DIR/run_summary.json --num_seeds N ...): a Dataflow job projected from
what a measured run's subgraphs cost (pipelines/estimate_run.py, sampler/tools/run_cost.py);
`python -m pipelines.estimate --from_run X --help` lists its flags.

Link seeds (a symmetric_link_seed_op, --seed_edge_set E): the records are the seed edges (every
edge of E, or the rows of --input_seeds) times 1 + --negatives_per_seed. The probe samples
--probe_seeds seed edges (a uniform sample of E, or of the table's rows) and as many negatives
(same sources, targets from the target set's sample of node ids), weighted 1 : K.

Exit code: 0 success, 1 runtime failure, 2 bad flags or inputs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pyarrow as pa

from pipelines import cli, estimate_run, flags
from pipelines.outputs import tool_outputs
from pipelines.reporting import accounting
from pipelines.toolkit import RowProgress, add_graph_flags, human_bytes, run_tool
from sampler.errors import UserError
from sampler.ids import combine, fingerprint, mix
from sampler.io import files, graph_tables
from sampler.io.graph_tables import read_seeds
from sampler.sample import temporal
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools.degree_stats import BottomK, degree_stats, stats_cache_path
from sampler.tools.estimate import calibrate, estimate, suggest_workers
from sampler.tools.placement_cost import cost_lines, placement_costs
from sampler.tools.probe import mixed, probe_pairs, run_link_probe, run_probe
from sampler.tools.sharded_bound import sharded_flags


def parse_args(argv):
    if estimate_run.wanted(argv):  # the other mode: a projection from a measured run
        return estimate_run.parse_args(argv)
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.estimate",
        description=__doc__,
        epilog=cli.guide("estimate"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_graph_flags(parser, seeds_help="Seed table (default: every node of the seed set).")
    parser.add_argument("--seed", type=int, default=0, help="The --seed of the run to predict.")
    parser.add_argument(
        "--negatives_per_seed", type=int, default=0, help="Link seeds: the run's negatives."
    )
    parser.add_argument(
        "--keep_seed_edges", action="store_true", help="Link seeds: the run keeps seed edges."
    )
    parser.add_argument(
        "--probe_seeds", type=int, default=256, help="Seeds sampled for real (0: degrees only)."
    )
    parser.add_argument(
        "--target_minutes", type=float, default=60.0, help="Wall time to size Dataflow for."
    )
    parser.add_argument("--num_shards", type=int, default=32, help="The run's --num_shards.")
    parser.add_argument(
        "--worker_memory_mb",
        type=float,
        default=4096,
        help="The run's --worker_memory_mb: the --num_shards and --num_buckets that bound a"
        " `sharded` SDK process within it are printed (sampler/tools/sharded_bound.py).",
    )
    parser.add_argument(
        "--stats_cache",
        default="auto",
        help="'auto' (beside the schema), 'none', or a path for the degree statistics cache.",
    )
    parser.add_argument(
        "--refresh_stats", action="store_true", help="Recompute the statistics even if cached."
    )
    parser.add_argument("--json", help="Also write the estimate as JSON to this path.")
    parser.add_argument(
        "--progress_interval", type=float, default=10.0, help="Seconds between progress lines."
    )
    args = parser.parse_args(argv)
    # The flags of the sample run it predicts in sample's ranges, in sample's words.
    flags.check_bounds(args, flags.ESTIMATE_BOUNDS)
    return args


def probe_ids(stats, plan, input_seeds: str | None, count: int):
    """(probe seed ids, number of seeds of the run, their times or None): with a temporal
    spec's seeds table that has a time column, `count` rows drawn uniformly with their times."""
    if input_seeds:
        rows = read_seeds(input_seeds, temporal.table_time_kind(plan))
        if rows.time is not None:  # rows (a seed and its time), not distinct ids
            fps = fingerprint(pa.array(rows.ids.tolist(), pa.binary()))
            keys = mix(combine(fps, np.arange(len(fps), dtype=np.uint64)))
            keep = np.argsort(keys, kind="stable")[:count]
            return rows.ids[keep], len(rows), rows.time[keep]
        pool = BottomK(count)
        column = pa.array(rows.ids.tolist(), pa.binary())
        pool.add(fingerprint(column), column)
        return pool.ids, len(rows), None
    seed_stats = stats.node_sets[plan.seed_set]
    chosen = [bytes.fromhex(h) for h in seed_stats.sample_ids[:count]]
    out = np.empty(len(chosen), dtype=object)
    out[:] = chosen
    return out, seed_stats.count, None


def link_estimate(graph, plan, stats, args):
    """(degree model, result) for link seeds: records = seed edges x (1 + negatives)."""
    progress = RowProgress("seed edges", args.progress_interval)
    source, target, num_seeds, times = probe_pairs(
        graph, plan, args.input_seeds, args.probe_seeds, progress
    )
    progress.done()
    records = num_seeds * (1 + args.negatives_per_seed)
    model = estimate(graph, plan, stats, records)
    if not (args.probe_seeds and len(source)):
        return model, model
    pool = stats.node_sets[plan.link.target].sample_ids
    negatives = np.zeros(0, np.uint64)
    if args.negatives_per_seed and pool:
        picks = np.arange(len(source)) % len(pool)
        negatives = fingerprint(pa.array([bytes.fromhex(pool[i]) for i in picks], pa.binary()))
    progress = RowProgress(f"probe of {len(source)} seed edges", args.progress_interval)
    keep = args.keep_seed_edges
    probe = run_link_probe(graph, plan, source, target, args.seed, progress, keep, times)
    if len(negatives):
        negative = run_link_probe(graph, plan, source, negatives, args.seed, progress, keep, times)
        probe = mixed(probe, negative, args.negatives_per_seed)
    progress.done()
    result = calibrate(graph, plan, stats, model, probe, uniform_seeds=False)
    method = f"probe of {len(source)} seed edges" + (
        f" and {len(negatives)} negatives (weighted 1 : {args.negatives_per_seed})"
        if len(negatives)
        else ""
    )
    return model, dataclasses.replace(result, method=method)


def input_bytes(stats) -> int:
    return sum(
        int(size) for entries in stats.signature["tables"].values() for _, size, _ in entries
    )


def check_outputs(graph, args, cache: str | None) -> None:
    """Before anything is read or written: the statistics cache and --json replace no input
    (the schema, the spec, the seeds, a table file) and hold no link, FIFO or folder
    (pipelines.outputs.tool_outputs); --json does not replace the cache either."""
    inputs = accounting.input_files(graph, args.sampling_spec, args.input_seeds)
    path = stats_cache_path(graph.schema_path) if cache == "auto" else cache
    if path:
        tool_outputs.check("--stats_cache", args.stats_cache, path, inputs)
    if args.json:
        tool_outputs.check("--json", args.json, args.json, [*inputs, *([path] if path else [])])


def main_body(argv) -> int:
    if estimate_run.wanted(argv):
        return estimate_run.main_body(argv)
    args = parse_args(argv)
    graph = load_graph(args.graph_schema)
    plan = make_plan(
        graph,
        load_sampling_spec(args.sampling_spec),
        args.edge_aggregation_method,
        args.seed_edge_set,
    )
    cache = None if args.stats_cache == "none" else args.stats_cache
    check_outputs(graph, args, cache)
    progress = RowProgress("degree statistics", args.progress_interval)
    stats, origin = degree_stats(graph, cache, args.refresh_stats, progress)
    progress.done()
    if plan.link is not None:
        model, result = link_estimate(graph, plan, stats, args)
    else:
        ids_, num_seeds, times = probe_ids(stats, plan, args.input_seeds, args.probe_seeds)
        model = result = estimate(graph, plan, stats, num_seeds)
        if args.probe_seeds and len(ids_):
            progress = RowProgress(f"probe of {len(ids_)} seeds", args.progress_interval)
            probe = run_probe(graph, plan, ids_, args.seed, progress, times)
            progress.done()
            uniform = not args.input_seeds
            result = calibrate(graph, plan, stats, model, probe, uniform_seeds=uniform)
    total_input = input_bytes(stats)
    workers = suggest_workers(result, total_input, args.target_minutes * 60, args.num_shards)
    print_estimate(graph, plan, result, model, origin, args, total_input, workers)
    whole, topology = graph_tables.size_estimates(graph)
    costs = placement_costs(whole, topology, result.total_bytes, workers.vcpu_seconds)
    for line in cost_lines(costs):
        print(line)
    try:
        bound = sharded_flags(
            whole,
            result.num_seeds,
            args.worker_memory_mb,
            record_bytes=result.bytes_per_subgraph,
            num_shards=args.num_shards,
        )
        print(f"  {bound.line()}")
    except UserError as e:
        print(f"  sharded flags: none fit: {e}")
    if args.json:
        data = result.to_json()
        data["degree_model"] = model.to_json()
        data["dataflow"] = {
            "machine_type": workers.machine_type,
            "num_workers": workers.num_workers,
            "vcpu_seconds": workers.vcpu_seconds,
            "target_seconds": workers.target_seconds,
            "placements": [dataclasses.asdict(c) for c in costs],
        }
        with files.create_file(args.json) as f:
            f.write(json.dumps(data, indent=2, sort_keys=True).encode())
        print(f"json:    {args.json}")
    return 0


def print_estimate(graph, plan, result, model, origin, args, total_input, workers) -> None:
    seeds_from = args.input_seeds or f"every node of '{plan.seed_set}'"
    print(f"graph:   {graph.schema_path} ({human_bytes(total_input)} of tables)")
    print(f"stats:   degree statistics {origin}")
    if plan.link is None:
        print(f"seeds:   {result.num_seeds:,} ({seeds_from})")
    else:
        k = args.negatives_per_seed
        seeds_from = args.input_seeds or f"every edge of '{plan.link.edge_set}'"
        print(
            f"seeds:   {result.num_seeds // (1 + k):,} seed edges ({seeds_from}), x (1 + {k}"
            f" negatives): {result.num_seeds:,} examples"
        )
    print(f"method:  {result.method}")
    compare = result is not model
    head = "   degree model" if compare else ""
    print(f"per op, per subgraph:                       frontier      edges{head}")
    model_ops = {op.name: op for op in model.ops}
    for op in result.ops:
        label = f"{op.name} ({op.edge_set}, {op.sample_size})"
        extra = f"  {model_ops[op.name].edges:13.1f}" if compare else ""
        print(f"  {label:40s} {op.frontier:9.1f} {op.edges:10.1f}{extra}")
    print(f"per set, per subgraph:                         size      bytes{head}")
    for kind, sizes, model_sizes in (
        ("nodes", result.nodes, model.nodes),
        ("edges", result.edges, model.edges),
    ):
        for name in sorted(sizes):
            key = f"{kind}/{name}"
            extra = f"  {model_sizes[name]:13.1f}" if compare else ""
            size_bytes = human_bytes(result.set_bytes.get(key, 0.0))
            print(f"  {key:40s} {sizes[name]:9.1f} {size_bytes:>10s}{extra}")
    extra = (
        f"  (degree model: {model.total_nodes:.1f} nodes, {model.total_edges:.1f} edges,"
        f" {human_bytes(model.bytes_per_subgraph)})"
        if compare
        else ""
    )
    print(
        f"subgraph: {result.total_nodes:.1f} nodes, {result.total_edges:.1f} edges,"
        f" {human_bytes(result.bytes_per_subgraph)}{extra}"
    )
    print(f"output:  {human_bytes(result.total_bytes)} in {result.num_seeds:,} records")
    print(
        f"dataflow: {workers.num_workers} x {workers.machine_type} for a"
        f" {args.target_minutes:g} min target (about {workers.vcpu_seconds / 3600:.2f}"
        " vCPU-hours; assumed rates in sampler/estimate.py)"
    )


def main(argv=None) -> int:
    return run_tool(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
