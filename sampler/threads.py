"""Running independent numpy/Arrow jobs side by side on one process's cores (no Beam).

numpy's sorts, gathers and lookups and Arrow's readers release the GIL, so building a graph's
node and edge sets (or reading its table files) on threads uses the cores of a machine that a
single Beam step or `--runner InMemory` would otherwise leave idle.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def cpu_count() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def map_threads(fn: Callable[[T], R], items: Sequence[T], threads: int | None = None) -> list[R]:
    """[fn(item) for item in items], on up to `threads` threads (default: cpu_count()).

    The results are in the order of `items` whatever the threads did first; a failure raises
    the exception of the first failing item in that order, as the plain loop would. The threads
    are daemons: a Ctrl-C in the calling thread ends the process without waiting for them.
    """
    items = list(items)
    workers = max(1, min(threads or cpu_count(), len(items)))
    if workers == 1:
        return [fn(item) for item in items]
    results: list = [None] * len(items)
    errors: list[BaseException | None] = [None] * len(items)
    claimed = iter(range(len(items)))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                i = next(claimed, None)
            if i is None:
                return
            try:
                results[i] = fn(items[i])
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller, in item order
                errors[i] = e

    pool = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    for error in errors:
        if error is not None:
            raise error
    return results
