"""`beam-graph estimate --from_run`: a Dataflow job projected from a measured run.

  beam-graph estimate --from_run DIR/run_summary.json --num_seeds N [--baseline_run SMALL]
      [--feature_bytes_scale X] [--cpu_scale Y] [--machine_type n1-standard-4] [--target_hours H]

Reads the run's `cost` block (CPU seconds, bytes of records and bytes shuffled per subgraph,
the largest SDK worker's peak RSS; pipelines/reporting/cost.py) and prints the machine type,
workers, vCPU-hours, hours and dollars at list price for N seeds, with the formula and its
numbers (sampler/tools/run_cost.py). --baseline_run, a run of the same graph on fewer seeds,
makes it take what one more subgraph costs, without the fixed costs. --feature_bytes_scale multiplies the bytes per subgraph
(records and shuffles), e.g. for wider features than the run's; --cpu_scale the CPU per
subgraph (default: --feature_bytes_scale, an upper bound when only the features grow).

Exit code: 0 success, 2 bad flags or a run summary without a cost block.
"""

from __future__ import annotations

import argparse
import json

from pipelines import cli, flags
from sampler.errors import UserError
from sampler.io import files
from sampler.tools.run_cost import machine, marginal, project, projection_lines

FLAG = "--from_run"
BOUNDS = {
    name: flags.Bound(positive=True)
    for name in ("num_seeds", "feature_bytes_scale", "cpu_scale", "target_hours")
}


def wanted(argv) -> bool:
    """True when `argv` asks for a projection from a run (estimate's other mode)."""
    return any(a == FLAG or a.startswith(FLAG + "=") for a in argv)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.estimate --from_run",
        description=__doc__,
        epilog=cli.guide("estimate"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(FLAG, required=True, help="A run's run_summary.json, or its folder.")
    parser.add_argument(
        "--num_seeds", type=int, required=True, help="Seeds (subgraphs) of the job to project."
    )
    parser.add_argument(
        "--baseline_run",
        help="A run of the same graph, spec, placement and runner on fewer seeds: the"
        " projection then takes what one more subgraph costs (the fixed costs drop out).",
    )
    parser.add_argument(
        "--feature_bytes_scale",
        type=float,
        default=1.0,
        help="Multiplies the bytes of records and shuffles per subgraph (default 1).",
    )
    parser.add_argument(
        "--cpu_scale",
        type=float,
        help="Multiplies the CPU per subgraph (default: --feature_bytes_scale).",
    )
    parser.add_argument(
        "--machine_type",
        help="Dataflow worker machine type (default: the first of n1-standard-4, n1-highmem-4,"
        " n2-highmem-4, n2-highmem-8 whose memory per vCPU holds the run's largest worker).",
    )
    parser.add_argument(
        "--target_hours", type=float, default=1.0, help="Wall hours to size the workers for."
    )
    args = parser.parse_args(argv)
    flags.check_bounds(args, BOUNDS)
    if args.machine_type:
        machine(args.machine_type)
    return args


def read_cost(path: str, flag: str = FLAG) -> tuple[str, dict]:
    """(the summary's path, its `cost` block); UserError in one line when there is none."""
    if not path.endswith(".json"):
        path = files.join(path, "run_summary.json")
    if not files.exists(path):
        raise UserError(f"{flag} {path}: no such file (a sample run's run_summary.json)")
    try:
        with files.open_file(path) as f:
            data = json.loads(f.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise UserError(f"{flag} {path}: not a run summary (not JSON: {e})") from e
    cost = data.get("cost") if isinstance(data, dict) else None
    if not isinstance(cost, dict):
        raise UserError(
            f"{FLAG} {path}: no `cost` block (a sample run of this version writes one;"
            " a Dataflow run or a partition run does not)"
        )
    if not cost.get("subgraphs") or cost.get("cpu_seconds_per_subgraph") is None:
        raise UserError(f"{flag} {path}: the run wrote no subgraph; nothing to project from")
    return path, cost


def main_body(argv) -> int:
    args = parse_args(argv)
    path, cost = read_cost(args.from_run)
    runner = f"{cost['runner']}, " if cost.get("runner") else ""
    print(f"run:     {path} ({runner}{cost['subgraphs']:,} subgraphs)")
    print(
        f"per subgraph (measured): {cost['cpu_seconds_per_subgraph'] * 1000:,.3f} CPU-ms,"
        f" {cost['output_bytes_per_subgraph'] / 1000:,.1f} kB of records,"
        f" {(cost['shuffle_bytes_per_subgraph'] or 0) / 1000:,.1f} kB shuffled;"
        f" largest SDK worker {cost['largest_worker_peak_rss_mb'] or 0:,.0f} MB peak RSS"
    )
    if args.baseline_run:
        base_path, baseline = read_cost(args.baseline_run, "--baseline_run")
        cost = marginal(cost, baseline)
        print(
            f"marginal (against {base_path}, {baseline['subgraphs']:,} subgraphs): CPU-s per"
            f" subgraph = ({cost['worker_cpu_seconds']:,.2f} - {baseline['worker_cpu_seconds']:,.2f})"
            f" / ({cost['subgraphs']:,} - {baseline['subgraphs']:,})"
            f" = {cost['cpu_seconds_per_subgraph'] * 1000:,.3f} CPU-ms, fixed"
            f" {cost['fixed_cpu_seconds']:,.1f} CPU-s; bytes likewise"
            f" ({cost['output_bytes_per_subgraph'] / 1000:,.1f} kB of records,"
            f" {cost['shuffle_bytes_per_subgraph'] / 1000:,.1f} kB shuffled)"
        )
    projection = project(
        cost,
        args.num_seeds,
        args.feature_bytes_scale,
        args.cpu_scale,
        args.machine_type,
        args.target_hours,
    )
    for line in projection_lines(projection):
        print(line)
    return 0
