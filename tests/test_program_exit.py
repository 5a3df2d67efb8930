"""The end of a CLI program: a closed pipe and a signal right after the summary.

J  `sample ... | head -1` (and validate, partition, stats): the reader of standard output is
   gone before the report ends. The run goes on to its end (every file, the run summary), exit
   0, no traceback, and one line on stderr says the report was cut short.
K  SIGTERM or Ctrl-C just after `summary:` is printed: the run had ended, so the process exits
   either with 0 (it was gone) or with 128 + the signal and one line; never silently killed
   (Python resets its signal handlers while it finalizes).

The programs run as a user runs them: `python -m pipelines.X` in their own process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.test_bad_inputs_round2 import write_graph

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=ROOT)


def closed_pipe_run(args) -> subprocess.CompletedProcess:
    """`python -m args` with standard output a pipe whose reader has already gone."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=ENV, stdout=write_end,
                              stderr=subprocess.PIPE, timeout=300)  # fmt: skip
    finally:
        os.close(write_end)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    return write_graph(tmp_path_factory.mktemp("program_exit") / "graph")


def test_a_closed_stdout_cuts_the_report_not_the_run(graph, tmp_path):
    samples = tmp_path / "samples"
    runs = {
        "sample": ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec",
                   str(graph / "spec.pbtxt"), "--output_samples", f"{samples}/s@2"],
        "validate": ["pipelines.validate", "--graph_schema", str(graph), "--sampling_spec",
                     str(graph / "spec.pbtxt")],
        "partition": ["pipelines.partition", "--graph_schema", str(graph), "--output_dir",
                      str(tmp_path / "parts"), "--graph_name", "g", "--num_parts", "2",
                      "--runner", "InMemory"],
        "stats": ["pipelines.stats", "--samples", f"{samples}/s@2", "--output_dir",
                  str(tmp_path / "stats")],
    }  # fmt: skip
    for name, args in runs.items():
        done = closed_pipe_run(args)
        err = done.stderr.decode()
        assert done.returncode == 0, (name, err)
        assert "Traceback" not in err and "BrokenPipe" not in err, (name, err)
        assert "standard output was closed" in err, (name, err)
    assert (samples / "run_summary.json").exists() and (samples / "schema.pbtxt").exists()
    assert (tmp_path / "parts" / "run_summary.json").exists()
    assert (tmp_path / "stats" / "summary.json").exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_after_the_summary_ends_in_one_line(graph, tmp_path, signum):
    for delay in (0.0, 0.01, 0.05, 0.15):
        out = tmp_path / f"out-{delay}"
        args = ["pipelines.sample", "--graph_schema", str(graph), "--sampling_spec",
                str(graph / "spec.pbtxt"), "--output_samples", f"{out}/s", "--runner", "InMemory"]  # fmt: skip
        proc = subprocess.Popen([sys.executable, "-m", *args], cwd=ROOT, env=ENV,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        for line in proc.stdout:
            if line.startswith(b"summary:"):
                time.sleep(delay)
                proc.send_signal(signum)
                break
        _, err = proc.communicate(timeout=120)
        err = err.decode()
        assert proc.returncode in (0, 128 + signum), (delay, proc.returncode, err)
        if proc.returncode:
            lines = [x for x in err.splitlines() if "interrupted" in x]
            assert len(lines) == 1, (delay, err)
        assert "Traceback" not in err, (delay, err)
