"""Where the local runner's SDK worker processes send their logs, and the switch of the warm
fork server; apart from pipelines.runtime.runner so that pipelines.runtime.local_runner needs nothing of it."""

from __future__ import annotations

import os
import tempfile

# Set to 0 to start each SDK worker process cold, as Beam does (pipelines.runtime.sdk_fork_server).
FORK_WORKERS = "BEAM_GRAPH_FORK_WORKERS"

# Where local SDK workers' logs arrive: multi-process workers send every record, with its
# stack trace, through the job service's logger; in-process workers log under runners.worker;
# the runner logs there the errors of closing worker processes that already ended (a Ctrl-C),
# and gRPC's server those of the runner's connections (a thread it could not start).
WORKER_LOGGERS = (
    "apache_beam.runners.portability.local_job_service",
    "apache_beam.runners.worker",
    "apache_beam.runners.portability.fn_api_runner.worker_handlers",
    "grpc._server",
)


def worker_log_path() -> str:
    """The file that takes local workers' log records for this process's run."""
    return os.path.join(tempfile.gettempdir(), f"beam_graph_workers_{os.getpid()}.log")
