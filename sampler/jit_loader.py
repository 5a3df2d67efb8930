"""The door to the compiled kernels: `kernels("sampler.x_jit")` imports a kernel module on
first use, from any thread, and compiles the kernels once per machine.

Kernel modules import numba (sampler/jit.py), which takes 0.5 s, so callers load them only
when a kernel runs (`--help`, `show`, `stats` never do). The first use is often on several
threads at once (the table readers of sampler/threads.py, Beam's bundle threads): two threads
importing the same module chain can meet Python's import deadlock detection, and one of them
then gets a half-initialized module. One lock makes the first import serial.

Compiling is once per machine, not once per process: when a module's kernels are not yet in
numba's cache, the first process compiles every kernel module (each one's `warm()` calls its
kernels with the argument types the runs use), under the machine-wide lock of
sampler/jit_cache.py; the SDK workers that start at the same time wait for it and then load
the machine code from the cache. With the cache filled (`python -m sampler.jit_warm`, run by
scripts/bootstrap.sh and the Docker image), loading costs one `stat` per kernel and no lock.
Kernel modules are found by their name (`*_jit.py` under sampler/): no list to keep.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time

from sampler import jit_cache

_LOCK = threading.RLock()  # re-entered when a warm-up loads the kernel modules it calls
_READY: set[str] = set()  # modules imported, and compiled or loaded from the cache
_WARMING = False  # warm_all runs (in the thread that holds _LOCK)


def kernels(module: str):
    """The kernel module `module` (e.g. "sampler.ids_jit"), imported once under a lock."""
    loaded = sys.modules.get(module)
    if loaded is not None and module in _READY:
        return loaded
    with _LOCK:
        loaded = importlib.import_module(module)
        if module not in _READY:
            _READY.add(module)  # before compiling, which calls kernels(module) again
            if not _WARMING and not _cached(loaded):
                with jit_cache.machine_lock():
                    if not _cached(loaded):  # (another process may have compiled meanwhile)
                        _compile_all()
        return loaded


def kernel_modules() -> list[str]:
    """Every kernel module of the package: the files named `*_jit.py` under sampler/."""
    names = []
    for folder, _, files in os.walk(jit_cache.PACKAGE):
        package = os.path.relpath(folder, os.path.dirname(jit_cache.PACKAGE)).split(os.sep)
        names += [".".join([*package, f[:-3]]) for f in files if f.endswith("_jit.py")]
    return sorted(names)


def warm_all() -> tuple[int, int, float]:
    """Compiles (or loads from the cache) every kernel of every kernel module: (kernels, how
    many were compiled, seconds)."""
    global _WARMING
    start = time.time()
    found = []
    with _LOCK:
        _WARMING = True
        try:
            for name in kernel_modules():
                module = kernels(name)
                module.warm()
                found += [v for v in vars(module).values() if _is_kernel(v, module)]
        finally:
            _WARMING = False
    compiled = sum(1 for k in found if sum(k.stats.cache_misses.values()))
    return len(found), compiled, time.time() - start


def load_cached() -> bool:
    """Imports every kernel module and, when numba's cache holds machine code of all of them
    for this CPU, loads it (each module's `warm()`); never compiles a module the cache lacks.
    Whether the machine code was loaded. A process that forks workers (the SDK worker fork
    server) loads it once, so that its workers neither import numba nor read the cache."""
    global _WARMING
    with _LOCK:
        modules = [importlib.import_module(name) for name in kernel_modules()]
        if not all(module.__name__ in _READY or _cached(module) for module in modules):
            return False
        _WARMING = True
        try:
            for module in modules:
                _READY.add(module.__name__)
                module.warm()
        finally:
            _WARMING = False
    return True


def _compile_all() -> None:
    """warm_all, saying so (the progress of an InMemory run; from a worker, relayed by its
    CLI: sampler/jit_cache.py)."""
    jit_cache.say_compiling()
    count, compiled, seconds = warm_all()
    jit_cache.say(f"progress: {count} kernels ready in {seconds:.0f} s ({compiled} compiled)")


def _is_kernel(value, module) -> bool:
    return getattr(getattr(value, "py_func", None), "__module__", None) == module.__name__


def _cached(loaded) -> bool:
    """Whether numba's cache holds machine code for this CPU of every kernel of the module:
    an index of this source whose entries include one compiled for this process's CPU (the
    name and features that numba compiles for: NUMBA_CPU_NAME, or the host's); a cache built
    on another CPU is numba's to compile again. A module whose kernels numba does not cache
    (as under NUMBA_DISABLE_JIT) counts as cached."""
    for value in vars(loaded).values():
        if not _is_kernel(value, loaded):
            continue
        cache_file = getattr(getattr(value, "_cache", None), "_cache_file", None)
        if cache_file is None:
            continue
        if not os.path.exists(cache_file._index_path):
            return False
        try:
            index = cache_file._load_index()  # {} for another source or numba version
        except Exception:  # noqa: BLE001 - a damaged index: compile (sampler.jit says so)
            return False
        cpu = value.targetctx.codegen().magic_tuple()
        if not any(len(key) > 1 and key[1] == cpu for key in index):
            return False
    return True
