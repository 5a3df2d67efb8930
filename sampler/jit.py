"""The one door to numba: compiled kernels, cached on disk, imported only when first used.

Kernel modules (`sampler/*_jit.py`, `sampler/sample/*_jit.py`) decorate their loops with
`njit` from here and are imported by their callers inside the calling function, so a
process that never runs a kernel (`--help`, `show`, `stats`) never imports numba (0.5 s).

Compiled code is cached (`cache=True`): the first process on a machine compiles (a few
seconds, once), every later process and every SDK worker loads the machine code from the
cache. numba keeps the cache in `__pycache__` beside the source, or in the user's cache
folder when the package is read-only (site-packages on a worker). When neither can be
written, `_cache_dir` points NUMBA_CACHE_DIR at a private temporary folder: the run still
works, it only compiles again.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def _writable(path: str) -> bool:
    probe = path
    while not os.path.exists(probe):  # a folder not made yet: its first existing parent
        parent = os.path.dirname(probe)
        if parent == probe:
            return False
        probe = parent
    return os.access(probe, os.W_OK | os.X_OK)


def _cache_dir() -> str | None:
    """The folder to cache in when numba's own choices (beside the source, then the user's
    cache folder) are not writable, else None. Decided before numba loads."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return None
    here = os.path.dirname(os.path.abspath(__file__))
    if _writable(os.path.join(here, "__pycache__")):
        return None
    user = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    if _writable(user):
        return os.path.join(user, "beam-graph-sampler", "numba")
    folder = tempfile.mkdtemp(prefix="sampler-numba-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # nothing left in TMPDIR
    return folder


_CHOSEN = _cache_dir()
if _CHOSEN:
    os.environ["NUMBA_CACHE_DIR"] = _CHOSEN

import numba  # noqa: E402  (after the cache folder is chosen)

if _CHOSEN and not numba.config.CACHE_DIR:  # numba was loaded before this module
    numba.config.CACHE_DIR = _CHOSEN


def njit(fn):
    """A compiled, cached, GIL-releasing kernel (no Python objects inside)."""
    return numba.njit(cache=True, nogil=True)(fn)
