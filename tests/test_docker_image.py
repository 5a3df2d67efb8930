"""The worker image built and run: scripts/test_docker.sh builds docker/Dockerfile with podman
on a stand-in Beam base (offline) and checks the stages, a portable Beam job's SDK workers,
the kernel cache and the launch script's docker mode in it (docs/dataflow.md, "Try the image
locally").

The build takes minutes: it runs where the machine allows it (root, podman installable with
apt-get) and is skipped with the script's one line elsewhere, or with BEAM_GRAPH_DOCKER_TEST=0.
The other tests here run the script's driver against stand-in tools, in seconds: a failing
step ends in one line naming it, and SIGTERM leaves no process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "test_docker.sh")
# The whole script's bound: its steps' own limits are shorter; an empty base-image cache
# (debootstrap) and a cold build on a loaded 2-core machine take about 15 minutes.
LIMIT_S = 50 * 60


def run_script(*args: str, env: dict[str, str] | None = None, limit_s: float = LIMIT_S):
    """(exit status, stdout, stderr) of scripts/test_docker.sh; SIGTERM at the limit (the
    script then removes its containers), never SIGKILL."""
    proc = subprocess.Popen(
        ["bash", SCRIPT, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    try:
        out, err = proc.communicate(timeout=limit_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=120)
        pytest.fail(f"scripts/test_docker.sh ran past {limit_s} s:\n{out[-3000:]}{err[-3000:]}")
    return proc.returncode, out, err


def skipped(code: int, err: str) -> None:
    if code == 77:
        lines = err.strip().splitlines()
        assert len(lines) == 1, err
        pytest.skip(lines[0])


def test_the_image_builds_and_runs_like_the_host():
    code, out, err = run_script()
    skipped(code, err)
    print(out)  # each step's time (pytest -rP shows it)
    assert code == 0, f"{out[-4000:]}\n{err[-4000:]}"
    for step in ["base", "build", "demo", "graph", "stages", "kernels", "portable", "launch"]:
        assert f"test_docker: {step} ok" in out, out


@pytest.fixture
def fake_tools(tmp_path):
    """A PATH whose podman, runc and debootstrap are stand-ins (the base step's debootstrap
    runs FAKE_DEBOOTSTRAP), and a private cache folder."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, body in {
        "podman": "exit 1",  # `podman image exists`: no base image yet
        "runc": "exit 0",
        "debootstrap": 'echo $$ > "$FAKE_PIDS"/debootstrap; eval "$FAKE_DEBOOTSTRAP"',
    }.items():
        (bin_dir / tool).write_text(f"#!/usr/bin/env bash\n{body}\n")
        (bin_dir / tool).chmod(0o755)
    pids = tmp_path / "pids"
    pids.mkdir()
    return {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "BEAM_GRAPH_DOCKER_CACHE": str(tmp_path / "cache"),
        "BEAM_GRAPH_DEBIAN_MIRROR": "http://mirror.invalid/debian",
        "FAKE_PIDS": str(pids),
    }


def test_a_failing_step_ends_in_one_line_naming_it(fake_tools):
    env = {**fake_tools, "FAKE_DEBOOTSTRAP": "echo 'E: Failed getting release file'; exit 3"}
    code, out, err = run_script("--build-only", env=env, limit_s=120)
    skipped(code, err)
    assert code == 1, out + err
    assert out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith("test_docker: FAILED at step base (exit 3, "), line
    assert "E: Failed getting release file" in line
    log = os.path.join(fake_tools["BEAM_GRAPH_DOCKER_CACHE"], "logs", "base.log")
    assert f"(log: {log})" in line


def test_sigterm_stops_the_step_and_leaves_no_process(fake_tools):
    env = {**fake_tools, "FAKE_DEBOOTSTRAP": "sleep 300"}
    proc = subprocess.Popen(
        ["bash", SCRIPT, "--build-only"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    marker = os.path.join(fake_tools["FAKE_PIDS"], "debootstrap")
    deadline = time.monotonic() + 60
    while not os.path.exists(marker) and proc.poll() is None:
        assert time.monotonic() < deadline, "the base step never started"
        time.sleep(0.1)
    if proc.poll() is not None:
        out, err = proc.communicate()
        skipped(proc.returncode, err)
        pytest.fail(out + err)
    while not open(marker).read().strip():
        time.sleep(0.05)
    step_pid = int(open(marker).read())
    step_group = os.getpgid(step_pid)  # the step's own process group (`timeout` makes one)
    try:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGTERM, out + err
        assert err.strip().splitlines() == ["test_docker: FAILED at step base: stopped by SIGTERM"]
        deadline = time.monotonic() + 30
        while os.path.exists(f"/proc/{step_pid}"):  # the step's processes end with it
            assert time.monotonic() < deadline, "the step's process outlived the script"
            time.sleep(0.1)
    finally:  # whatever failed, nothing of this test keeps running
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        if step_group != os.getpgrp():
            try:
                os.killpg(step_group, signal.SIGKILL)
            except ProcessLookupError:
                pass
