"""The local runner of the CLIs: Beam's FnApiRunner, offline (see pipelines.runner.make_runner)."""

from __future__ import annotations

import shlex

from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines import resources, streamed_inputs
from pipelines.runner import worker_log_path
from sampler.partition import adjacency_cache


class LocalRunner(FnApiRunner):
    """The FnApiRunner; its worker processes (multi_processing) write stderr to worker_log_path()
    and get their input in bounded messages (pipelines.streamed_inputs).

    Beam's SDK worker prints every failed bundle's traceback to its stderr; the CLI reports
    the error in one line instead (run_main) and names that file.
    """

    pipeline_proto = None  # the last run's, for pipelines.resources
    worker_processes = False  # whether its SDK workers were processes (multi_processing)
    counts = resources.RunCounts({}, {})  # the last run's buffered bytes and stage seconds

    def run_via_runner_api(self, pipeline_proto, options):
        redirect = f" 2>>{shlex.quote(worker_log_path())}".encode()
        self.worker_processes = False
        for environment in pipeline_proto.components.environments.values():
            if environment.urn == python_urns.SUBPROCESS_SDK:
                environment.payload += redirect
                self.worker_processes = True
        self.pipeline_proto = pipeline_proto
        streamed_inputs.install()  # bounded messages to worker processes
        adjacency_cache.clear()  # this run's label propagation shards only
        with resources.count_run() as self.counts:
            return super().run_via_runner_api(pipeline_proto, options)
