"""Shared CLI plumbing: offline local runner, one-line user errors, output paths.

Beam is imported only by the functions that build or run a pipeline (and by
pipelines.runtime.local_runner), so that the CLIs' other paths (`--runner InMemory`, validate,
estimate, stats, show) never load it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import sys
from typing import TYPE_CHECKING

from pipelines.flags import LOCAL_RUNNERS, MAX_OUTPUT_SHARDS
from pipelines.outputs import output_lock
from pipelines.runtime.interrupts import (  # noqa: F401  (Interrupt, child_processes: pipelines.runtime.runner's names)
    SIGNALS,
    Interrupt,
    RunFailed,
    WorkerDied,
    check_interrupted,
    child_processes,
    end_child_processes,
    exit_code,
    guard_exit,
    log_thread_error,
    memory_error,
    memory_error_line,
    out_of_resources,
    print_line,
    signal_name,
)
from pipelines.runtime.program_exit import (
    closed_note,
    exit_program,
    guard_streams,
    unguard_streams,
)
from pipelines.runtime.worker_logs import WORKER_LOGGERS, worker_log_path
from sampler import jit_cache, settings
from sampler.errors import UserError
from sampler.io import gcs

if TYPE_CHECKING:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions


def make_runner(name: str | None):
    """The runner to use. Local runs use Beam's FnApiRunner directly.

    Beam 2.77's DirectRunner first tries to download and start Prism, which
    needs the network; going straight to the FnApiRunner keeps local runs
    offline and deterministic. Multi-process local runs still work with
    `--direct_running_mode=multi_processing --direct_num_workers=N`.
    """
    if name in LOCAL_RUNNERS:
        from pipelines.beam_patches import dofn_specs, option_views
        from pipelines.runtime.local_runner import LocalRunner

        dofn_specs.install()  # DoFn introspection once per DoFn (before the pipeline is built)
        option_views.install()  # one view of the options per class, not one per type check
        jit_cache.chosen_folder()  # a temporary kernel cache: made before any worker starts
        return LocalRunner()
    return name


def __getattr__(name: str):
    """`pipelines.runtime.runner.LocalRunner`, imported (with Beam) on first use."""
    if name == "LocalRunner":
        from pipelines.runtime.local_runner import LocalRunner

        return LocalRunner
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def pipeline_options(beam_args: list[str], runner: str | None) -> PipelineOptions:
    """Beam's options from every flag the CLI did not take itself."""
    from apache_beam.options.pipeline_options import PipelineOptions

    extra = [] if runner in LOCAL_RUNNERS else [f"--runner={runner}"]
    return PipelineOptions(list(beam_args) + extra)


# The local temporary folders of the pipelines this process built (Beam makes one per
# Pipeline and removes it only when that pipeline runs to its end); run_main removes them.
_PIPELINE_TEMP_DIRS: list[str] = []
# The local runners new_pipeline made: a fork server started for a pipeline that never ran
# (its construction failed) is stopped with them.
_PIPELINE_RUNNERS: list = []


def new_pipeline(beam_args: list[str], runner: str | None) -> beam.Pipeline:
    """The pipeline a CLI builds its stages on: `runner` (make_runner), Beam's options from
    every flag the CLI did not take itself."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import DirectOptions

    gcs.prepare()  # an emulator's anonymous access, bounded GCS retries (before a client)
    options = pipeline_options(beam_args, runner)
    local = make_runner(runner)
    if (
        hasattr(local, "start_fork_server")
        and options.view_as(DirectOptions).direct_running_mode == "multi_processing"
    ):
        local.start_fork_server()  # its imports overlap the building of the pipeline
        _PIPELINE_RUNNERS.append(local)
    pipeline = beam.Pipeline(runner=local, options=options)
    _PIPELINE_TEMP_DIRS.append(pipeline.local_tempdir)
    return pipeline


def remove_pipeline_temp_dirs() -> None:
    """Removes the `beam-pipeline-temp*` folders of the pipelines new_pipeline built, and stops
    the fork servers of those that never ran."""
    while _PIPELINE_RUNNERS:
        _PIPELINE_RUNNERS.pop().stop_fork_server()
    while _PIPELINE_TEMP_DIRS:
        shutil.rmtree(_PIPELINE_TEMP_DIRS.pop(), ignore_errors=True)


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
    from apache_beam.options.pipeline_options import GoogleCloudOptions

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


_WORKER_USER_ERROR = re.compile(r"UserError: (?P<message>[^\n]+)")


def user_error_message(error: BaseException) -> str | None:
    """The message of a UserError, also when a runner re-raised it from a worker as text."""
    seen = error
    while seen is not None:
        if isinstance(seen, UserError):
            return _RUNNING.sub("", str(seen).splitlines()[0])
        seen = seen.__cause__ or seen.__context__
    match = _WORKER_USER_ERROR.search(str(error))
    return _RUNNING.sub("", match.group("message")) if match else None


_RUNNING = re.compile(r" \[while running '[^']*'\]$")  # Beam's suffix on a worker's error


LOGIN_HINT = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
    "to a service account key file"
)


def needs_gcp(argv: list[str]) -> bool:
    """Whether a command line touches Google Cloud: a gs:// path or the DataflowRunner."""
    joined = " ".join(argv)
    return "gs://" in joined or re.search(r"--runner[= ]DataflowRunner\b", joined) is not None


