"""Compiled kernels are compiled once per machine: processes that start together on an empty
numba cache (the SDK workers of a first run) compile each kernel once between them, the
others load it from the cache (sampler/jit_loader.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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
    env = {**os.environ, "NUMBA_CACHE_DIR": cache}
    return subprocess.Popen(
        [sys.executable, "-c", CHILD],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_processes_that_start_together_compile_each_kernel_once(tmp_path):
    cache = str(tmp_path / "numba")
    children = [_start(cache) for _ in range(3)]
    results = []
    for child in children:
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert len({json.dumps(r["rows"]) for r in results}) == 1, results
    kernels = results[0]["compiled"]
    assert kernels, "no kernel of choose_jit was found"
    for name in kernels:
        compiled = [r["compiled"][name] for r in results]
        assert sum(compiled) == 1, f"{name} compiled by {compiled} (processes 1..3)"
    assert list((tmp_path / "numba").rglob("*.nbi")), "nothing was cached"


def test_a_process_on_a_filled_cache_compiles_nothing(tmp_path):
    cache = str(tmp_path / "numba")
    for expected in (1, 0):
        child = _start(cache)
        out, err = child.communicate(timeout=300)
        assert child.returncode == 0, err[-2000:]
        compiled = json.loads(out.strip().splitlines()[-1])["compiled"]
        assert sum(compiled.values()) >= expected, compiled
        if expected == 0:
            assert sum(compiled.values()) == 0, compiled


def test_every_kernel_module_has_a_warm_up():
    """A kernel module without one would be compiled per process on a cold cache, unlocked."""
    import pathlib

    from sampler import jit_warm

    root = pathlib.Path(__file__).resolve().parents[1]
    modules = {
        ".".join(p.relative_to(root).with_suffix("").parts)
        for p in (root / "sampler").rglob("*_jit.py")
    }
    assert modules, "no kernel module found"
    assert modules == set(jit_warm.WARMERS), modules ^ set(jit_warm.WARMERS)
