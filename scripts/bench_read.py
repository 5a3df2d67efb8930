"""Benchmark: table read rates per CPU-second, per format.

A homogeneous graph of N nodes (`#id`, a 32-dim float vector `feat`, an int `label`) and 10*N
edges, the same rows written by `sampler.io.writers` as Parquet, CSV and TFRecord, is read
through the functions `--runner InMemory` uses (`sampler.io.graph_tables.read_node_file` and
`read_edge_file`, which also build the NodeBatch / EdgeBatch with fingerprinted ids). The rate
is the extra rows of the big graph over the small one per extra CPU-second of this process
(all threads counted), so start-up and per-file costs drop out:

  rate = (rows(big) - rows(small)) / (cpu(big) - cpu(small))

  PYTHONPATH=$PWD python scripts/bench_read.py [--nodes 200000] [--small 1000] [--repeats 3]
      [--formats parquet,csv,tfrecord] [--data /tmp/bench_read] [--json out.json] [--level read]

`--level run` measures instead what the issue measured: the CPU seconds (user + system) of a
whole `python -m pipelines.sample --runner InMemory` run with 3 seeds on each graph (reading,
building the adjacency and node table, sampling 3 subgraphs, start-up), in a child process.

The tables are written once under --data and reused (delete the folder to rewrite them). The
sampler that is imported is the one on PYTHONPATH: run it once with PYTHONPATH=/work/main (the
code before) and once with the worktree (after) against the same --data. CPU time is the min
over --repeats reads.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa

from sampler.features import FeatureSpec
from sampler.io import graph_tables
from sampler.io.writers import write_table
from sampler.schema import EdgeSetInfo, NodeSetInfo

EXT = {"parquet": "parquet", "csv": "csv", "tfrecord": "tfrecord"}
NODE_SPECS = {
    "feat": FeatureSpec("feat", "float", (32,)),
    "label": FeatureSpec("label", "int", ()),
}
EDGES_PER_NODE = 10


def tables(nodes: int, seed: int = 0) -> tuple[pa.Table, pa.Table]:
    rng = np.random.default_rng(seed)
    ids = pa.array([b"n%d" % i for i in range(nodes)], pa.binary())
    feat = rng.standard_normal((nodes, 32)).astype(np.float32)
    label = rng.integers(0, 350, nodes).astype(np.int64)
    node_table = pa.table(
        {
            "#id": ids,
            "feat": pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), 32),
            "label": pa.array(label),
        }
    )
    count = nodes * EDGES_PER_NODE
    src = np.sort(rng.integers(0, nodes, count))
    dst = rng.integers(0, nodes, count)
    edge_table = pa.table({"#source": ids.take(pa.array(src)), "#target": ids.take(pa.array(dst))})
    return node_table, edge_table


def write_graph(data: str, nodes: int, fmt: str) -> tuple[str, str]:
    folder = os.path.join(data, f"{nodes}")
    node_path = os.path.join(folder, f"nodes.{EXT[fmt]}")
    edge_path = os.path.join(folder, f"edges.{EXT[fmt]}")
    if not (os.path.exists(node_path) and os.path.exists(edge_path)):
        os.makedirs(folder, exist_ok=True)
        node_table, edge_table = tables(nodes)
        write_table(node_path + ".tmp", node_table, fmt, NODE_SPECS)
        write_table(edge_path + ".tmp", edge_table, fmt, {})
        os.replace(node_path + ".tmp", node_path)
        os.replace(edge_path + ".tmp", edge_path)
    return node_path, edge_path


def read_once(node_path: str, edge_path: str, fmt: str) -> tuple[int, float, float]:
    """(rows, CPU seconds, wall seconds) of reading both tables into batches."""
    node_info = NodeSetInfo("node", NODE_SPECS, node_path)
    edge_info = EdgeSetInfo("edge", "node", "node", {}, edge_path, False)
    cpu, wall = time.process_time(), time.perf_counter()
    rows = 0
    for batch in graph_tables.read_node_file(node_path, fmt, node_info):
        rows += len(batch)
    for batch, _ in graph_tables.read_edge_file(edge_path, fmt, edge_info):
        rows += len(batch)
    return rows, time.process_time() - cpu, time.perf_counter() - wall


SCHEMA = """node_sets { key: "node" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 32 } } } }
  features { key: "label" value { dtype: DT_INT64 } }
  metadata { filename: "NODES" } } }
