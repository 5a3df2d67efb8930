"""Imports a compiled-kernel module on first use, from any thread, and compiles it once per
machine.

Kernel modules import numba (sampler/jit.py), which takes 0.5 s, so callers load them
only when a kernel runs. The first use is often on several threads at once (the table
readers of sampler/threads.py, Beam's bundle threads): two threads importing the same
module chain can meet Python's import deadlock detection, and one of them then gets a
half-initialized module ("cannot import name"). One lock makes the first import serial.

Compiling is once per machine, not once per process: when a module's kernels are not yet in
numba's on-disk cache, the first process to load it takes a file lock beside that cache and
compiles them all (`sampler.jit_warm.warm_module`); the SDK workers that start at the same
time wait for the lock and then load the machine code from the cache, instead of each
compiling the same kernels (a 2-worker run's first use paid twice the compile time). With the
cache already filled, loading costs one `stat` per kernel and takes no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import os
import sys
import threading

_LOCK = threading.RLock()  # re-entered when a module's warm-up loads the modules it calls
_READY: set[str] = set()  # modules imported, and compiled or loaded from the cache


def kernels(module: str):
    """The module `module` (e.g. "sampler.ids_jit"), imported once under a lock."""
    loaded = sys.modules.get(module)
    if loaded is not None and module in _READY:
        return loaded
    with _LOCK:
        loaded = importlib.import_module(module)
        if module not in _READY:
            _READY.add(module)  # before the warm-up, which may call kernels(module) again
            _compile_once(module, loaded)
        return loaded


def _index_files(loaded) -> list[str]:
    """numba's cache index file of each kernel of the module; [] if numba's layout differs."""
    paths = []
    for value in vars(loaded).values():
        if getattr(getattr(value, "py_func", None), "__module__", None) != loaded.__name__:
            continue
        cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
        path = getattr(cache_file, "_index_path", None)
        if path is None:
            return []
        paths.append(path)
    return paths


def _compile_once(module: str, loaded) -> None:
    paths = _index_files(loaded)
    if not paths or all(os.path.exists(p) for p in paths):
        return  # cached already (or not a cached module): each kernel loads on its first call
    with _machine_lock(os.path.dirname(paths[0])):
        importlib.import_module("sampler.jit_warm").warm_module(module)


@contextlib.contextmanager
def _machine_lock(folder: str):
    """An exclusive flock on `folder`/.sampler-compile.lock; no lock where it can't be made."""
    try:
        os.makedirs(folder, exist_ok=True)
        handle = open(os.path.join(folder, ".sampler-compile.lock"), "a")  # noqa: SIM115
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
