"""Processes that save kernels into one cache at once keep every signature: numba rewrites a
kernel's index file (its signatures and their data files) on each save by reading it, adding
one entry and writing it back; sampler.jit's cache does each update under a lock
(sampler.jit_cache.index_lock), else two processes saving at once lose each other's entries
(a later run compiles them again) or give two signatures one data file."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import time

KERNEL = textwrap.dedent(
    """
    from sampler.jit import njit


    @njit
    def add(a, b):
        return a + b
    """
)

# Compiles `add` (not saved), waits for the others, then saves that machine code under SAVES
# signatures of its own (numba's save, through sampler.jit's cache), as fast as it can.
SAVER = textwrap.dedent(
    """
    import os, sys, time
    from numba.core import types
    sys.path.insert(0, sys.argv[1])
    import kern

    kern.add._cache.disable()  # compiled here (machine code loaded from a cache can't be saved)
    kern.add(1, 2)
    kern.add._cache.enable()
    cres = next(iter(kern.add.overloads.values()))
    start = os.path.join(sys.argv[1], "start")
    open(os.path.join(sys.argv[1], f"ready.{sys.argv[2]}"), "w").close()
    while not os.path.exists(start):
        time.sleep(0.005)
    for i in range(int(sys.argv[3])):
        sig = (types.int64, types.Array(types.int64, 1 + i % 3, "C"), types.UniTuple(
            types.int64, int(sys.argv[2]) * 1000 + i))
        kern.add._cache.save_overload(sig, cres)
    """
)

PROCESSES, SAVES = 4, 60


def test_processes_saving_at_once_keep_every_signature_in_its_own_file(tmp_path):
    (tmp_path / "kern.py").write_text(KERNEL)
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    savers = [
        subprocess.Popen(
            [sys.executable, "-c", SAVER, str(tmp_path), str(n), str(SAVES)],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(PROCESSES)
    ]
    try:
        while len(list(tmp_path.glob("ready.*"))) < PROCESSES:  # all compiled: start together
            if any(p.poll() is not None for p in savers):
                break
            time.sleep(0.01)
        (tmp_path / "start").touch()
        for saver in savers:
            _, err = saver.communicate(timeout=300)
            assert saver.returncode == 0, err[-2000:]
    finally:
        for saver in savers:
            if saver.poll() is None:
                saver.kill()
    (index,) = cache.rglob("kern.add-*.nbi")
    with open(index, "rb") as f:
        pickle.load(f)  # numba's version
        _, overloads = pickle.loads(f.read())
    saved = {key[0][2].count for key in overloads if len(key[0]) == 3}
    expected = {n * 1000 + i for n in range(PROCESSES) for i in range(SAVES)}
    lost = expected - saved
    assert not lost, f"{len(lost)} of {len(expected)} signatures lost from the index"
    files = list(overloads.values())
    assert len(set(files)) == len(files), "two signatures share one data file"
    assert all((index.parent / name).is_file() for name in files)
