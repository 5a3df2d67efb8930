"""The local runner of the CLIs: Beam's FnApiRunner, offline (see pipelines.runtime.runner.make_runner)."""

from __future__ import annotations

import os
import shlex

from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines.beam_patches import streamed_inputs
from pipelines.reporting import resources
from pipelines.runtime import sdk_fork_server, worker_deaths
from pipelines.runtime.interrupts import WorkerDied
from pipelines.runtime.worker_logs import FORK_WORKERS, worker_log_path
from sampler.partition import adjacency_cache

# Beam's error when a worker process's gRPC stream ends in the middle of a bundle.
_CHANNEL_CLOSED = "Channel closed prematurely"


class LocalRunner(FnApiRunner):
    """The FnApiRunner; its worker processes (multi_processing) write stderr to worker_log_path()
    and get their input in bounded messages (pipelines.beam_patches.streamed_inputs).

    Beam's SDK worker prints every failed bundle's traceback to its stderr; the CLI reports
    the error in one line instead (run_main) and names that file.
    """

    pipeline_proto = None  # the last run's, for pipelines.reporting.resources
    worker_processes = False  # whether its SDK workers were processes (multi_processing)
    counts = resources.RunCounts({}, {})  # the last run's buffered bytes and stage seconds

    _fork_server = None  # started early by start_fork_server, used by the next run

    def start_fork_server(self) -> None:
        """Starts the SDK worker fork server now, so that its imports overlap the building of
        the pipeline (pipelines.runtime.runner.new_pipeline, for multi_processing runs)."""
        if self._fork_server is None and os.environ.get(FORK_WORKERS, "1") != "0":
            self._fork_server = sdk_fork_server.ForkServer(worker_log_path())

    def stop_fork_server(self) -> None:
        """Stops a fork server that no run used (the pipeline's construction failed)."""
        fork_server, self._fork_server = self._fork_server, None
        if fork_server is not None:
            fork_server.stop()

    def run_via_runner_api(self, pipeline_proto, options):
        # Both streams to the log: the CLI's own standard output may be closed or a full device.
        redirect = f" >>{shlex.quote(worker_log_path())} 2>&1".encode()
        subprocess_sdks = [
            environment
            for environment in pipeline_proto.components.environments.values()
            if environment.urn == python_urns.SUBPROCESS_SDK
        ]
        self.worker_processes = bool(subprocess_sdks)
        fork_server, self._fork_server = self._fork_server, None
        if subprocess_sdks and os.environ.get(FORK_WORKERS, "1") != "0":
            try:
                fork_server = fork_server or sdk_fork_server.ForkServer(worker_log_path())
                fork_server.wait_ready()  # workers forked warm
            except OSError:  # no server (see the worker log): Beam's cold workers
                fork_server = None
        elif fork_server is not None:
            fork_server.stop()
            fork_server = None
        for environment in subprocess_sdks:
            if fork_server is not None:
                cold = environment.payload.decode()  # the client's fallback: Beam's own command
                environment.payload = fork_server.worker_command(cold).encode()
            environment.payload += redirect
        self.pipeline_proto = pipeline_proto
        streamed_inputs.install()  # bounded messages to worker processes
        worker_deaths.install()  # a worker process that dies ends the run (one line)
        worker_deaths.clear()
        adjacency_cache.clear()  # this run's label propagation shards only
        try:
            with resources.count_run() as self.counts:
                return super().run_via_runner_api(pipeline_proto, options)
        except Exception as e:
            died = worker_deaths.deaths()
            if died and not isinstance(e, WorkerDied):
                raise WorkerDied(died[0]) from e
            if not died and _CHANNEL_CLOSED in str(e):
                raise WorkerDied(
                    "an SDK worker process ended during the run (its connection closed)"
                ) from e
            raise
        finally:
            if fork_server is not None:
                fork_server.stop()
