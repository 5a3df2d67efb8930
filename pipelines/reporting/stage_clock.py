"""Wall and CPU seconds per stage of a run in one process (`--runner InMemory`).

CPU is the whole process's (every thread: the reads and builds run on threads), from
`time.process_time`, but for the stages that run side by side: sampling and encoding run on
threads chunk by chunk (sampler.sample.chunk_stream) while this thread writes, so each chunk
brings its threads' CPU (`add_parts`) and writing counts this thread's (`thread_cpu`).
Stages that interleave add up their turns. run_summary.json's `stages` section and the CLI's
`stages:` line.
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
        thread_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.wall: collections.Counter = collections.Counter()
        self.cpu: collections.Counter = collections.Counter()
        self._wall_clock, self._cpu_clock = wall_clock, cpu_clock
        self._thread_clock = thread_clock

    @contextlib.contextmanager
    def __call__(self, stage: str, thread_cpu: bool = False):
        """`thread_cpu`: the stage's CPU is this thread's only (others run other stages)."""
        cpu_clock = self._thread_clock if thread_cpu else self._cpu_clock
        wall, cpu = self._wall_clock(), cpu_clock()
        try:
            yield
        finally:
            self.wall[stage] += self._wall_clock() - wall
            self.cpu[stage] += cpu_clock() - cpu

    def add_parts(self, wall: dict[str, float], cpu: dict[str, float], waited: float) -> None:
        """Stages that ran on other threads: the CPU they measured there, and `waited` (the
        wall time this thread waited for them) shared in proportion to their wall times."""
        total = sum(wall.values())
        for stage, seconds in cpu.items():
            self.cpu[stage] += seconds
            self.wall[stage] += waited * wall[stage] / total if total > 0 else 0.0

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
