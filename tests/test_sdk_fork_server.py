"""The local runner's SDK worker fork server (pipelines.runtime.sdk_fork_server) outside a pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

from pipelines.runtime import sdk_fork_server


def test_a_long_temp_folder_still_gives_a_socket_path_that_fits(tmp_path, monkeypatch):
    deep = tmp_path / ("x" * 60) / ("y" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setenv("TMPDIR", str(deep))
    monkeypatch.setattr("tempfile.tempdir", None)
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    try:
        server.wait_ready()
        assert len((server.socket_path + ".tmp").encode()) < 108
        folder = os.path.dirname(server.socket_path)
        assert os.path.exists(server.socket_path)
    finally:
        server.stop()
    assert not os.path.exists(folder)


def test_a_client_gets_the_exit_code_of_its_forked_worker(tmp_path):
    """The client relays the forked worker's exit code: a worker without a runner to talk to
    fails (Beam's harness needs CONTROL_API_SERVICE_DESCRIPTOR), and so does the client."""
    server = sdk_fork_server.ForkServer(str(tmp_path / "workers.log"))
    try:
        server.wait_ready()
        env = {k: v for k, v in os.environ.items() if "SERVICE_DESCRIPTOR" not in k}
        done = subprocess.run(
            [sys.executable, "-I", sdk_fork_server.CLIENT, server.socket_path],
            env=env,
            capture_output=True,
            timeout=120,
        )
    finally:
        server.stop()
    assert done.returncode == 1, done
    assert b"CONTROL_API_SERVICE_DESCRIPTOR" in done.stderr  # the worker's own error, relayed
