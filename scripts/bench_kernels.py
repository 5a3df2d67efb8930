"""Benchmark: the dense sampling's compiled kernels against numpy's step-by-step sampling.

Loads a graph once (`--runner InMemory`'s tables and densify), then samples `--seeds`
papers in chunks of 512 with the spec's ops, three times over: the spec as written, and
with its first `cites` op switched to TOP_K and to RANDOM_WEIGHTED (the graph needs a
`weight` on cites: `pipelines.generate --edge_weights`). It reports CPU seconds (this
process, user + system):

  sampling the whole `sample_chunk_columns` (sampling alone, no encoding), by the compiled
           kernels and by numpy's step-by-step sampler (tests/kernel_oracles.py), and the ratio;
  stages   the compiled sampling's CPU per op, for the members, per edge set.

`--whole_only`: the whole sampling only, as the checkout on PYTHONPATH does it (works on
checkouts from before the compiled kernels): compare checkouts with it.

  PYTHONPATH=. python scripts/bench_kernels.py --graph /tmp/mag50k_w --seeds 10000
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import time

import numpy as np


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spec_variants(spec_path: str):
    """(name, SamplingSpec) for the spec and its first cites op as TOP_K / RANDOM_WEIGHTED."""
    from sampler.protos import sampling_spec_pb2
    from sampler.sample.plan import load_sampling_spec

    base = load_sampling_spec(spec_path)
    out = [("as written", base)]
    for strategy in ("TOP_K", "RANDOM_WEIGHTED"):
        spec = sampling_spec_pb2.SamplingSpec()
        spec.CopyFrom(base)
        op = next(o for o in spec.sampling_ops if o.edge_set_name == "cites")
        op.strategy = sampling_spec_pb2.SamplingStrategy.Value(strategy)
        out.append((f"cites {strategy}", spec))
    return out


def sample_all(graph, plan, mem, seeds) -> None:
    from sampler.sample import in_memory
    from sampler.sample.randomness import Randomness

    counters = collections.Counter()
    for _ in in_memory.sample_chunks(graph, plan, mem, seeds, Randomness(0), counters, 512):
        pass


def bench_whole(graph, name: str, spec, num_seeds: int, repeat: int) -> dict:
    """CPU seconds of the whole sampling (no encoding), best of `repeat`, after one warm-up."""
    from sampler.sample import in_memory
    from sampler.sample.adjacency import make_seeds
    from sampler.sample.plan import make_plan

    plan = make_plan(graph, spec, "edge")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(np.asarray(mem.nodes[plan.seed_set].rows.ids[:num_seeds], dtype=object))
    sample_all(graph, plan, mem, seeds)
    times = []
    for _ in range(repeat):
        t = cpu()
        sample_all(graph, plan, mem, seeds)
        times.append(cpu() - t)
    return {"spec": name, "seeds": len(seeds), "sampling_cpu_s": round(min(times), 2)}


def bench_spec(graph, name: str, spec, num_seeds: int, repeat: int) -> dict:
    """CPU seconds of the whole sampling by the compiled kernels and by numpy's step-by-step
    sampler, alternating, best of `repeat`; and the compiled sampling's CPU per stage: each op
    (frontier to picks), the members, each edge set (picks to edges)."""
    from sampler.sample import dense, in_memory
    from sampler.sample.adjacency import make_seeds
    from sampler.sample.plan import make_plan
    from tests import kernel_oracles

    plan = make_plan(graph, spec, "edge")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(np.asarray(mem.nodes[plan.seed_set].rows.ids[:num_seeds], dtype=object))
    compiled = dense.sample_chunk_columns
    ways = {"compiled": compiled, "numpy": kernel_oracles.sample_chunk_numpy}
    whole = {label: [] for label in ways}
    for _ in range(repeat + 1):  # the first round compiles or loads the kernels
        for label, way in ways.items():
            in_memory.sample_chunk_columns = way
            t = cpu()
            sample_all(graph, plan, mem, seeds)
            whole[label].append(cpu() - t)
    in_memory.sample_chunk_columns = compiled
    best = {label: min(times[1:]) for label, times in whole.items()}
    stages = collections.Counter()

    def timed(label, fn):
        def run(*args):
            t = time.process_time()
            out = fn(*args)
            stages[label(args)] += time.process_time() - t
            return out

        return run

    saved = dense.sample_op, dense.Members, dense.edge_rows
    dense.sample_op = timed(lambda a: f"op {a[1].name} ({a[1].strategy})", saved[0])
    dense.Members = timed(lambda a: "members (all node sets)", saved[1])
    dense.edge_rows = timed(lambda a: f"edges {_edge_set_of(mem, a[0])}", saved[2])
    try:
        sample_all(graph, plan, mem, seeds)
    finally:
        dense.sample_op, dense.Members, dense.edge_rows = saved
    return {
        "spec": name,
        "seeds": len(seeds),
        "sampling_cpu_s": {k: round(v, 2) for k, v in best.items()},
        "compiled_vs_numpy": round(best["numpy"] / max(best["compiled"], 1e-9), 2),
        "compiled_stages_cpu_s": {k: round(v, 3) for k, v in sorted(stages.items())},
    }


def _edge_set_of(mem, adj) -> str:
    return next(name for name, a in mem.adjacency.items() if a is adj)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", required=True)
    parser.add_argument("--spec", default=None, help="default: GRAPH/sampling_spec.pbtxt")
    parser.add_argument("--seeds", type=int, default=10000)
    parser.add_argument("--repeat", type=int, default=2, help="best of this many")
    parser.add_argument(
        "--whole_only",
        action="store_true",
        help="only the whole sampling's CPU, as this checkout does it (works on a checkout"
        " before the compiled kernels, given on PYTHONPATH)",
    )
    args = parser.parse_args()

    from sampler.schema import load_graph

    graph = load_graph(os.path.join(args.graph, "graph_schema.pbtxt"))
    spec_path = args.spec or os.path.join(args.graph, "sampling_spec.pbtxt")
    bench = bench_whole if args.whole_only else bench_spec
    results = [
        bench(graph, name, spec, args.seeds, args.repeat) for name, spec in spec_variants(spec_path)
    ]
    print(
        json.dumps(
            {"graph": args.graph, "load_avg": os.getloadavg()[0], "results": results}, indent=1
        )
    )


if __name__ == "__main__":
    main()
