"""The CLIs' main wrapper, without Beam: one-line user errors, worker logs, GCP credentials.

pipelines/runner.py re-exports all of it; a CLI run that needs no Beam (pipelines.partition
--runner InMemory) imports this module alone.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile

from sampler.errors import UserError

_WORKER_USER_ERROR = re.compile(r"UserError: (?P<message>[^\n]+)")


def user_error_message(error: BaseException) -> str | None:
    """The message of a UserError, also when a runner re-raised it from a worker as text."""
    seen = error
    while seen is not None:
        if isinstance(seen, UserError):
            return str(seen).splitlines()[0]
        seen = seen.__cause__ or seen.__context__
    match = _WORKER_USER_ERROR.search(str(error))
    return match.group("message") if match else None


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


# Where local SDK workers' logs arrive: multi-process workers send every record, with its
# stack trace, through the job service's logger; in-process workers log under runners.worker.
WORKER_LOGGERS = (
    "apache_beam.runners.portability.local_job_service",
    "apache_beam.runners.worker",
)


def worker_log_path() -> str:
    """The file that takes local workers' log records for this process's run."""
    return os.path.join(tempfile.gettempdir(), f"beam_graph_workers_{os.getpid()}.log")


def run_main(main_fn, argv=None) -> int:
    """Runs a CLI body; a UserError becomes one line on stderr and exit code 2.

    Local workers' logs (with their tracebacks) go to worker_log_path(), never to stderr; the
    file is kept, and named in the error line, when the run fails, else removed.
    """
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # Beam logs a failing DoFn's traceback before re-raising; the CLI reports it instead.
    logging.getLogger("apache_beam.runners.common").setLevel(logging.CRITICAL)
    # The dead-letter sink writes no file when no row was bad, and Beam warns about that.
    logging.getLogger("apache_beam.io.filebasedsink").setLevel(logging.ERROR)
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
    if os.path.exists(log_path):
        os.remove(log_path)
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        check_gcp_credentials(argv)
        main_fn(argv)
        failed = False
    except Exception as e:  # noqa: BLE001 - user errors become one line, the rest re-raise
        message = user_error_message(e)
        handler.flush()
        logged = os.path.exists(log_path) and os.path.getsize(log_path) > 0
        if message is None:
            if logged:
                print(f"worker logs: {log_path}", file=sys.stderr)
            raise
        where = f" (worker logs: {log_path})" if logged else ""
        print(f"error: {message}{where}", file=sys.stderr)
        return 2
    finally:
        for logger, propagate in saved:
            logger.removeHandler(handler)
            logger.propagate = propagate
        handler.close()
        if os.path.exists(log_path) and (not failed or not os.path.getsize(log_path)):
            os.remove(log_path)
    return 0