edge_sets { key: "edge" value { source: "node" target: "node" metadata { filename: "EDGES" } } }
"""
SPEC = """seed_op { op_name: "seed" node_set_name: "node" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "edge" sample_size: 8
  strategy: RANDOM_UNIFORM }
"""


def run_once(node_path: str, edge_path: str, fmt: str) -> tuple[int, float, float]:
    """(rows, CPU seconds, wall seconds) of one `pipelines.sample --runner InMemory` run."""
    folder = os.path.dirname(node_path)
    schema = os.path.join(folder, f"schema_{fmt}.pbtxt")
    with open(schema, "w") as f:
        f.write(SCHEMA.replace("NODES", node_path).replace("EDGES", edge_path))
    spec = os.path.join(folder, "spec.pbtxt")
    with open(spec, "w") as f:
        f.write(SPEC)
    seeds = os.path.join(folder, "seeds.csv")
    with open(seeds, "w") as f:
        f.write("#id\nn0\nn1\nn2\n")
    out = os.path.join(os.path.dirname(folder), "out", f"{os.path.basename(folder)}_{fmt}")
    command = [
        sys.executable, "-P", "-m", "pipelines.sample", "--graph_schema", schema,
        "--sampling_spec", spec, "--input_seeds", seeds, "--output_samples", f"{out}/s",
        "--runner", "InMemory", "--overwrite",
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - wall
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    rows = (1 + EDGES_PER_NODE) * int(os.path.basename(folder))
    return rows, cpu, wall


def measure(data: str, nodes: int, fmt: str, repeats: int, level: str = "read") -> dict:
    node_path, edge_path = write_graph(data, nodes, fmt)
    once = read_once if level == "read" else run_once
    runs = [once(node_path, edge_path, fmt) for _ in range(repeats)]
    return {
        "rows": runs[0][0],
        "cpu_s": min(r[1] for r in runs),
        "wall_s": min(r[2] for r in runs),
        "bytes": os.path.getsize(node_path) + os.path.getsize(edge_path),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=200_000)
    parser.add_argument("--small", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--formats", default="parquet,csv,tfrecord")
    parser.add_argument("--data", default="/tmp/bench_read")
    parser.add_argument("--json", default=None)
    parser.add_argument("--level", choices=["read", "run"], default="read")
    args = parser.parse_args(argv)
    import sampler

    results = []
    print(f"sampler: {os.path.dirname(sampler.__file__)}, level {args.level}", file=sys.stderr)
    print(f"{'format':<9} {'rows':>9} {'CPU s':>7} {'wall s':>7} {'rows/CPU-s':>11}")
    for fmt in args.formats.split(","):
        small = measure(args.data, args.small, fmt, args.repeats, args.level)
        big = measure(args.data, args.nodes, fmt, args.repeats, args.level)
        rate = (big["rows"] - small["rows"]) / max(big["cpu_s"] - small["cpu_s"], 1e-9)
        print(
            f"{fmt:<9} {big['rows']:>9} {big['cpu_s']:>7.2f} {big['wall_s']:>7.2f} {rate:>11,.0f}"
        )
        results.append({"format": fmt, "small": small, "big": big, "rows_per_cpu_s": rate})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "sampler": os.path.dirname(sampler.__file__),
                    "level": args.level,
                    "results": results,
                },
                f,
            )


if __name__ == "__main__":
    main()
