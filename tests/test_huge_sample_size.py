"""A sample_size far above every degree costs what is sampled, not sample_size steps.

Each check runs in a subprocess with a timeout: before the fix Floyd's loop ran
sample_size (10^9) empty iterations, so sampling and `estimate` never finished.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from sampler.sample.choose_jit import choose
from sampler.sample.plan import RANDOM_UNIFORM

ROOT = Path(__file__).resolve().parents[1]
HUGE = 10**9


def run_python(code: str, timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=ROOT,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError(f"sample_size {HUGE} did not finish in {timeout} s") from None
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_choose_with_k_above_every_degree_takes_every_edge():
    degree = np.array([1, 3, 5], np.int64)
    start = np.array([0, 10, 20], np.int64)
    stream = np.arange(3, dtype=np.uint64)
    for k in (5, 6, 10**4):
        rows, pos = choose(
            start, degree, stream, sample_size=k, strategy=RANDOM_UNIFORM, weights=None
        )
        assert rows.tolist() == [0, 1, 1, 1, 2, 2, 2, 2, 2]
        assert pos.tolist() == [0, 10, 11, 12, 20, 21, 22, 23, 24]
    # Huge k in a subprocess, so that a regression fails instead of hanging.
    out = run_python(
        f"""
        import numpy as np
        from sampler.sample.choose_jit import choose
        for strategy in ("RANDOM_UNIFORM", "TOP_K"):
            rows, pos = choose(np.array([0, 10]), np.array([2, 3]), np.arange(2, dtype=np.uint64),
                               sample_size={HUGE}, strategy=strategy, weights=np.ones(13))
            print(rows.tolist(), pos.tolist())
        """,
        timeout=60,
    )
    assert out.strip().splitlines() == ["[0, 0, 1, 1, 1] [0, 1, 10, 11, 12]"] * 2


def test_sampling_and_estimate_with_sample_size_one_billion(tmp_path):
    """Records with sample_size 10^9 are byte-identical to those with 10^4 (above every degree),
    and `estimate`'s probe and degree model finish."""
    out = run_python(
        f"""
        from pipelines import cli
        from sampler.tools import synthetic
        from tests.pipeline_helpers import oracle_records
        schema = synthetic.write_graph(synthetic.generate_mag(200, seed=3), "{tmp_path}/g")
        specs = {{}}
        for k in (10**4, {HUGE}):
            spec = synthetic.mag_sampling_spec()
            for op in spec.sampling_ops:
                op.sample_size = k
            specs[k] = synthetic.write_sampling_spec(spec, f"{tmp_path}/spec{{k}}.pbtxt")
        small, huge = (oracle_records(schema, specs[k]) for k in (10**4, {HUGE}))
        assert len(huge) == 200 and huge == small, "records differ"
        argv = ["estimate", "--graph_schema", schema, "--sampling_spec", specs[{HUGE}],
                "--probe_seeds", "32", "--progress_interval", "0"]
        assert cli.main(argv) == 0
        print("ok")
        """,
        timeout=240,
    )
    assert out.strip().endswith("ok")
    assert f"{HUGE})" in out
