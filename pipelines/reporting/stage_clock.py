"""Wall and CPU seconds per stage of a run in one process (`--runner InMemory`).

CPU is the whole process's (every thread: the reads and builds run on threads), from
`time.process_time`; stages that interleave (sampling, encoding and writing alternate chunk
by chunk) add up their turns. run_summary.json's `stages` section and the CLI's `stages:` line.
"""

from __future__ import annotations

import collections
import contextlib
import time
from collections.abc import Callable, Iterable, Iterator


class StageClock:
    """`with clock("read"): ...` and `clock.timed("sample", iterator)` add to a stage's time."""

    def __init__(
        self,
        wall_clock: Callable[[], float] = time.perf_counter,
        cpu_clock: Callable[[], float] = time.process_time,
    ) -> None:
        self.wall: collections.Counter = collections.Counter()
        self.cpu: collections.Counter = collections.Counter()
        self._wall_clock, self._cpu_clock = wall_clock, cpu_clock

    @contextlib.contextmanager
    def __call__(self, stage: str):
        wall, cpu = self._wall_clock(), self._cpu_clock()
        try:
            yield
        finally:
            self.wall[stage] += self._wall_clock() - wall
            self.cpu[stage] += self._cpu_clock() - cpu

    def timed(self, stage: str, items: Iterable) -> Iterator:
        """The items of `items`, the time spent making each one added to `stage`."""
        iterator = iter(items)
        while True:
            with self(stage):
                item = next(iterator, _DONE)
            if item is _DONE:
                return
            yield item

    def summary(self) -> dict[str, dict[str, float]]:
        """{stage: {"wall_s", "cpu_s"}} in the order the stages first ran."""
        return {
            stage: {"wall_s": round(self.wall[stage], 3), "cpu_s": round(self.cpu[stage], 3)}
            for stage in self.wall
        }

    def line(self) -> str:
        """The CLI's one line: each stage's CPU seconds (and wall seconds)."""
        parts = [f"{s} {self.cpu[s]:,.1f} CPU-s ({self.wall[s]:,.1f} s)" for s in self.wall]
        return "stages: " + ", ".join(parts)


_DONE = object()
