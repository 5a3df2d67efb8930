"""The one door to numba: compiled kernels, cached on disk, imported only when first used.

Kernel modules (`sampler/**/*_jit.py`) decorate their loops with `njit` from here, end with a
`warm()` that calls each kernel with the argument types the runs use, and are loaded through
`sampler.jit_loader.kernels`, so a process that never runs a kernel (`--help`, `show`, `stats`)
never imports numba (0.5 s). Where the cache lives: sampler/jit_cache.py.

The cache is a cache: a cache file that cannot be read (truncated, garbage, from another
numba) is removed and its kernel compiled again, and a cache that cannot be written (a full
or read-only file system) is bypassed, each with one warning line, never a failure. Processes
that save into one cache at once update each kernel's index one at a time (jit_cache.index_lock).

Every compile of a kernel is said on the progress (once per process), whatever its cause:
numba's compile event, not a guess of when the cache misses.

Under NUMBA_DISABLE_JIT=1 (numba's switch to debug kernels as Python) every kernel runs as
the Python it is written in: slowly, with the same results.
"""

from __future__ import annotations

import contextlib
import functools
import os

import numpy as np

from sampler import jit_cache

if jit_cache.chosen_folder():
    os.environ["NUMBA_CACHE_DIR"] = jit_cache.chosen_folder()

import numba  # noqa: E402  (after the cache folder is chosen)
from llvmlite import ir  # noqa: E402
from numba.core import cgutils, event, types  # noqa: E402
from numba.core.caching import FunctionCache  # noqa: E402
from numba.extending import intrinsic  # noqa: E402

if jit_cache.chosen_folder() and not numba.config.CACHE_DIR:  # numba loaded before this module
    numba.config.CACHE_DIR = jit_cache.chosen_folder()

DISABLED = bool(numba.config.DISABLE_JIT)
_REPORTED: set[str] = set()


def _as_python(fn, *args, **kwargs):
    with np.errstate(over="ignore"):
        return fn(*args, **kwargs)


def _warn_once(kind: str, message: str) -> None:
    if kind not in _REPORTED:
        _REPORTED.add(kind)
        jit_cache.warn(message)


class _Cache(FunctionCache):
    """numba's cache of one kernel, less its failures (see the module docstring)."""

    def load_overload(self, sig, target_context):
        try:
            return super().load_overload(sig, target_context)
        except Exception as e:  # noqa: BLE001 - whatever a damaged file raises: compile again
            _warn_once(
                "read",
                f"the kernel cache in {self._cache_path} has a damaged file"
                f" ({type(e).__name__}); its kernels are compiled again",
            )
            with contextlib.suppress(OSError):  # (another process may have removed it)
                os.remove(self._cache_file._index_path)
            return None

    def save_overload(self, sig, data):
        try:
            with jit_cache.index_lock(self._cache_path):  # numba's index: read, add, write
                super().save_overload(sig, data)
        except OSError as e:
            _warn_once(
                "write",
                f"cannot write the kernel cache in {self._cache_path} ({e.strerror or e}):"
                " running without it (each run compiles again)",
            )
            self.disable()


class _Compiles(event.Listener):
    """Sees every compile of a kernel, whatever made it happen (a cold cache, a cache built for
    another CPU, a damaged file, a signature no warm-up compiled), and has it said once."""

    def on_start(self, event):
        dispatcher = (event.data or {}).get("dispatcher")
        module = getattr(getattr(dispatcher, "py_func", None), "__module__", "") or ""
        if module.split(".")[0] == __name__.split(".")[0]:
            jit_cache.say_compiling()

    def on_end(self, event):
        pass


event.register("numba:compile", _Compiles())


def njit(fn):
    """A compiled, cached, GIL-releasing kernel (no Python objects inside)."""
    if DISABLED:  # the Python function, its integers wrapping around as compiled ones do
        return functools.wraps(fn)(functools.partial(_as_python, fn))
    kernel = numba.njit(nogil=True)(fn)
    try:
        kernel._cache = _Cache(fn)
    except (OSError, RuntimeError) as e:  # no folder numba may cache in
        _warn_once("write", f"cannot cache the compiled kernels ({e}): each run compiles them")
    return kernel


def _prefetch(typingctx, array, index):
    """`prefetch(array, index)` in a kernel: asks the CPU to bring `array[index]` into its caches
    (LLVM's prefetch: a hint that never faults, even past the end), so that a loop of random
    reads can ask for the memory of a later step while it works on this one."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(
            context, builder, array_type, view, [args[1]], wraparound=False, boundscheck=False
        )
        byte_ptr = ir.PointerType(ir.IntType(8))
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0i8")
        # read, the highest locality, the data cache
        flags = [ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)]
        builder.call(fn, [builder.bitcast(ptr, byte_ptr), *flags])
        return context.get_dummy_value()

    return types.void(array, index), codegen


def _no_prefetch(array, index) -> None:
    """`prefetch` of a kernel run as Python (NUMBA_DISABLE_JIT): nothing to ask."""


prefetch = _no_prefetch if DISABLED else intrinsic(_prefetch)
