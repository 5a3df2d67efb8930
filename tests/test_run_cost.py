"""run_summary.json's `cost` block and `estimate --from_run`'s projection.

The block is checked against independent counts, never against a clock: the subgraphs against
the records read back from the shards, the bytes against the files on disk, the CPU and the
peaks against what the operating system says of the whole process tree once it has ended
(`os.wait4`), the per-op shuffles against the total. The projection against its formula
computed here by hand.
"""

from __future__ import annotations

import json
import math
import os
import struct
import subprocess
import sys

import pytest

from pipelines import estimate as estimate_cli
from sampler.tools import run_cost, synthetic
from sampler.tools.placement_cost import GB_HOUR_USD, SHUFFLE_GB_USD, VCPU_HOUR_USD

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_PAPERS = 200


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mag")
    graph = synthetic.generate_mag(NUM_PAPERS, seed=3, feature_dim=16)
    schema = synthetic.write_graph(graph, str(folder / "graph"), fmt="tfrecord")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(folder / "spec.pbtxt"))
    return schema, spec


def _records(path: str) -> list[int]:
    """The lengths of a TFRecord file's records, read from its framing."""
    lengths = []
    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            f.seek(length + 4, os.SEEK_CUR)
            lengths.append(length)
    return lengths


def _run_tree(argv: list[str], out_glob: str) -> dict:
    """scripts/run_tree.py's figures of `pipelines.sample argv`: the CPU seconds (`cpu`) and
    the largest single process's peak RSS (`maxrss_mb`) of its whole process tree, every
    process reaped by the script (a child subreaper) once it has ended."""
    env = dict(os.environ, PYTHONPATH=ROOT, TF_USE_LEGACY_KERAS="1")
    command = [sys.executable, "-m", "pipelines.sample", *argv]
    proc = subprocess.run(
        [sys.executable, "scripts/run_tree.py", "cost", out_glob, ROOT, *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    tree = json.loads(proc.stdout.strip().splitlines()[-1])
    assert tree["rc"] == 0, proc.stderr[-2000:]
    return tree


@pytest.mark.parametrize("mode", ["InMemory", "sharded"])
def test_the_cost_block_agrees_with_the_records_and_the_process_tree(mag, tmp_path, mode):
    schema, spec = mag
    out = tmp_path / "out"
    runner = (
        ["--runner", "InMemory"]
        if mode == "InMemory"
        else ["--graph_placement", "sharded", "--direct_running_mode=multi_processing",
              "--direct_num_workers=2"]
    )  # fmt: skip
    tree = _run_tree(
        ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples",
         f"{out}/samples@2", "--progress_interval", "0", *runner], f"{out}/samples-*"
    )  # fmt: skip
    tree_cpu, peak_mb = tree["cpu"], tree["maxrss_mb"]
    cost = json.loads((out / "run_summary.json").read_text())["cost"]
    shards = sorted(str(p) for p in out.glob("samples-*-of-00002"))
    lengths = [n for path in shards for n in _records(path)]
    on_disk = sum(os.path.getsize(p) for p in shards)
    assert cost["subgraphs"] == len(lengths) == NUM_PAPERS
    assert cost["output_bytes"] == on_disk == sum(n + 16 for n in lengths)
    assert cost["output_bytes_per_subgraph"] == round(on_disk / NUM_PAPERS, 1)
    # The CPU it reports is the tree's, less what the tree spent after writing the summary
    # (the manifest, the exit): most of it, never more.
    assert 0.5 * tree_cpu <= cost["cpu_seconds"] <= tree_cpu + 0.05, (cost, tree_cpu)
    workers = cost["worker_cpu_seconds"]
    assert cost["cpu_seconds_per_subgraph"] == pytest.approx(workers / NUM_PAPERS, abs=1e-4)
    assert cost["largest_worker_peak_rss_mb"] <= peak_mb + 1
    (line,) = tree["cli_cost"]
    assert f"{NUM_PAPERS:,} subgraphs" in line
    if mode == "InMemory":
        assert cost["runner_cpu_seconds"] is None and cost["runner_peak_rss_mb"] is None
        assert cost["shuffle_bytes"] == 0 and cost["cpu_seconds"] == round(workers, 2)
        return
    runner_cpu = cost["runner_cpu_seconds"]
    assert runner_cpu > 0 and workers > 0
    assert cost["cpu_seconds"] == pytest.approx(runner_cpu + workers, abs=0.011)
    assert cost["runner_peak_rss_mb"] <= peak_mb + 1
    assert "runner" in line and "apart" in line
    # Per hop: every op of the spec joins its frontier to the shards through a shuffle.
    by_op = cost["shuffle_bytes_per_subgraph_by_op"]
    ops = {op.op_name for op in synthetic.mag_sampling_spec().sampling_ops}
    assert set(by_op) == ops and all(v > 0 for v in by_op.values()), by_op
    assert sum(by_op.values()) <= cost["shuffle_bytes_per_subgraph"] + len(ops)
    assert cost["shuffle_bytes_per_subgraph"] == round(cost["shuffle_bytes"] / NUM_PAPERS, 1)
    # The assembly's shuffle carries where each bucket's node rows and edges wait (their
    # files, sampler.io.piece_files), not the rows (it carried 4.7x the records here, 1.5x at
    # 200k papers), and the files are gone after the run.
    by_step = json.loads((out / "run_summary.json").read_text())["resources"]["shuffle_by_step"]
    assert by_step.get("Sample/Assemble/Group", 0) < 0.5 * on_disk, (by_step, on_disk)
    assert not list(out.glob(".temp-*")), list(out.iterdir())


COST = {
    "runner": "beam, SDK worker processes",
    "subgraphs": 10_000,
    "output_bytes_per_subgraph": 160_000.0,
    "cpu_seconds_per_subgraph": 0.002,
    "shuffle_bytes_per_subgraph": 1_000.0,
    "largest_worker_peak_rss_mb": 4_000.0,
}


def test_the_projection_is_its_formula():
    p = run_cost.project(COST, 121_000_000, bytes_scale=5.0, cpu_scale=3.0, target_hours=4)
    vcpu_hours = 121e6 * 0.002 * 3.0 / 3600
    assert p.vcpu_hours == pytest.approx(vcpu_hours)
    assert p.output_bytes == pytest.approx(121e6 * 160e3 * 5)
    assert p.shuffle_bytes == pytest.approx(121e6 * 1e3 * 5)
    # 4.0 GB does not fit n1-standard-4's 3.75 GB per vCPU: n1-highmem-4's 6.5 does.
    assert (p.machine_type, p.vcpus, p.machine_gb, p.fits) == ("n1-highmem-4", 4, 26, True)
    assert p.workers == math.ceil(vcpu_hours / (4 * 4))
    assert p.hours == pytest.approx(vcpu_hours / (p.workers * 4)) and p.hours <= 4
    dollars = vcpu_hours * (VCPU_HOUR_USD + 6.5 * GB_HOUR_USD) + 605 * SHUFFLE_GB_USD  # 605 GB
    assert p.dollars == pytest.approx(dollars)
    # CPU follows the bytes unless told otherwise; a named machine that is too small says so.
    q = run_cost.project(COST, 1000, bytes_scale=2.0, machine_type="n1-standard-4")
    assert q.cpu_scale == 2.0 and not q.fits
    assert "does NOT hold" in "\n".join(run_cost.projection_lines(q))


def test_estimate_from_run_prints_the_job_and_its_formula(tmp_path, capsys):
    summary = tmp_path / "run" / "run_summary.json"
    summary.parent.mkdir()
    summary.write_text(json.dumps({"cost": COST}))
    argv = ["--from_run", str(summary.parent), "--num_seeds", "736389", "--target_hours", "0.75"]
    assert estimate_cli.main(argv) == 0
    out = capsys.readouterr().out
    p = run_cost.project(COST, 736_389, target_hours=0.75)
    assert f"dataflow: {p.workers:,} x {p.machine_type} for {p.hours:,.2f} h" in out
    assert f"${p.dollars:,.2f} at list price" in out
    assert "vCPU-hours = seeds x CPU-s per subgraph" in out and "as of 2026-" in out


def _block(subgraphs: int, cpu: float, output: int, shuffle: int) -> dict:
    return {**COST, "subgraphs": subgraphs, "worker_cpu_seconds": cpu, "output_bytes": output,
            "shuffle_bytes": shuffle, "cpu_seconds_per_subgraph": cpu / subgraphs,
            "output_bytes_per_subgraph": output / subgraphs,
            "shuffle_bytes_per_subgraph": shuffle / subgraphs}  # fmt: skip


def test_a_baseline_run_takes_the_fixed_costs_out(tmp_path, capsys):
    """Two runs of 2,000 and 10,000 subgraphs at 5 CPU-s fixed + 1 CPU-ms each: the projection
    uses the 1 CPU-ms, not the 10,000-run's 1.5; a baseline with as many subgraphs is one line."""
    big, small = _block(10_000, 15.0, 10**9, 10**6), _block(2_000, 7.0, 2 * 10**8, 2 * 10**5)
    got = run_cost.marginal(big, small)
    assert got["cpu_seconds_per_subgraph"] == pytest.approx(0.001)
    assert got["fixed_cpu_seconds"] == pytest.approx(5.0)
    assert got["output_bytes_per_subgraph"] == pytest.approx(1e5)
    assert got["shuffle_bytes_per_subgraph"] == pytest.approx(100)
    paths = []
    for name, block in (("big", big), ("small", small)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run_summary.json").write_text(json.dumps({"cost": block}))
        paths.append(str(tmp_path / name))
    argv = ["--from_run", paths[0], "--baseline_run", paths[1], "--num_seeds", "3600000"]
    assert estimate_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "= 1.000 CPU-ms, fixed 5.0 CPU-s" in out and " 1.00 vCPU-hours" in out, out
    argv = ["--from_run", paths[1], "--baseline_run", paths[0], "--num_seeds", "10"]
    assert estimate_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--baseline_run: 10,000 subgraphs, not fewer" in err[0], err


@pytest.mark.parametrize(
    "content, argv, message",
    [
        (None, [], "no such file"),
        ('{"flags": {}}', [], "no `cost` block"),
        ("{not json", [], "not a run summary"),
        (json.dumps({"cost": {**COST, "subgraphs": 0}}), [], "wrote no subgraph"),
        (json.dumps({"cost": COST}), ["--machine_type", "n9-huge-4"], "unknown machine type"),
        (json.dumps({"cost": COST}), ["--target_hours", "0"], "--target_hours 0.0: must be"),
    ],
)
def test_estimate_from_run_mistakes_are_one_line(tmp_path, capsys, content, argv, message):
    summary = tmp_path / "run_summary.json"
    if content is not None:
        summary.write_text(content)
    code = estimate_cli.main(["--from_run", str(summary), "--num_seeds", "10", *argv])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: "), err
    assert message in err[0], err