def check_gcp_credentials(argv: list[str]) -> None:
    """Stops at once, with how to log in, when `argv` needs Google Cloud and no credentials
    are found; else Beam's GCS client would retry for minutes with tracebacks.

    google.auth looks at GOOGLE_APPLICATION_CREDENTIALS, gcloud's application-default
    credentials file, then the GCE metadata server (a few seconds at most, offline).
    """
    if not needs_gcp(argv):
        return
    if gcs.emulator_host() and not re.search(r"--runner[= ]DataflowRunner\b", " ".join(argv)):
        return  # gs:// on a storage emulator: anonymous access (sampler.io.gcs)
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:  # no GCP support installed: Beam reports that itself
        return
    try:
        google.auth.default()
    except DefaultCredentialsError as e:
        reason = str(e).split(". ")[0].rstrip(".") or "not found"
        raise UserError(
            f"no Google Cloud credentials for gs:// or Dataflow ({reason}): {LOGIN_HINT}"
        ) from None


# Where a CLI writes (set by it once known), for the line run_main prints on Ctrl-C, and how
# to remove its partial output when a signal comes after the body caught and dropped it.
_OUTPUT: dict = {"folder": None, "remove": None}


def note_output(folder: str, remove_partial=None) -> None:
    """Names the output folder in run_main's `interrupted` line; `remove_partial()` removes the
    run's partial output (run_main calls it for a signal that the CLI body did not see)."""
    _OUTPUT["folder"] = folder or "."
    if remove_partial is not None:
        _OUTPUT["remove"] = remove_partial


def interrupted_line(signum: int = signal.SIGINT) -> str:
    what = SIGNALS.get(signum, signal_name(signum))
    folder = _OUTPUT["folder"]
    if folder is None:
        return f"interrupted ({what}); nothing written"
    return (
        f"interrupted ({what}); the run's partial output in {folder} was removed (its manifest"
        " and any dead letters stay)"
    )


def _was_interrupted(error: BaseException, interrupt: Interrupt) -> bool:
    """A Ctrl-C, also when a runner re-raised it as another error (e.g. Beam's
    `RuntimeError: KeyboardInterrupt [while running ...]`)."""
    if interrupt.seen or isinstance(error, KeyboardInterrupt):
        return True
    seen = error
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _failure_line(error: BaseException) -> str | None:
    """One line for a run that a dead worker process or a memory limit ended, else None."""
    seen = error
    while seen is not None:
        if isinstance(seen, RunFailed):
            return str(seen)
        seen = seen.__cause__ or seen.__context__
    if memory_error(error):
        return memory_error_line()
    return None


def run_main(main_fn, argv=None) -> int:
    """Runs a CLI body; a UserError becomes one line on stderr and exit code 2; a Ctrl-C,
    SIGTERM or SIGHUP one line and exit code 128 + the signal (the CLI bodies remove their
    partial output on any exception); a dead worker process or a MemoryError one line and 1.

    Local workers' logs (with their tracebacks) go to worker_log_path(), never to stderr; the
    file is kept, and named in the error line, when the run fails, else removed. Run as a
    program, the process then exits within EXIT_S of the run's end (interrupts.guard_exit).
    """
    import pipelines

    streams = (sys.stdout, sys.stderr)
    guard_streams()  # a closed pipe (`| head`) cuts the report short, never the run
    try:
        code = _run_main(main_fn, argv)
    finally:
        note = closed_note()  # also after --help (SystemExit)
        if note is not None:
            print_line(note)
        if not pipelines.AS_PROGRAM:
            unguard_streams(streams)
    if pipelines.AS_PROGRAM:  # the threads a failed run left may not hold its exit
        guard_exit(code)
        exit_program(code)  # no finalization: its default signal handlers would say nothing
    return code


