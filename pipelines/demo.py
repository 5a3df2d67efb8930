"""Samples the embedded default graph: a 2,000-paper OGBN-MAG-shaped graph generated
deterministically, with MAG's SamplingSpec, on the local (offline) runner.

  python -m pipelines.demo [--output_dir out/demo] [--num_papers 2000] [any pipelines.sample flag]

Prints where the samples are and a short summary of what is in them.
"""

from __future__ import annotations

import argparse
import glob
import os

import numpy as np

from pipelines import cli
from pipelines import sample as sample_cli
from pipelines.runtime.runner import run_main
from sampler.io import tfrecord
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.schema import load_graph
from sampler.tools import synthetic


def main_body(argv) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=cli.guide("demo"),
    )
    parser.add_argument("--output_dir", default="out/demo")
    parser.add_argument("--num_papers", type=int, default=2000)
    args, rest = parser.parse_known_args(argv)
    graph_dir = os.path.join(args.output_dir, "graph")
    schema = synthetic.write_graph(
        synthetic.generate_mag(args.num_papers, seed=0), graph_dir, fmt="tfrecord"
    )
    spec = synthetic.write_sampling_spec(
        synthetic.mag_sampling_spec(), os.path.join(args.output_dir, "sampling_spec.pbtxt")
    )
    print(f"graph:   {schema} ({args.num_papers} papers, MAG-shaped, generated with seed 0)")
    print(f"spec:    {spec}")
    samples = os.path.join(args.output_dir, "samples", "samples@4")
    # The demo owns its output folder: a second run replaces the first one's samples.
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", samples]
    sample_cli.main_body([*argv, "--overwrite", *rest])
    print_contents(schema, os.path.join(args.output_dir, "samples", "samples-*"))


def print_contents(schema: str, pattern: str) -> None:
    """Mean nodes and edges per subgraph, read back from the records."""
    specs = encode_specs(load_graph(schema).schema)
    sizes: dict[str, list[int]] = {}
    count = 0
    for path in sorted(glob.glob(pattern)):  # the project's TFRecord reader: no TensorFlow
        with open(path, "rb") as f:
            for _, record in tfrecord.records(path, f):
                subgraph = decode_subgraph(record, specs)
                count += 1
                for name, rows in subgraph.node_sets.items():
                    sizes.setdefault(f"nodes/{name}", []).append(len(rows.ids))
                for name, rows in subgraph.edge_sets.items():
                    sizes.setdefault(f"edges/{name}", []).append(len(rows.source))
    print(f"read back {count} GraphTensor examples; mean size per subgraph:")
    for name, values in sorted(sizes.items()):
        print(f"  {name:28s} {np.mean(values):8.1f}  (max {max(values)})")


def main(argv=None) -> int:
    return run_main(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
