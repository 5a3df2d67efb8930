"""Imports a compiled-kernel module on first use, from any thread.

Kernel modules import numba (sampler/jit.py), which takes 0.5 s, so callers load them
only when a kernel runs. The first use is often on several threads at once (the table
readers of sampler/threads.py, Beam's bundle threads): two threads importing the same
module chain can meet Python's import deadlock detection, and one of them then gets a
half-initialized module ("cannot import name"). One lock makes the first import serial.
"""

from __future__ import annotations

import importlib
import sys
import threading

_LOCK = threading.Lock()


def kernels(module: str):
    """The module `module` (e.g. "sampler.ids_jit"), imported once under a lock."""
    loaded = sys.modules.get(module)
    if loaded is not None and getattr(loaded, "__spec__", None) is not None:
        if not getattr(loaded.__spec__, "_initializing", False):
            return loaded
    with _LOCK:
        return importlib.import_module(module)
