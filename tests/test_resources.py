"""run_summary.json's `resources`: the bytes that crossed stages and the memory by process.

The byte counts are checked against payloads of known size (an element's encoding adds only
a few bytes of length prefixes and windowing to its payload), in the order that biases
Beam's own sampled estimate (large elements first); the memory figures against the process
roles that exist (no SDK worker figure in-process, one with worker processes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.reporting.resources import slowest_stages, stage_bytes, stage_cpu, stage_label
from pipelines.runtime.runner import LocalRunner
from sampler.tools import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OVERHEAD = 64  # at most this many bytes of encoding per element beyond its payload


def _sizes():
    # 5 elements of 200 kB, then 2,000 of 100 bytes: a sampled mean would be far off.
    return [200_000] * 5 + [100] * 2000


def test_shuffle_bytes_are_the_bytes_written_to_each_group_by_key():
    runner = LocalRunner()
    with beam.Pipeline(runner=runner) as p:
        elements = p | beam.Create(list(enumerate(_sizes())), reshuffle=False)
        keyed = elements | beam.MapTuple(lambda i, n: (i % 7, b"x" * n))
        _ = keyed | "Group" >> beam.GroupByKey() | beam.Map(len)
        _ = keyed | "Again" >> beam.GroupByKey() | "Len2" >> beam.Map(len)
    got = stage_bytes(runner.pipeline_proto, runner.counts.buffer_bytes)
    payload = sum(_sizes())
    for step in ("Group", "Again"):
        assert payload <= got["shuffle_by_step"][step] <= payload + OVERHEAD * len(_sizes())
    assert got["shuffle_bytes"] == got["shuffle_by_step"]["Group"] * 2
    assert got["side_input_bytes"] == 0


def test_side_input_bytes_are_what_every_worker_reads():
    runner = LocalRunner()
    with beam.Pipeline(runner=runner) as p:
        table = p | "Table" >> beam.Create([b"y" * 50_000 for _ in range(20)])
        main = p | "Main" >> beam.Create([1, 2, 3])
        _ = main | beam.Map(lambda x, t: x + len(t), t=beam.pvalue.AsList(table))
    got = stage_bytes(runner.pipeline_proto, runner.counts.buffer_bytes)
    assert 1_000_000 <= got["side_input_bytes"] <= 1_000_000 + OVERHEAD * 20
    assert got["stage_bytes"] >= got["side_input_bytes"]


def _sleep_then(seconds):
    def fn(x):
        time.sleep(seconds)
        return x

    return fn


def test_slowest_stages_name_the_stage_that_waited():
    """A step that sleeps 0.2 s per element (two) behind a GroupByKey makes its stage take at
    least 0.4 s (a lower bound, not a speed test); the label names the stage."""
    runner = LocalRunner()
    with beam.Pipeline(runner=runner) as p:
        grouped = p | beam.Create([(1, 1), (2, 2)]) | "Group" >> beam.GroupByKey()
        _ = grouped | "Sleepy" >> beam.Map(_sleep_then(0.2))
    slowest = slowest_stages(runner.counts.stage_seconds)
    name, seconds = next(iter(slowest.items()))
    assert name == "Group/Read + Sleepy" and seconds >= 0.4, slowest
    assert sum(runner.counts.stage_seconds.values()) >= 0.4


TICK_CUTS_S = 4 / os.sysconf("SC_CLK_TCK")


def _burn(cpu_seconds):
    def fn(x):
        start = time.thread_time()
        while time.thread_time() - start < cpu_seconds:
            pass
        return x

    return fn


@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_stage_cpu_puts_a_step_s_cpu_on_its_stage_and_process(mode):
    """A step that burns 0.4 CPU-s per element (two) behind a GroupByKey: its stage shows at
    least 0.8 CPU-s, in the SDK worker process when there is one, else in the runner (lower
    bounds of CPU spent, not a speed test). The SDK workers' CPU is read from /proc in whole
    clock ticks (utime and stime each cut to 10 ms, at the stage's start and end): the bound
    allows those cuts, 0.04 s at most, and no more."""
    runner = LocalRunner()
    options = PipelineOptions([f"--direct_running_mode={mode}", "--direct_num_workers=1"])
    with beam.Pipeline(runner=runner, options=options) as p:
        grouped = p | beam.Create([(1, 1), (2, 2)]) | "Group" >> beam.GroupByKey()
        _ = grouped | "Burn" >> beam.Map(_burn(0.4))
    got = stage_cpu(runner.counts.stage_seconds, runner.counts.stage_cpu)
    entry = got["Group/Read + Burn"]
    where, other = (
        ("workers_s", "runner_s") if mode == "multi_processing" else ("runner_s", "workers_s")
    )
    assert entry[where] >= 0.8 - TICK_CUTS_S > entry[other], got
    assert list(got) == list(dict.fromkeys(map(stage_label, runner.counts.stage_seconds)))


def test_a_stage_label_is_its_first_two_steps():
    name = "((A/B/Read)+(ref_AppliedPTransform_C-D_12))+(ref_AppliedPTransform_E_3)"
    assert stage_label(name) == "A/B/Read + C-D"
    assert stage_label("(Only/Read)") == "Only/Read"


def _run(module: str, *argv: str) -> None:
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(
        [sys.executable, "-m", module, *argv], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_sample_run_summary_reports_memory_by_process_and_shuffle_beside_output(tmp_path):
    graph = synthetic.generate_mag(200, seed=3, feature_dim=16)
    schema = synthetic.write_graph(graph, str(tmp_path / "in" / "graph"), fmt="tfrecord")
    spec = synthetic.write_sampling_spec(
        synthetic.mag_sampling_spec(), str(tmp_path / "in" / "spec.pbtxt")
    )
    used = {}
    for mode in ("in_memory", "multi_processing"):
        out = tmp_path / mode
        stdout = _run("pipelines.sample", "--graph_schema", schema, "--sampling_spec", spec,
                      "--output_samples", f"{out}/samples@2", "--graph_placement", "topology",
                      "--progress_interval", "0", f"--direct_running_mode={mode}",
                      "--direct_num_workers=2")  # fmt: skip
        assert "shuffled: " in stdout
        used[mode] = json.loads((out / "run_summary.json").read_text())["resources"]
        samples = sum(os.path.getsize(p) for p in out.glob("samples-*-of-00002"))
        assert used[mode]["output_bytes"] == samples
        # the topology placement moves the sampled subgraphs and their feature rows once
        assert 0.5 * samples < used[mode]["shuffle_bytes"] < 3 * samples
        assert used[mode]["shuffle_bytes_per_subgraph"] == round(used[mode]["shuffle_bytes"] / 200)
        assert used[mode]["side_input_bytes"] > 0
    assert used["in_memory"]["largest_sdk_worker_peak_rss_mb"] is None
    worker = used["multi_processing"]["largest_sdk_worker_peak_rss_mb"]
    assert 50 < worker < used["in_memory"]["runner_peak_rss_mb"] + 500
    # the same pipeline moves about the same bytes whatever the number of worker processes
    # (bundles differ, and with them a few batch boundaries)
    one, two = used["in_memory"]["shuffle_bytes"], used["multi_processing"]["shuffle_bytes"]
    assert abs(one - two) < 0.01 * one


def test_partition_run_summary_reports_shuffled_bytes(tmp_path):
    graph = synthetic.generate_mag(200, seed=3, feature_dim=4)
    schema = synthetic.write_graph(graph, str(tmp_path / "in" / "graph"), fmt="tfrecord")
    out = tmp_path / "parts"
    stdout = _run("pipelines.partition", "--graph_schema", schema, "--output_dir", str(out),
                  "--graph_name", "g", "--num_parts", "2")  # fmt: skip
    assert "shuffled:" in stdout
    used = json.loads((out / "run_summary.json").read_text())["resources"]
    assert used["shuffle_bytes"] > 0 and used["shuffle_by_step"]
    assert used["stage_bytes"] >= used["shuffle_bytes"]
    assert used["runner_peak_rss_mb"] > 50
