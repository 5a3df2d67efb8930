"""Shared CLI plumbing: offline local runner, one-line user errors, output paths."""

from __future__ import annotations

import os
import re
import shlex

import apache_beam as beam
from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions
from apache_beam.portability import python_urns
from apache_beam.runners.portability.fn_api_runner import FnApiRunner

from pipelines import (
    cli_main,
    dofn_specs,
    option_views,
    resources,
    sdk_fork_server,
    streamed_inputs,
)
from pipelines.cli_main import (  # noqa: F401 - Beam-free, re-exported for the CLIs
    INTERRUPTED_EXIT,
    LOGIN_HINT,
    WORKER_LOGGERS,
    Interrupt,
    check_gcp_credentials,
    child_processes,
    end_child_processes,
    interrupted_line,
    needs_gcp,
    note_output,
    remove_pipeline_temp_dirs,
    run_main,
    user_error_message,
    worker_log_path,
)
from pipelines.flags import MAX_OUTPUT_SHARDS
from sampler.errors import UserError
from sampler.partition import adjacency_cache

LOCAL_RUNNERS = {None, "", "DirectRunner", "direct", "FnApiRunner"}
# Set to 0 to start each SDK worker process cold, as Beam does (pipelines.sdk_fork_server).
FORK_WORKERS = "BEAM_GRAPH_FORK_WORKERS"


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
        subprocess_sdks = [
            environment
            for environment in pipeline_proto.components.environments.values()
            if environment.urn == python_urns.SUBPROCESS_SDK
        ]
        self.worker_processes = bool(subprocess_sdks)
        fork_server = None
        if subprocess_sdks and os.environ.get(FORK_WORKERS, "1") != "0":
            fork_server = sdk_fork_server.ForkServer()  # workers forked warm, not started cold
        for environment in subprocess_sdks:
            if fork_server is not None:
                environment.payload = fork_server.worker_command().encode()
            environment.payload += redirect
        self.pipeline_proto = pipeline_proto
        streamed_inputs.install()  # bounded messages to worker processes
        adjacency_cache.clear()  # this run's label propagation shards only
        try:
            with resources.count_run() as self.counts:
                return super().run_via_runner_api(pipeline_proto, options)
        finally:
            if fork_server is not None:
                fork_server.stop()


def pipeline_options(beam_args: list[str], runner: str | None) -> PipelineOptions:
    """Beam's options from every flag the CLI did not take itself."""
    extra = [] if runner in LOCAL_RUNNERS else [f"--runner={runner}"]
    return PipelineOptions(list(beam_args) + extra)


def new_pipeline(beam_args: list[str], runner: str | None) -> beam.Pipeline:
    """The pipeline a CLI builds its stages on: `runner` (make_runner), Beam's options from
    every flag the CLI did not take itself."""
    pipeline = beam.Pipeline(
        runner=make_runner(runner), options=pipeline_options(beam_args, runner)
    )
    cli_main.note_pipeline_temp_dir(pipeline.local_tempdir)  # run_main removes it
    return pipeline


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
        if not 1 <= count <= MAX_OUTPUT_SHARDS:
            raise UserError(
                f"--output_samples {pattern}: the shard count must be between 1 and "
                f"{MAX_OUTPUT_SHARDS:,}"
            )
        return match.group("base"), count, None
    return pattern, 1, ""
