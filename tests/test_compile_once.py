"""Compiled kernels are compiled once per machine: processes that start together on an empty
numba cache (the SDK workers of a first run) compile each kernel once between them, the
others load it from the cache (sampler/jit_loader.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent(
    """
    import json, sys
    import numba
    import numpy as np
    from sampler.jit_loader import kernels
    from sampler.sample.plan import TOP_K

    choose_jit = kernels("sampler.sample.choose_jit")
    start, degree = np.array([0, 2], np.int64), np.array([2, 3], np.int64)
    rows, _ = choose_jit.choose(start, degree, np.array([1, 2], np.uint64), sample_size=1,
                                strategy=TOP_K, weights=np.array([1.0, 2, 3, 4, 5]))
    stats = {
        name: sum(v.stats.cache_misses.values())
        for name, v in vars(choose_jit).items()
        if isinstance(v, numba.core.dispatcher.Dispatcher)
        and v.py_func.__module__ == choose_jit.__name__
    }
    print(json.dumps({"rows": rows.tolist(), "compiled": stats}))
    """
)


def _start(cache: str) -> subprocess.Popen:
    # The compile lock waited for as long as the child may take: a loaded machine compiles for
    # more than its default 120 s, and the others would then compile too (a bypass that
    # tests/test_kernel_cache.py covers), which is not what these tests check.
    env = {**os.environ, "NUMBA_CACHE_DIR": cache, "BEAM_GRAPH_COMPILE_WAIT_S": "600"}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture(scope="module")
def started_together(tmp_path_factory):
    """Three processes started together on an empty cache: (the cache, their results)."""
    cache = tmp_path_factory.mktemp("kernels") / "numba"
    children = [_start(str(cache)) for _ in range(3)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=600)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    return cache, results


def test_processes_that_start_together_compile_each_kernel_once(started_together):
    cache, results = started_together
    assert len({json.dumps(r["rows"]) for r in results}) == 1, results
    kernels = results[0]["compiled"]
    assert kernels, "no kernel of choose_jit was found"
    for name in kernels:
        compiled = [r["compiled"][name] for r in results]
        assert sum(compiled) == 1, f"{name} compiled by {compiled} (processes 1..3)"
    assert list(cache.rglob("*.nbi")), "nothing was cached"


def test_a_process_on_a_filled_cache_compiles_nothing(started_together):
    cache, _ = started_together
    child = _start(str(cache))
    out, err = child.communicate(timeout=300)
    assert child.returncode == 0, err[-2000:]
    compiled = json.loads(out.strip().splitlines()[-1])["compiled"]
    assert compiled and sum(compiled.values()) == 0, compiled


def test_every_kernel_module_has_a_warm_up():
    """A kernel module without one would be compiled per process on a cold cache, unlocked;
    the loader finds each by its name."""
    import importlib
    import pathlib

    from sampler import jit_loader

    root = pathlib.Path(__file__).resolve().parents[1]
    modules = {
        ".".join(p.relative_to(root).with_suffix("").parts)
        for p in (root / "sampler").rglob("*_jit.py")
    }
    assert len(modules) >= 9, modules
    assert set(jit_loader.kernel_modules()) == modules
    for name in modules:
        assert callable(getattr(importlib.import_module(name), "warm", None)), name


IN_MEMORY_RUNS = textwrap.dedent(
    """
    import sys
    from pipelines import partition, sample
    graph, out = sys.argv[1], sys.argv[2]
    for fmt, extra in (("csv", []), ("parquet", ["--edge_aggregation_method", "node"]),
                       ("tfrecord", ["--seed_edge_set", "writes", "--negatives_per_seed", "1"])):
        schema = f"{graph}/{fmt}/graph_schema.pbtxt"
        spec = f"{graph}/{'link' if extra[:1] == ['--seed_edge_set'] else 'spec'}.pbtxt"
        assert sample.main(["--graph_schema", schema, "--sampling_spec", spec, "--runner",
                            "InMemory", "--output_samples", f"{out}/{fmt}/s", *extra]) == 0
        assert partition.main(["--graph_schema", schema, "--output_dir", f"{out}/{fmt}/p",
                               "--graph_name", "g", "--runner", "InMemory", "--num_parts", "2",
                               "--part_method", "lp"]) == 0
    """
)


def cached_signatures(cache) -> set[tuple[str, str]]:
    """(kernel, argument types) of every compiled kernel in numba's cache index files
    (numba 0.68's index: its version, then the pickled (source stamp, {(signature, ...):
    data file}))."""
    import pickle

    out = set()
    for index in cache.rglob("*.nbi"):
        with open(index, "rb") as f:
            pickle.load(f)
            _, overloads = pickle.loads(f.read())
        out |= {(index.name.split("-")[0], str(key[0])) for key in overloads}
    return out


def test_the_warm_ups_compile_what_the_runs_use(started_together, tmp_path):
    """On a cache filled by the warm-ups alone, runs (each table format, both aggregations,
    link seeds, partitioning on both runners, every Beam placement; their worker processes
    included) compile
    no kernel for argument types the warm-ups did not: a cache filled at install is all a
    run needs."""
    from sampler.protos import sampling_spec_pb2
    from sampler.tools import synthetic

    cache, _ = started_together
    warmed = cached_signatures(cache)
    mag = synthetic.generate_mag(80, seed=4, feature_dim=3, edge_weights=True)
    for fmt in ("csv", "parquet", "tfrecord"):
        synthetic.write_graph(mag, str(tmp_path / "g" / fmt), fmt=fmt)
    spec = synthetic.mag_sampling_spec()
    spec.sampling_ops[0].strategy = sampling_spec_pb2.TOP_K  # on cites (weighted)
    weighted = spec.sampling_ops.add(op_name="weighted", edge_set_name="cites", sample_size=2)
    weighted.input_op_names.append("seed")
    weighted.strategy = sampling_spec_pb2.RANDOM_WEIGHTED
    synthetic.write_sampling_spec(spec, str(tmp_path / "g" / "spec.pbtxt"))
    (tmp_path / "g" / "link.pbtxt").write_text(
        'symmetric_link_seed_op { op_name: "seed" }\n'
        'sampling_ops { op_name: "c" input_op_names: "seed" edge_set_name: "cites"'
        " sample_size: 2 strategy: RANDOM_WEIGHTED }\n"
    )
    timed = synthetic.generate_mag(80, seed=4, feature_dim=3, edge_weights=True, edge_years=True)
    synthetic.write_graph(timed, str(tmp_path / "t"), fmt="parquet")
    spec = synthetic.temporal_mag_sampling_spec(window=3)
    spec.sampling_ops[0].strategy = sampling_spec_pb2.TOP_K  # cites: TOP_K among eligible
    for name, how in (("recent", None), ("weighted", sampling_spec_pb2.RANDOM_WEIGHTED)):
        op = spec.sampling_ops.add(op_name=name, edge_set_name="cites", sample_size=2)
        op.input_op_names.append("seed")
        op.temporal.edge_time_feature = "year"
        op.temporal.most_recent = how is None
        if how is not None:
            op.strategy = how
    synthetic.write_sampling_spec(spec, str(tmp_path / "t" / "spec.pbtxt"))
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    g, out = tmp_path / "g", tmp_path / "out"
    runs = [[sys.executable, "-c", IN_MEMORY_RUNS, str(g), str(out)]]
    for placement in ("InMemory", "worker"):  # temporal ops (sampler/sample/temporal_jit.py)
        runner = ["--runner", "InMemory"] if placement == "InMemory" else []
        runs.append([
            sys.executable, "-m", "pipelines.sample", "--graph_schema", str(tmp_path / "t"),
            "--sampling_spec", str(tmp_path / "t" / "spec.pbtxt"), "--output_samples",
            str(out / "temporal" / placement / "s"), "--progress_interval", "0", *runner,
        ])  # fmt: skip
    for placement in ("worker", "topology", "sharded"):
        runs.append([
            sys.executable, "-m", "pipelines.sample", "--graph_schema", str(g / "parquet"),
            "--sampling_spec", str(g / "spec.pbtxt"), "--output_samples",
            str(out / placement / "s"), "--graph_placement", placement, "--progress_interval", "0",
        ])  # fmt: skip
    runs.append([
        sys.executable, "-m", "pipelines.partition", "--graph_schema", str(g / "tfrecord"),
        "--output_dir", str(out / "partition"), "--graph_name", "g", "--num_parts", "2",
        "--part_method", "lp", "--lp_cluster_rounds", "2",
    ])  # fmt: skip
    for command in runs:
        proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
    new = cached_signatures(cache) - warmed
    assert not new, "\n".join(f"{k} {v}" for k, v in sorted(new))
