"""Time-respecting samples of a MAG-shaped graph, and a TF-GNN model trained on the past and
validated on the future.

    python examples/temporal_mag.py --output_dir out/temporal_mag [--num_papers 2000]

1. `pipelines.generate --temporal --write_spec`: a MAG-shaped graph whose `cites`, `writes`
   and `written` edges carry the `year` of their paper end, and the MAG sampling spec with
   `temporal_seed { node_time_feature: "year" }` and a `temporal` rule on those three ops: a
   seed paper's subgraph holds no citation of, and no author's paper from, a later year.
2. `pipelines.sample --runner InMemory`: one GraphTensor per paper, with its year as the
   context feature `seed_time`.
3. `examples/train_tfgnn.py --validate_from YEAR`: trains on the papers before YEAR and
   validates on the papers of YEAR and later.

Prints each step's command and the training report (JSON).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--num_papers", type=int, default=2000)
    parser.add_argument("--validate_from", type=int, default=2018, help="First validated year.")
    parser.add_argument("--epochs", type=int, default=5)
    args = parser.parse_args(argv)
    graph, out = os.path.join(args.output_dir, "graph"), os.path.join(args.output_dir, "samples")
    steps = [
        ["-m", "pipelines.generate", "--num_papers", str(args.num_papers), "--output_dir",
         graph, "--temporal", "--write_spec", "--num_clusters", "4"],
        ["-m", "pipelines.sample", "--graph_schema", graph, "--sampling_spec",
         os.path.join(graph, "sampling_spec.pbtxt"), "--output_samples",
         os.path.join(out, "samples@2"), "--runner", "InMemory", "--overwrite"],
        [os.path.join(ROOT, "examples", "train_tfgnn.py"), "--samples",
         os.path.join(out, "samples-*"), "--epochs", str(args.epochs), "--validate_from",
         str(args.validate_from), "--report", os.path.join(args.output_dir, "report.json")],
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_USE_LEGACY_KERAS": "1"}
    for step in steps:
        print("$ python " + " ".join(step), flush=True)
        done = subprocess.run([sys.executable, *step], env=env, cwd=ROOT)
        if done.returncode:
            return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
