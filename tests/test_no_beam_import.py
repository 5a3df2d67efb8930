"""Local runs that need no pipeline never load apache_beam: `sample --runner InMemory` (node
and link seeds), `validate`, `estimate`, `stats` and `show` (Beam's import is most of
a small run's start-up). Only a gs:// path (sampler.io.files) or a Beam runner loads it.

Each command runs for real in a fresh interpreter, which then reports whether apache_beam is in
sys.modules; the last check runs the default (Beam) runner the same way, to show the check can
see the import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sampler.tools import synthetic

ROOT = Path(__file__).resolve().parents[1]

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "c" input_op_names: "seed" edge_set_name: "cites" sample_size: 4
  strategy: RANDOM_UNIFORM }
"""


def run_cli(argv: list[str]) -> tuple[int, bool, str]:
    """(exit code, whether apache_beam was loaded, stderr) of `beam-graph ARGV` in a fresh
    interpreter."""
    code = (
        "import json, sys\n"
        "from pipelines import cli\n"
        f"rc = cli.main({argv!r})\n"
        "print(json.dumps(['apache_beam' in sys.modules, rc]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded, rc = json.loads(proc.stdout.strip().splitlines()[-1])
    return rc, loaded, proc.stderr


@pytest.fixture(scope="module")
def graph(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("no_beam")
    mag = synthetic.generate_mag(60, feature_dim=4)
    schema = synthetic.write_graph(mag, str(root / "graph"), fmt="csv")
    spec = synthetic.write_sampling_spec(
        synthetic.mag_sampling_spec(), str(root / "graph" / "sampling_spec.pbtxt")
    )
    link_spec = root / "link_spec.pbtxt"
    link_spec.write_text(LINK_SPEC)
    return {"schema": schema, "spec": spec, "link_spec": str(link_spec), "root": str(root)}


def _sample(graph, out: str, *extra: str) -> list[str]:
    return ["sample", "--graph_schema", graph["schema"], "--sampling_spec", graph["spec"],
            "--output_samples", out, "--progress_interval", "0", *extra]  # fmt: skip


def test_in_memory_sample_validate_estimate_stats_show(graph):
    samples = os.path.join(graph["root"], "in_memory", "samples@2")
    rc, loaded, err = run_cli(_sample(graph, samples, "--runner", "InMemory"))
    assert rc == 0, err
    assert not loaded
    assert os.path.getsize(samples.replace("@2", "-00000-of-00002")) > 0
    pattern = samples.replace("@2", "-*")
    for argv in (
        ["validate", "--graph_schema", graph["schema"], "--sampling_spec", graph["spec"]],
        ["estimate", "--graph_schema", graph["schema"], "--sampling_spec", graph["spec"],
         "--probe_seeds", "10"],
        ["stats", "--samples", pattern, "--no_plots",
         "--output_dir", os.path.join(graph["root"], "stats")],
        ["show", "--samples", pattern, "--index", "1"],
    ):  # fmt: skip
        rc, loaded, err = run_cli(argv)
        assert rc == 0, (argv[0], err)
        assert not loaded, argv[0]


def test_in_memory_link_sample(graph):
    samples = os.path.join(graph["root"], "link", "samples")
    argv = _sample(graph, samples, "--runner", "InMemory", "--seed_edge_set", "cites",
                   "--negatives_per_seed", "1")  # fmt: skip
    argv[argv.index(graph["spec"])] = graph["link_spec"]
    rc, loaded, err = run_cli(argv)
    assert rc == 0, err
    assert not loaded
    assert os.path.getsize(samples) > 0


def test_the_check_sees_beam_when_a_pipeline_runs(graph):
    samples = os.path.join(graph["root"], "beam", "samples")
    rc, loaded, err = run_cli(_sample(graph, samples))
    assert rc == 0, err
    assert loaded
