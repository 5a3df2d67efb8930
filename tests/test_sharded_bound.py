"""The `sharded` placement's memory bound as a setting: `--graph_placement auto` with a
--worker_memory_mb that only `sharded` fits raises --num_shards and --num_buckets until the
modelled peak fits, says so on stdout, and the run gives the records of `worker` (byte for byte
with the same flags) and of the in-memory oracle."""

from __future__ import annotations

import re

import pytest

from pipelines import estimate as estimate_cli
from pipelines.runtime import worker_buffers
from sampler.errors import UserError
from sampler.tools import sharded_bound as sb
from sampler.tools import synthetic
from tests.pipeline_helpers import oracle_records, read_records, run_pipeline

MB = 2**20


def test_the_flags_grow_with_the_graph_and_the_seeds_so_the_modelled_peak_stays_in_budget():
    budget_mb = 1024
    peaks, flags = [], []
    for scale in (1, 4, 16, 64):
        got = sb.sharded_flags(scale * 0.5e9, scale * 20_000, budget_mb)
        flags.append((got.num_shards, got.num_buckets))
        peaks.append(got.process_gb)
        # independent of the module's own arithmetic: the peak model written out
        shard = 3.1 * scale * 0.5e9 / got.num_shards
        bucket = 12.0 * scale * 20_000 * 150e3 / got.num_buckets
        assert 0.5 + (shard + bucket) / 1e9 <= budget_mb * MB / 1e9
    assert flags[0][0] >= 32 and flags[-1][0] > flags[0][0] and flags[-1][1] > flags[0][1]
    assert flags == sorted(flags)  # never fewer keys for a larger graph
    assert max(peaks) <= budget_mb * MB / 1e9


def test_flags_are_only_raised_and_a_budget_below_the_fixed_part_is_one_line():
    got = sb.sharded_flags(1e6, 10, 4096, num_shards=500, num_buckets=700)
    assert (got.num_shards, got.num_buckets) == (500, 700)
    with pytest.raises(UserError, match="below what a `sharded` SDK process needs"):
        sb.sharded_flags(1e6, 10, 300)
    with pytest.raises(UserError, match="at most 65536"):
        sb.sharded_flags(1e15, 10, 600)


def test_worker_buffers_bound_the_data_plane_of_a_worker_process():
    """What pipelines.runtime.sdk_fork_server's workers run before Beam's harness starts."""
    from apache_beam.runners.worker import bundle_processor, data_plane

    worker_buffers.bound()
    worker_buffers.bound()  # twice: one wrapper
    stream = data_plane.SizeBasedBufferingClosableOutputStream()
    assert stream._size_flush_threshold == worker_buffers.STREAM_FLUSH_BYTES
    assert data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES == worker_buffers.SEND_QUEUE_BYTES
    wrapped = bundle_processor.BundleProcessor.process_bundle
    assert getattr(wrapped, "_trims", False)
    assert not hasattr(wrapped.__closure__[0].cell_contents, "_trims")


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("sharded_bound")
    schema = synthetic.write_graph(
        synthetic.generate_mag(60, seed=4, feature_dim=8), str(root / "graph"), "tfrecord"
    )
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "mag.pbtxt"))
    return schema, spec


def test_a_small_budget_picks_sharded_with_raised_flags_and_the_same_records(
    graph, tmp_path, capsys
):
    schema, spec = graph
    # worker needs ~0.6 GB whatever the graph, topology more; sharded's fixed part is 0.5 GB:
    # 520 MB leaves ~20 MB to split between shards and buckets.
    run_pipeline(
        schema, spec, f"{tmp_path}/auto/samples@2", "--graph_placement", "auto",
        "--worker_memory_mb", "520", "--num_shards", "1", "--num_buckets", "1", "--seed", "5",
    )  # fmt: skip
    out = capsys.readouterr().out
    assert "graph placement: sharded:" in out
    chosen = re.search(r"sharded flags: --num_shards (\d+) --num_buckets (\d+)", out)
    assert chosen, out
    shards, buckets = chosen.groups()
    assert int(buckets) > 1  # 60 seeds of ~150 KB records x 12 do not fit ~20 MB; the tables do
    run_pipeline(
        schema, spec, f"{tmp_path}/worker/samples@2", "--graph_placement", "worker",
        "--num_shards", shards, "--num_buckets", buckets, "--seed", "5",
    )  # fmt: skip
    auto = read_records(f"{tmp_path}/auto/samples-*-of-00002")
    worker = read_records(f"{tmp_path}/worker/samples-*-of-00002")
    assert auto == worker
    assert len(auto) == 60
    assert sorted(auto) == sorted(oracle_records(schema, spec, seed=5))


def test_estimate_prints_the_sharded_flags_for_a_budget(graph, capsys):
    """`estimate --worker_memory_mb` prints the flags that bound a `sharded` process within the
    budget (its modelled peak at most the budget), or one line that none do."""
    schema, spec = graph
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--probe_seeds", "0"]
    argv += ["--stats_cache", "none", "--progress_interval", "0"]
    assert estimate_cli.main([*argv, "--worker_memory_mb", "490"]) == 0
    out = capsys.readouterr().out
    line = re.search(r"sharded flags: --num_shards (\d+) --num_buckets (\d+) \(largest SDK"
                     r" process ~(\d+) MB modelled, within --worker_memory_mb 490", out)  # fmt: skip
    assert line, out
    assert int(line[1]) >= 32 and int(line[2]) >= 32
    assert sb.SHARDED_BASE_GB * 1e9 / MB <= int(line[3]) <= 490
    assert estimate_cli.main([*argv, "--worker_memory_mb", "300"]) == 0
    assert "sharded flags: none fit: --worker_memory_mb 300 is below" in capsys.readouterr().out


LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""


@pytest.mark.parametrize("seeds", ["node", "link"])
def test_a_small_budget_holds_in_the_measured_sdk_workers(tmp_path, seeds):
    """Measured, not modelled: a `sharded` run with --worker_memory_mb 520 (below what `worker`
    needs) and two SDK worker processes; the largest worker's peak RSS (run_summary.json's
    `resources`, getrusage of the reaped workers) stays within the budget, node and link seeds."""
    import json
    import os
    import subprocess
    import sys

    mag = synthetic.generate_mag(300, seed=4, feature_dim=8)
    schema = synthetic.write_graph(mag, str(tmp_path / "graph"), "tfrecord")
    if seeds == "node":
        spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(tmp_path / "s"))
        extra = []
    else:
        spec = str(tmp_path / "link.pbtxt")
        (tmp_path / "link.pbtxt").write_text(LINK_SPEC)
        extra = ["--seed_edge_set", "writes", "--negatives_per_seed", "2"]
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "pipelines.sample", "--graph_schema", schema]
    cmd += ["--sampling_spec", spec, "--output_samples", str(out / "samples@2"), *extra]
    cmd += ["--graph_placement", "sharded", "--worker_memory_mb", "520"]
    cmd += ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "sharded flags:" in proc.stdout, proc.stdout
    resources = json.loads((out / "run_summary.json").read_text())["resources"]
    peak = resources["largest_sdk_worker_peak_rss_mb"]
    assert peak is not None and 100 < peak <= 520, resources
    assert read_records(f"{out}/samples-*-of-00002"), "no records written"
