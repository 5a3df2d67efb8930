"""Shared CLI plumbing: offline local runner, one-line user errors, output paths."""

from __future__ import annotations

import re
import shlex

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines import dofn_specs, option_views, resources, streamed_inputs
from pipelines.cli_main import (  # noqa: F401 - Beam-free, re-exported for the CLIs
    LOGIN_HINT,
    WORKER_LOGGERS,
    check_gcp_credentials,
    needs_gcp,
    run_main,
    user_error_message,
    worker_log_path,
)
from sampler.errors import UserError
from sampler.partition import adjacency_cache

LOCAL_RUNNERS = {None, "", "DirectRunner", "direct", "FnApiRunner"}


def make_runner(name: str | None):
    """The runner to use. Local runs use Beam's FnApiRunner directly.

    Beam 2.77's DirectRunner first tries to download and start Prism, which
    needs the network; going straight to the FnApiRunner keeps local runs
    offline and deterministic. Multi-process local runs still work with
    `--direct_running_mode=multi_processing --direct_num_workers=N`.
    """
    if name in LOCAL_RUNNERS:
        dofn_specs.install()  # DoFn introspection once per DoFn (before the pipeline is built)
        option_views.install()  # one view of the options per class, not one per type check
        return LocalRunner()
    return name


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


def pipeline_options(beam_args: list[str], runner: str | None) -> PipelineOptions:
    """Beam's options from every flag the CLI did not take itself."""
    extra = [] if runner in LOCAL_RUNNERS else [f"--runner={runner}"]
    return PipelineOptions(list(beam_args) + extra)


def new_pipeline(beam_args: list[str], runner: str | None) -> beam.Pipeline:
    """The pipeline a CLI builds its stages on: `runner` (make_runner), Beam's options from
    every flag the CLI did not take itself."""
    return beam.Pipeline(runner=make_runner(runner), options=pipeline_options(beam_args, runner))


def submit(pipeline: beam.Pipeline):
    """Starts `pipeline` and returns its result without waiting for it; for a Dataflow job,
    prints its id and console URL (remote_job_lines) at once."""
    result = pipeline.run()
    for line in remote_job_lines(result, pipeline.options):
        print(line, flush=True)
    return result


def remote_job_lines(result, options: PipelineOptions) -> list[str]:
    """'dataflow job: ID' and 'console: URL' for a job submitted to Dataflow, else nothing.

    Printed as soon as the job is submitted (before waiting for it), so that a launcher
    (scripts/launch_dataflow.sh) can report the job while it runs.
    """
    job_id = getattr(result, "job_id", None)
    if not callable(job_id) or not getattr(result, "has_job", False):
        return []
    gcp = options.view_as(GoogleCloudOptions)
    url = f"https://console.cloud.google.com/dataflow/jobs/{gcp.region}/{job_id()}"
    return [f"dataflow job: {job_id()}", f"console: {url}?project={gcp.project}"]


_SHARDED = re.compile(r"^(?P<base>.+)@(?P<count>\d+)$")


def output_shards(pattern: str) -> tuple[str, int, str | None]:
    """(file prefix, number of shards, shard name template) for `path` or `path@N`."""
    match = _SHARDED.match(pattern)
    name = pattern.rsplit("/", 1)[-1]
    if (match and match.group("base").endswith("/")) or (not match and "@" in name) or not name:
        raise UserError(
            f"--output_samples {pattern}: give a file name, or a file name and a shard count "
            "such as out/samples@8"
        )
    if match:
        count = int(match.group("count"))
        if count < 1:
            raise UserError(f"--output_samples {pattern}: the shard count must be at least 1")
        return match.group("base"), count, None
    return pattern, 1, ""
