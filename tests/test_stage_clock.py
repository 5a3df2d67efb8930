"""Stage times of a run in one process: pipelines.reporting.stage_clock and `--runner InMemory`'s
run_summary.json `stages` (lower bounds of CPU spent and sums, not speed tests)."""

from __future__ import annotations

import json
import resource

from pipelines import sample as sample_cli
from pipelines.reporting.stage_clock import StageClock
from sampler.tools import synthetic


class TickingClock:
    """A clock that the test moves by hand: the accounting is checked exactly, with no load
    or rounding in it (the real clocks are in the run below)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_each_stage_gets_its_own_time():
    wall, cpu = TickingClock(), TickingClock()
    clock = StageClock(wall_clock=wall, cpu_clock=cpu)

    def spend(wall_s: float, cpu_s: float) -> None:
        wall.now += wall_s
        cpu.now += cpu_s

    with clock("first"):  # binary fractions: the sums below are exact
        spend(2.0, 0.1875)

    def items():
        for i in range(3):
            spend(0.5, 0.0625)  # made inside `timed`: counted in "made"
            yield i

    for _ in clock.timed("made", items()):
        spend(1.0, 0.125)  # the consumer's time: not "made"'s
    with clock("first"):  # a stage's second turn adds to it
        spend(0.0625, 0.125)
    summary = clock.summary()
    assert list(summary) == ["first", "made"]
    assert summary["first"] == {"wall_s": 2.062, "cpu_s": 0.312}  # 2.0625, 0.3125 rounded
    assert summary["made"] == {"wall_s": 1.5, "cpu_s": 0.188}  # 0.1875 rounded
    assert clock.line() == "stages: first 0.3 CPU-s (2.1 s), made 0.2 CPU-s (1.5 s)"


def test_stages_run_on_other_threads_bring_their_cpu_and_share_the_wait():
    """Sampling and encoding run on threads (sampler.sample.chunk_stream): their CPU is what
    they measured there; the wall time this thread waited for them is shared in proportion
    to their walls; writing here counts this thread's CPU, not the process's."""
    wall, cpu, thread = TickingClock(), TickingClock(), TickingClock()
    clock = StageClock(wall_clock=wall, cpu_clock=cpu, thread_clock=thread)
    clock.add_parts({"sample": 3.0, "encode": 1.0}, {"sample": 0.75, "encode": 0.25}, 2.0)
    clock.add_parts({"sample": 0.0, "encode": 0.0}, {"sample": 0.5, "encode": 0.0}, 0.0)
    with clock("write", thread_cpu=True):
        wall.now += 0.5
        cpu.now += 4.0  # the other threads' CPU meanwhile: not the write's
        thread.now += 0.125
    summary = clock.summary()
    assert list(summary) == ["sample", "encode", "write"]
    assert summary["sample"] == {"wall_s": 1.5, "cpu_s": 1.25}
    assert summary["encode"] == {"wall_s": 0.5, "cpu_s": 0.25}
    assert summary["write"] == {"wall_s": 0.5, "cpu_s": 0.125}


def test_in_memory_run_summary_has_every_stage(tmp_path):
    """The six stages in the order they ran, adding up to no more than the run's CPU (a stage
    may take under the half millisecond that run_summary.json rounds to: no stage is asked
    for more than zero)."""
    graph = synthetic.generate_mag(300, seed=2, feature_dim=8)
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"), fmt="parquet")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s.pbtxt"))
    before = resource.getrusage(resource.RUSAGE_SELF)
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--runner", "InMemory",
            "--output_samples", str(tmp_path / "out" / "samples@2")]  # fmt: skip
    assert sample_cli.main(argv) == 0
    after = resource.getrusage(resource.RUSAGE_SELF)
    stages = json.loads((tmp_path / "out" / "run_summary.json").read_text())["stages"]
    assert list(stages) == ["read", "build", "seeds", "sample", "encode", "write"]
    assert all(s["cpu_s"] >= 0 and s["wall_s"] >= 0 for s in stages.values()), stages
    used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    # six roundings of at most 0.0005 s each: well inside the 0.05 s allowed
    assert sum(s["cpu_s"] for s in stages.values()) <= used + 0.05