def _run_main(main_fn, argv=None) -> int:
    """run_main's body (see there)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Beam logs a failing DoFn's traceback before re-raising; the CLI reports it instead.
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    # The dead-letter sink writes no file when no row was bad, and Beam warns about that.
    logging.getLogger("apache_beam.io.filebasedsink").setLevel(logging.ERROR)
    # A lost connection to GCS: urllib3 and google.auth warn at every retry; the retry is
    # bounded (sampler.io.gcs) and its failure reported in one line.
    for name in ("urllib3.connectionpool", "google.auth._default", "google.auth.transport"):
        logging.getLogger(name).setLevel(logging.ERROR)
    log_path = worker_log_path()
    handler = logging.FileHandler(log_path, delay=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    saved = []
    for name in WORKER_LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, logger.propagate))
        logger.addHandler(handler)
        logger.propagate = False
    failed = True
    code = 0
    if os.path.exists(log_path):
        os.remove(log_path)
    argv = sys.argv[1:] if argv is None else list(argv)
    # A lost GCS connection: a bounded retry here and in the local workers (sampler.io.gcs).
    set_retry = gcs.RETRY_ENV not in os.environ
    if set_retry:  # for this run only (a caller of main() in its own process keeps its env)
        os.environ[gcs.RETRY_ENV] = f"{gcs.DEFAULT_RETRY_S:g}"
    _OUTPUT.update(folder=None, remove=None)
    with Interrupt(log_thread_error(WORKER_LOGGERS[0]), on_stuck=_end_stuck_run) as interrupt:
        grpc_errors = _ThreadsOutOfResources(interrupt, handler)
        logging.getLogger("grpc._server").addFilter(grpc_errors)
        try:
            settings.check_all()  # BEAM_GRAPH_*_S: one line before anything runs
            jit_cache.start_run()  # what its workers say of the kernels comes to its stderr
            check_gcp_credentials(argv)
            code = main_fn(argv)
            check_interrupted()  # a signal that the body's libraries caught and dropped
            failed = False
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - become one line
            interrupt.ending = True  # a signal from here on waits for the clean-up below
            if _was_interrupted(e, interrupt):
                interrupt.cleaning = True
                failed = False  # the worker logs of a Ctrl-C hold only its tracebacks
                end_child_processes(signal.SIGTERM, wait_s=5.0)
                if _OUTPUT["remove"] is not None:
                    _OUTPUT["remove"]()
                print_line(f"error: {interrupted_line(interrupt.signum or signal.SIGINT)}")
                return exit_code(interrupt.signum or signal.SIGINT)
            message = user_error_message(e)
            if message is None and (needs_gcp(argv) or gcs.emulator_host()):  # GCS: one line
                message = gcs.error_line(e, _OUTPUT["folder"])
            handler.flush()
            logged = os.path.exists(log_path) and os.path.getsize(log_path) > 0
            where = f" (worker logs: {log_path})" if logged else ""
            failure = _failure_line(e)
            if failure is not None:
                print(f"error: {failure}{where}", file=sys.stderr)
                return 1
            if message is None:
                if logged:
                    print(f"worker logs: {log_path}", file=sys.stderr)
                raise
            print(f"error: {message}{where}", file=sys.stderr)
            return 2
        finally:
            interrupt.ending = True
            logging.getLogger("grpc._server").removeFilter(grpc_errors)
            for logger, propagate in saved:
                logger.removeHandler(handler)
                logger.propagate = propagate
            handler.close()
            if os.path.exists(log_path) and (not failed or not os.path.getsize(log_path)):
                os.remove(log_path)
            remove_pipeline_temp_dirs()
            jit_cache.end_run()  # the workers' last lines; the run's temporary kernel cache
            output_lock.release_all()  # last: the run's clean-up is over
            if set_retry:
                os.environ.pop(gcs.RETRY_ENV, None)
            _run_ended()
    if interrupt.deferred is not None:  # a signal while the ended run cleaned up
        print_line(f"interrupted ({SIGNALS[interrupt.deferred]}) while exiting; the run had ended")
        return exit_code(interrupt.deferred)
    return int(code or 0)  # the body's own code (run_tool's), else 0


class _ThreadsOutOfResources(logging.Filter):
    """gRPC's server logs the error of a thread it could not start (ulimit -v) and goes on
    without it; the run would wait forever for that thread's work: end it in one line. The
    record goes to the worker log only: a filter, so that it is written before the main thread
    ends the run (a handler's record would reach stderr once run_main restored the loggers)."""

    def __init__(self, interrupt: Interrupt, worker_log: logging.Handler):
        super().__init__()
        self._interrupt = interrupt
        self._worker_log = worker_log

    def filter(self, record: logging.LogRecord) -> bool:
        if not (record.exc_info and out_of_resources(record.exc_info[1])):
            return True
        self._worker_log.handle(record)
        self._interrupt.fail(memory_error_line())
        return False


def _end_stuck_run(signum: int) -> None:
    """A signal that the run's libraries swallowed twice (pipelines.runtime.interrupts): the
    clean-up of run_main, from the watcher thread, then the exit."""
    end_child_processes(signal.SIGKILL)
    with contextlib.suppress(Exception):  # noqa: BLE001 - the exit below must happen
        if _OUTPUT["remove"] is not None:
            _OUTPUT["remove"]()
    remove_pipeline_temp_dirs()
    output_lock.release_all()
    print_line(f"error: {interrupted_line(signum)}")
    os._exit(exit_code(signum))


def _run_ended() -> None:
    """From here a signal finds the CLI's run over: pipelines' own handler says so."""
    import pipelines

    pipelines.RUN_ENDED[0] = True
