"""Benchmark: the compiled sampling kernels (issue 33) against the numpy ones, per op.

Loads a graph once (`--runner InMemory`'s tables and densify), then samples `--seeds`
papers in chunks of 512 with the spec's ops, three times over: the spec as written, and
with its first `cites` op switched to TOP_K and to RANDOM_WEIGHTED (the graph needs a
`weight` on cites: `pipelines.generate --edge_weights`). It reports CPU seconds (this
process, user + system):

  choose   per op and strategy: `sampling.choose` (numpy) and `choose_jit.choose`
           (compiled) on the same recorded frontiers, and the ratio;
  sampling the whole `sample_chunk_columns` (sampling alone, no encoding) with each.

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
    """CPU seconds of sampling with the numpy and the compiled choose, whole and per op."""
    from sampler.sample import choose_jit, in_memory, sampling
    from sampler.sample.adjacency import make_seeds
    from sampler.sample.plan import make_plan

    plan = make_plan(graph, spec, "edge")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(np.asarray(mem.nodes[plan.seed_set].rows.ids[:num_seeds], dtype=object))
    compiled = choose_jit.choose
    calls = []

    def recording(start, degree, stream, **kw):
        calls.append((start, degree, stream, kw))
        return compiled(start, degree, stream, **kw)

    choose_jit.choose = recording
    try:
        sample_all(graph, plan, mem, seeds)  # compiles, and records every op's frontiers
        whole = {}
        for label, impl in (("numpy", sampling.choose), ("compiled", compiled)):
            choose_jit.choose = impl
            times = []
            for _ in range(repeat):
                t = cpu()
                sample_all(graph, plan, mem, seeds)
                times.append(cpu() - t)
            whole[label] = min(times)
    finally:
        choose_jit.choose = compiled
    ops = list(plan.ops)  # sample_chunk_columns calls choose once per op, in plan order
    per_op = collections.defaultdict(lambda: {"numpy": 0.0, "compiled": 0.0, "picks": 0})
    for i, (start, degree, stream, kw) in enumerate(calls):
        op = ops[i % len(ops)]
        entry = per_op[f"{op.name} ({op.strategy})"]
        for label, impl in (("numpy", sampling.choose), ("compiled", compiled)):
            best = float("inf")
            for _ in range(repeat):
                t = time.process_time()
                rows, _pos = impl(start, degree, stream, **kw)
                best = min(best, time.process_time() - t)
            entry[label] += best
        entry["picks"] += len(rows)
    for v in per_op.values():
        v["ratio"] = round(v["numpy"] / max(v["compiled"], 1e-9), 1)
        v["numpy"], v["compiled"] = round(v["numpy"], 3), round(v["compiled"], 3)
    return {
        "spec": name,
        "seeds": len(seeds),
        "sampling_cpu_s": {k: round(v, 2) for k, v in whole.items()},
        "sampling_ratio": round(whole["numpy"] / whole["compiled"], 2),
        "choose_per_op": dict(per_op),
    }


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
