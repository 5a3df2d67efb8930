"""Running independent numpy/Arrow jobs side by side on one process's cores (no Beam).

numpy's sorts, gathers and lookups and Arrow's readers release the GIL, so building a graph's
node and edge sets (or reading its table files) on threads uses the cores of a machine that a
single Beam step or `--runner InMemory` would otherwise leave idle.
"""

from __future__ import annotations

import collections
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
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


def ordered_map(
    fn: Callable[[T], R], items: Iterable[T], threads: int, ahead: int | None = None
) -> Iterator[R]:
    """fn(item) for each item of `items`, in the order of `items`, computed on `threads`
    daemon threads: at most `ahead` items (default threads + 1) are taken from `items` before
    the caller has taken their results, so memory stays bounded by what `ahead` results hold.

    threads <= 1 is the plain loop on the calling thread. A failure of fn is raised where its
    result would have been yielded (the items before it are yielded first); a caller that
    stops early (a break, an exception, Ctrl-C) leaves the items not yet started unstarted.
    """
    if threads <= 1:
        for item in items:
            yield fn(item)
        return
    ahead = max(threads, ahead or threads + 1)
    todo: queue.SimpleQueue = queue.SimpleQueue()
    stop = threading.Event()

    def work() -> None:
        while True:
            job = todo.get()
            if job is None:
                return
            item, slot = job
            if not stop.is_set():
                try:
                    slot.result = fn(item)
                except BaseException as e:  # noqa: BLE001 - raised in the caller, in order
                    slot.error = e
            slot.done.set()

    pool = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for thread in pool:
        thread.start()
    pending: collections.deque[_Slot] = collections.deque()
    source = iter(items)
    try:
        while True:
            while len(pending) < ahead:
                item = next(source, _DONE)
                if item is _DONE:
                    break
                slot = _Slot()
                pending.append(slot)
                todo.put((item, slot))
            if not pending:
                return
            slot = pending.popleft()
            slot.done.wait()
            if slot.error is not None:
                raise slot.error
            result, slot.result = slot.result, None
            yield result
    finally:
        stop.set()
        for _ in pool:
            todo.put(None)


class _Slot:
    """One item's place in ordered_map's queue: its result or error, once done."""

    __slots__ = ("done", "error", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result = None
        self.error: BaseException | None = None


_DONE = object()
