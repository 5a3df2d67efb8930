"""Writes a synthetic OGBN-MAG-shaped graph (Unigraph tables + graph_schema.pbtxt).

  python -m pipelines.generate --num_papers 100000 --output_dir /tmp/mag \\
      [--format tfrecord|csv|parquet] [--num_shards K] [--feature_dim 16] \\
      [--all_node_features] [--hub_fraction 0.2] [--edge_weights] [--seed 0] [--write_spec]
      [--temporal]

Prints the schema path and the number of rows of every node set and edge set.
"""

from __future__ import annotations

import argparse
import sys
import time

from pipelines import cli
from pipelines.runtime.runner import run_main
from sampler.tools.mag_spec import temporal_mag_sampling_spec
from sampler.tools.synthetic import (
    generate_mag,
    mag_sampling_spec,
    write_graph,
    write_sampling_spec,
)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.generate",
        description=__doc__.split("\n")[0],
        epilog=cli.guide("generate"),
    )
    parser.add_argument("--num_papers", type=int, required=True, help="number of paper nodes")
    parser.add_argument("--output_dir", required=True, help="directory for the tables and schema")
    parser.add_argument("--format", default="tfrecord", choices=["tfrecord", "csv", "parquet"])
    parser.add_argument("--num_shards", type=int, default=1, help="files per table (base@N)")
    parser.add_argument("--feature_dim", type=int, default=16, help="width of paper.feat")
    parser.add_argument(
        "--all_node_features",
        action="store_true",
        help="give author/institution/field_of_study a table and a small `feat` (else latent)",
    )
    parser.add_argument(
        "--hub_fraction",
        type=float,
        default=0.0,
        help="paper p0 is cited by this fraction of papers",
    )
    parser.add_argument("--edge_weights", action="store_true", help="add a float `weight` to cites")
    parser.add_argument(
        "--num_clusters", type=int, default=None, help="communities (default ~sqrt)"
    )
    parser.add_argument(
        "--intra_cluster", type=float, default=0.9, help="fraction of intra-cluster edges"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--temporal",
        action="store_true",
        help="give cites, writes and written a `year` (their paper's); with --write_spec, the"
        " MAG spec sampled by time (docs/sampling.md, 'Temporal sampling')",
    )
    parser.add_argument(
        "--write_spec",
        action="store_true",
        help="also write the MAG spec to output_dir/sampling_spec.pbtxt",
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> str:
    start = time.time()
    graph = generate_mag(
        args.num_papers,
        seed=args.seed,
        feature_dim=args.feature_dim,
        all_node_features=args.all_node_features,
        hub_fraction=args.hub_fraction,
        edge_weights=args.edge_weights,
        num_clusters=args.num_clusters,
        intra_cluster=args.intra_cluster,
        edge_years=args.temporal,
    )
    generated = time.time()
    schema_path = write_graph(graph, args.output_dir, fmt=args.format, num_shards=args.num_shards)
    print(f"schema: {schema_path}")
    if args.write_spec:
        spec = temporal_mag_sampling_spec() if args.temporal else mag_sampling_spec()
        spec_path = write_sampling_spec(spec, args.output_dir.rstrip("/") + "/sampling_spec.pbtxt")
        print(f"sampling spec: {spec_path}")
    for name, count in graph.counts().items():
        stored = "latent" if name not in graph.tables and name in graph.num_nodes else ""
        print(f"  {name:16s} {count:>12,d} {stored}".rstrip())
    print(f"generated in {generated - start:.1f}s, written in {time.time() - generated:.1f}s")
    return schema_path


def main_body(argv) -> None:
    run(parse_args(argv))


def main(argv=None) -> int:
    """A UserError is one line and exit code 2; a report that cannot be written is a note
    (pipelines.runtime.runner.run_main)."""
    return run_main(main_body, argv)


if __name__ == "__main__":
    sys.exit(main())
