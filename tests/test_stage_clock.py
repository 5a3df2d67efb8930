"""Stage times of a run in one process: pipelines.reporting.stage_clock and `--runner InMemory`'s
run_summary.json `stages` (lower bounds of CPU spent and sums, not speed tests)."""

from __future__ import annotations

import json
import resource
import time

from pipelines import sample as sample_cli
from pipelines.reporting.stage_clock import StageClock
from sampler.tools import synthetic


def _burn(seconds: float) -> None:
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def test_each_stage_gets_its_own_time():
    clock = StageClock()
    with clock("first"):
        _burn(0.2)

    def items():
        for i in range(3):
            _burn(0.05)  # made inside `timed`: counted in "made"
            yield i

    for _ in clock.timed("made", items()):
        _burn(0.1)  # the consumer's time: not "made"'s
    summary = clock.summary()
    assert list(summary) == ["first", "made"]
    assert summary["first"]["cpu_s"] >= 0.2 and summary["first"]["wall_s"] >= 0.2
    assert 0.15 <= summary["made"]["cpu_s"] < 0.15 + 0.25, summary
    assert clock.line().startswith("stages: first 0.2 CPU-s")


def test_in_memory_run_summary_has_every_stage(tmp_path):
    """The six stages, each with some CPU, adding up to no more than the run's CPU."""
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
    assert all(s["cpu_s"] > 0 and s["wall_s"] > 0 for s in stages.values()), stages
    used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    assert sum(s["cpu_s"] for s in stages.values()) <= used + 0.05
