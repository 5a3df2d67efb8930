"""Summarizes sampled subgraphs, or a DGL partition folder, as JSON and PNG charts.

  python -m pipelines.stats --samples 'out/samples-*' [--graph_schema S]
      [--output_dir D] [--max_records N] [--no_plots]
  python -m pipelines.stats --partition out/partitions [--output_dir D] [--no_plots]

Samples: streams every record (a path, glob or base@N pattern) and writes
  D/summary.json   count, bytes, and per node set and edge set the mean, p50, p95, max
                   and min size per subgraph, plus every feature's coverage (rows with a
                   value: not all-NaN, non-empty) and non-zero fraction;
  D/hist_<kind>_<set>.png   a histogram of subgraph sizes per set (640x400).
The schema defaults to the schema.pbtxt the sampler writes beside the samples; D defaults
to a `stats` folder beside them.

Partitions: reads <graph_name>.json and every part<i>/graph.dgl, and writes
  D/partition_stats.json   per partition: inner and HALO nodes per type, owned edges and
                           cut edges per type; overall edge cut and HALO fraction;
  D/partition_stats.png    a bar chart of both (1000x450).
D defaults to a `stats` folder inside the partition folder.

PNGs need matplotlib (the `plot` extra); without it the JSON is still written and a note
says how to install it. Exit code: 0 success, 1 runtime failure, 2 bad flags or inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from pipelines import cli
from pipelines.outputs import tool_outputs
from pipelines.toolkit import human_bytes, make_output_dir, run_tool, writing_to
from sampler.io import files
from sampler.partition.stats import find_config, partition_stats
from sampler.tools import render
from sampler.tools.sample_stats import (
    SampleSummary,
    default_schema,
    iter_subgraphs,
    load_specs,
    sample_files,
)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.stats",
        description=__doc__,
        epilog=cli.guide("stats"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--samples", help="Sampled records: a path, glob or base@N pattern.")
    source.add_argument("--partition", help="A DGL partition folder (or its JSON config).")
    parser.add_argument("--graph_schema", help="Schema of the samples (default: beside them).")
    parser.add_argument("--output_dir", help="Where the JSON and PNGs go (default: ./stats).")
    parser.add_argument("--max_records", type=int, help="Read at most this many records.")
    parser.add_argument("--no_plots", action="store_true", help="Write the JSON only.")
    args = parser.parse_args(argv)
    if args.max_records is not None and args.max_records < 1:
        parser.error("--max_records must be at least 1")
    return args


def _plots(make, out_dir: str) -> list[str]:
    try:
        with writing_to("--output_dir", out_dir):
            return make()
    except render.PlotsUnavailable as e:
        print(f"note: no PNG written: {e}", file=sys.stderr)
        return []


class OutputFolder:
    """Where the report goes: `folder` itself when local; for gs:// and friends, a local
    staging folder whose files `publish` copies to `folder` (the plots are drawn to files)."""

    def __init__(self, folder: str):
        self.folder = folder
        self.remote = files.has_scheme(folder)
        self.local = (
            tempfile.mkdtemp(prefix="beam-graph-stats-")
            if self.remote
            else make_output_dir("--output_dir", folder)
        )

    def path(self, name: str) -> str:
        return os.path.join(self.local, name)

    def check(self, names: list[str], inputs: list[str]) -> None:
        """Before anything is written: no file `names` would replace an input file, or is a
        link, a FIFO or a folder (pipelines.outputs.tool_outputs)."""
        for name in names:
            where = self.shown(name) if self.remote else self.path(name)
            tool_outputs.check("--output_dir", self.folder, where, inputs)

    def shown(self, name: str) -> str:
        return files.join(self.folder, name)

    def publish(self) -> None:
        if not self.remote:
            return
        try:
            for name in sorted(os.listdir(self.local)):
                with open(self.path(name), "rb") as src, files.write_output(self.shown(name)) as f:
                    shutil.copyfileobj(src, f, 1 << 24)
        finally:
            shutil.rmtree(self.local, ignore_errors=True)


def write_json(out: OutputFolder, name: str, data: dict) -> None:
    with writing_to("--output_dir", out.folder), files.open_new(out.path(name), "w") as f:
        json.dump(data, f, indent=2, sort_keys=True)


def sample_report(args) -> int:
    out = OutputFolder(_sample_out_dir(args))
    try:
        code = _sample_report(args, out)
        out.publish()
        return code
    finally:
        if out.remote:
            shutil.rmtree(out.local, ignore_errors=True)


def _sample_out_dir(args) -> str:
    first = args.samples.rsplit("/", 1)[0] if "/" in args.samples else "."
    return args.output_dir or os.path.join(first, "stats")


def _sample_report(args, out: OutputFolder) -> int:
    schema = args.graph_schema or default_schema(args.samples)
    specs = load_specs(schema)
    summary = SampleSummary(specs)
    for path, _, size, subgraph in iter_subgraphs(args.samples, specs):
        summary.add(subgraph, size, path)
        if args.max_records and summary.count >= args.max_records:
            break
    inputs = [*sample_files(args.samples), schema]
    if summary.count == 0:  # a finished output with no record (e.g. no seed): 0 subgraphs
        out.check(["summary.json"], inputs)
        return empty_sample_report(args, schema, out)
    plots = [] if args.no_plots else [render.histogram_name(k) for k in summary.size_arrays()]
    out.check(["summary.json", *plots], inputs)
    data = {"samples": args.samples, "schema": schema, **summary.to_json()}
    write_json(out, "summary.json", data)
    b = data["bytes"]
    print(f"samples: {args.samples} ({data['files']} files, schema {schema})")
    print(
        f"subgraphs: {data['count']:,}, {human_bytes(b['total'])}"
        f" (per subgraph: mean {human_bytes(b['mean'])}, p95 {human_bytes(b['p95'])},"
        f" max {human_bytes(b['max'])})"
    )
    print(f"{'size per subgraph':32s} {'mean':>9s} {'p50':>7s} {'p95':>7s} {'max':>7s}")
    for kind in ("node_sets", "edge_sets"):
        for name, entry in data[kind].items():
            label = f"{'nodes' if kind == 'node_sets' else 'edges'}/{name}"
            print(
                f"  {label:30s} {entry['mean']:9.1f} {entry['p50']:7.0f} {entry['p95']:7.0f}"
                f" {entry['max']:7d}"
            )
    partial = [
        f"{'nodes' if kind == 'node_sets' else 'edges'}/{name}.{feature} {cov['coverage']:.1%}"
        for kind in ("node_sets", "edge_sets")
        for name, entry in data[kind].items()
        for feature, cov in entry["features"].items()
        if cov["coverage"] < 1.0
    ]
    print("feature coverage: " + ("100% everywhere" if not partial else ", ".join(partial)))
    print(f"json:    {out.shown('summary.json')}")
    if not args.no_plots:
        paths = _plots(lambda: render.size_histograms(summary.size_arrays(), out.local), out.folder)
        if paths:
            print(f"png:     {len(paths)} histograms in {out.folder} (hist_*.png)")
    return 0


def empty_sample_report(args, schema: str, out: OutputFolder) -> int:
    """summary.json and the lines of an output that holds no record."""
    count_files = len(sample_files(args.samples))
    data = {"samples": args.samples, "schema": schema, "files": count_files, "count": 0}
    write_json(out, "summary.json", data)
    print(f"samples: {args.samples} ({count_files} files, schema {schema})")
    print("subgraphs: 0 (the files hold no record)")
    print(f"json:    {out.shown('summary.json')}")
    return 0


def partition_report(args) -> int:
    report = partition_stats(args.partition)
    folder = os.path.dirname(find_config(args.partition))
    out = OutputFolder(args.output_dir or os.path.join(folder, "stats"))
    try:
        code = _partition_report(args, report, out)
        out.publish()
        return code
    finally:
        if out.remote:
            shutil.rmtree(out.local, ignore_errors=True)


def _partition_report(args, report: dict, out: OutputFolder) -> int:
    config = find_config(args.partition)
    folder = os.path.dirname(config)
    names = ["partition_stats.json", *([] if args.no_plots else ["partition_stats.png"])]
    out.check(names, [config, *partition_files(folder)])
    write_json(out, "partition_stats.json", report)
    print(f"partition: {report['config']} ({report['num_parts']} parts)")
    if report["missing_parts"]:
        print(f"note: {missing_line(report)}")
    print(
        f"nodes {report['num_nodes']:,}, edges {report['num_edges']:,}, edge cut"
        f" {report['edge_cut']:.1%}, HALO fraction {report['halo_fraction']:.1%},"
        f" node balance (max/mean) {report['node_balance_max_over_mean']:.2f}"
    )
    for part in report["partitions"]:
        nodes = ", ".join(f"{k} {v:,}" for k, v in part["inner_nodes"].items())
        edges = ", ".join(
            f"{k.split(':')[1] if ':' in k else k} {v:,}" for k, v in part["edges"].items()
        )
        print(
            f"  part {part['partition']}: nodes {nodes}; HALO {part['halo_nodes_total']:,}"
            f" ({part['halo_fraction']:.1%}); edges {edges}; cut {part['cut_edges_total']:,}"
        )
    if not report["matches_json_maps"]:
        print("warning: inner node/edge counts differ from the JSON's node_map/edge_map")
    print(f"json:    {out.shown('partition_stats.json')}")
    if not args.no_plots:
        paths = _plots(
            lambda: [render.partition_chart(report, out.path("partition_stats.png"))], out.folder
        )
        if paths:
            print(f"png:     {out.shown('partition_stats.png')}")
    return 0


def partition_files(folder: str) -> list[str]:
    """The files of the parts (part<i>/...) of a partition folder: inputs of its report."""
    found = []
    for name in sorted(os.listdir(folder or ".")):
        part = os.path.join(folder, name)
        if name.startswith("part") and os.path.isdir(part):
            found += [os.path.join(part, f) for f in sorted(os.listdir(part))]
    return found


def missing_line(report: dict) -> str:
    """'part 1 of 2 is not here (part1/graph.dgl): stats of part 0 only' (a DistDGL machine
    holds its own part)."""
    missing, total = report["missing_parts"], report["num_parts"]
    present = [p["partition"] for p in report["partitions"]]

    def parts(ids):
        return ("part " if len(ids) == 1 else "parts ") + ", ".join(map(str, ids))

    verb = "is" if len(missing) == 1 else "are"
    files = ", ".join(report["missing_files"][:3]) + (", ..." if len(missing) > 3 else "")
    return f"{parts(missing)} of {total} {verb} not here ({files}): stats of {parts(present)} only"


def main_body(argv) -> int:
    args = parse_args(argv)
    return partition_report(args) if args.partition else sample_report(args)


def main(argv=None) -> int:
    return run_tool(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
