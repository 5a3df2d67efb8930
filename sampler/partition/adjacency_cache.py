"""A process-wide cache of the static adjacency of label propagation shards (LPShard).

A shard's adjacency (offsets, nbr_key, nbr_row) never changes after it is built, but the
shard crosses a Beam stage boundary two or three times a round, and every crossing narrowed
the arrays on one side and widened them again on the other (compact.py). Now a shard pickles
its adjacency with a token, 16 random bytes that name it: pickling the cached arrays reuses
their narrowed form, and unpickling, in a process that has seen the token, takes the widened
arrays (and what was derived from them, `derived`) from here. The narrowed arrays still
travel with every shard, so a process that has not seen a token (another worker) widens them
as before: the cache changes no result, only how often the same arrays are converted.
The adjacency arrays of a pickled shard, and of every shard unpickled from it, are the
same read-only arrays.

The cache holds at most BUDGET_BYTES; a shard that does not fit is not cached (converted as
before). Every round visits every shard in turn, so evicting the least recently used entry to
make room would evict each one just before it is needed again: at 1M papers (about 2.9 GB of
adjacency and derived arrays against the former 1 GB budget) no shard hit, and `lp` took 623 s;
437 s with this policy and a 3 GB budget (docs/BENCHMARKS.md). The local runner clears the cache when a run starts, so a process
that runs several pipelines holds only the current run's shards.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from sampler.partition.compact import narrow, narrow_offsets, widen, widen_offsets


def _budget() -> int:
    """A quarter of one process's share of the machine's memory (Dataflow runs one SDK
    process per vCPU), between 256 MB and 3 GB."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # no sysconf: the old fixed budget
        return 1 << 30
    return int(min(3 << 30, max(256 << 20, total // (4 * (os.cpu_count() or 1)))))


BUDGET_BYTES = _budget()


class _Entry:
    __slots__ = ("arrays", "narrowed", "derived", "nbytes")

    def __init__(self, arrays: tuple, narrowed: tuple):
        self.arrays = arrays  # (offsets, nbr_key, nbr_row), int64
        self.narrowed = narrowed  # what pickles: (degrees, nbr_key, nbr_row) narrowed
        self.derived: dict[str, Any] = {}
        self.nbytes = _nbytes(arrays) + _nbytes(narrowed)


_CACHE: dict[bytes, _Entry] = {}
_used = [0]  # bytes held by _CACHE
_LOCK = threading.Lock()  # runners may run bundles on several threads of one process


def _nbytes(values) -> int:
    total = 0
    for v in values:
        if isinstance(v, tuple):
            total += _nbytes(v)
        elif isinstance(v, np.ndarray):
            total += v.nbytes
    return total


def _put(token: bytes, entry: _Entry) -> None:
    """Caches `entry` if it fits within BUDGET_BYTES with room for as much again of what is
    derived from it (`derived`, stored with every cached entry); else it is used uncached."""
    with _LOCK:
        if _used[0] + 2 * entry.nbytes <= BUDGET_BYTES:
            _CACHE[token] = entry
            _used[0] += entry.nbytes


def _get(token: bytes | None) -> _Entry | None:
    """The entry of `token`, or None."""
    with _LOCK:
        return _CACHE.get(token) if token is not None else None


def _entry(token: bytes | None, arrays: tuple) -> _Entry | None:
    """The cache entry of `token` if it holds these very arrays."""
    entry = _get(token)
    if entry is None or any(a is not b for a, b in zip(entry.arrays, arrays, strict=True)):
        return None
    return entry


def pickled(token: bytes | None, arrays: tuple) -> tuple[bytes, tuple]:
    """(token, narrowed arrays) to pickle the adjacency `arrays` with; a new token when
    `token` does not name these arrays."""
    entry = _entry(token, arrays)
    if entry is None:
        offsets, nbr_key, nbr_row = arrays
        for a in arrays:  # shared from now on by the shards unpickled in this process
            a.flags.writeable = False
        token = os.urandom(16)
        entry = _Entry(arrays, (narrow_offsets(offsets), narrow(nbr_key), narrow(nbr_row)))
        _put(token, entry)
    return token, entry.narrowed


def hold(arrays: tuple) -> bytes:
    """A token for the adjacency `arrays`, cached whatever the budget (and read-only from now
    on): for a process that holds the whole graph anyway, the partition stage's in-memory
    runner, so that what `derived` builds of them is built once. `clear` forgets it."""
    for a in arrays:
        a.flags.writeable = False
    token = os.urandom(16)
    entry = _Entry(arrays, ())
    with _LOCK:
        _CACHE[token] = entry
        _used[0] += entry.nbytes
    return token


def unpickled(token: bytes, narrowed: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The int64 (offsets, nbr_key, nbr_row) that `pickled` narrowed under `token`."""
    entry = _get(token)
    if entry is None:
        degrees, nbr_key, nbr_row = narrowed
        arrays = (widen_offsets(degrees), widen(nbr_key), widen(nbr_row))
        for a in arrays:
            a.flags.writeable = False
        entry = _Entry(arrays, narrowed)
        _put(token, entry)
    return entry.arrays


def derived(token: bytes | None, arrays: tuple, name: str, build: Callable[[], Any]) -> Any:
    """build(), kept with the cached adjacency `arrays` (if they are cached) under `name`."""
    entry = _entry(token, arrays)
    if entry is None:
        return build()
    if name not in entry.derived:
        value = build()
        size = _nbytes(value if isinstance(value, tuple) else (value,))
        with _LOCK:
            entry.derived[name] = value
            entry.nbytes += size
            _used[0] += size
    return entry.derived[name]


def clear() -> None:
    """Forgets every entry (as a process that never saw them)."""
    with _LOCK:
        _CACHE.clear()
        _used[0] = 0
