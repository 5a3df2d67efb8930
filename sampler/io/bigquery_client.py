"""The BigQuery clients of a process: the real service, or an emulator; faults as one line.

* **Service.** Without an emulator, the clients are google-cloud-bigquery's (jobs, tables:
  REST) and google-cloud-bigquery-storage's (the Storage Read API: gRPC), with the user's
  application default credentials (`gcloud auth application-default login`, a key file named
  by GOOGLE_APPLICATION_CREDENTIALS, or a Dataflow worker's service account). Missing
  credentials are one line that says how to log in.
* **Emulator.** `BEAM_GRAPH_BIGQUERY_EMULATOR_HOST=REST_HOST:PORT,GRPC_HOST:PORT` (say
  `127.0.0.1:9050,127.0.0.1:9060` for `bqemulator start`) sends both clients to a BigQuery
  emulator instead: no credentials, plain HTTP and an insecure gRPC channel. It is read here
  only (`emulator_hosts`), when a client is made, so it reaches the local SDK worker processes,
  which inherit the environment. The same code reads from either.
* **Project.** The project that runs the jobs and read sessions (and is billed) is
  GOOGLE_CLOUD_PROJECT when set, else the credentials' project (gcloud's default project);
  a table_spec without a project reads from that project too.
* **Retries.** A lost connection or a server error that may pass (unavailable, internal, rate
  limited) is retried for `BEAM_GRAPH_GCS_RETRY_S` seconds (default 30; the same bound as for
  gs://, sampler.io.gcs) per outage, then reported as one line naming the set and the table.

`fault(error, label)` turns any error of these clients into that one line (a UserError).
Google's libraries are imported on first use only: reading files never loads them.
"""

from __future__ import annotations

import os
import re
import threading
import time

from sampler.errors import UserError
from sampler.io import gcs

EMULATOR_ENV = "BEAM_GRAPH_BIGQUERY_EMULATOR_HOST"
PROJECT_ENV = "GOOGLE_CLOUD_PROJECT"
SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
LOGIN_HINT = (
    "run `gcloud auth application-default login`, or set GOOGLE_APPLICATION_CREDENTIALS "
    "to a service account key file"
)

_LOCK = threading.RLock()  # a client is made under it, after its credentials
_CLIENTS: dict = {}  # (kind, pid, emulator) -> client: a forked process makes its own


def emulator_hosts() -> tuple[str, str] | None:
    """(REST address, gRPC address) of the emulator named by EMULATOR_ENV, else None; a
    UserError when the setting is not two HOST:PORT addresses (a port from 1 to 65535)."""
    value = os.environ.get(EMULATOR_ENV, "").strip()
    if not value:
        return None
    parts = [p.strip().removeprefix("http://") for p in value.split(",")]
    problem = "expected two addresses" if len(parts) != 2 else None
    for part in parts if problem is None else ():
        host, colon, port = part.rpartition(":")
        if not colon or not host.strip("[]") or any(c in host for c in "/?#@ \t"):
            problem = f"'{part}' names no host"
        elif not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            problem = f"'{part}' has no port from 1 to 65535"
        if problem:
            break
    if problem:
        raise UserError(
            f"{EMULATOR_ENV}={value!r}: {problem}; expected REST_HOST:PORT,GRPC_HOST:PORT "
            "(e.g. 127.0.0.1:9050,127.0.0.1:9060)"
        )
    return parts[0], parts[1]


def where() -> str:
    """The BigQuery a process talks to, for messages."""
    hosts = emulator_hosts()
    return f"the BigQuery emulator at {','.join(hosts)}" if hosts else "BigQuery"


def _credentials():
    """(credentials, their project or None)."""
    if emulator_hosts():
        from google.auth.credentials import AnonymousCredentials

        return AnonymousCredentials(), None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        return google.auth.default(scopes=list(SCOPES))
    except DefaultCredentialsError as e:
        reason = str(e).split(". ")[0].rstrip(".") or "not found"
        raise UserError(
            f"no Google Cloud credentials for BigQuery ({reason}): {LOGIN_HINT}"
        ) from None


def project() -> str:
    """The project that runs the jobs and read sessions (see the module docstring)."""
    named = os.environ.get(PROJECT_ENV, "").strip()
    if named:
        return named
    _, found = _cached("credentials", _credentials)
    if not found:
        raise UserError(
            f"no Google Cloud project for BigQuery: set {PROJECT_ENV}, or a default project "
            "(`gcloud config set project PROJECT`), or the table_spec's project"
        )
    return found


def _cached(kind: str, make):
    key = (kind, os.getpid(), os.environ.get(EMULATOR_ENV, ""))
    with _LOCK:
        if key not in _CLIENTS:
            _CLIENTS[key] = make()
        return _CLIENTS[key]


def rest_client():
    """google.cloud.bigquery.Client for jobs and tables (one per process)."""

    def make():
        from google.cloud import bigquery

        credentials, _ = _cached("credentials", _credentials)
        hosts = emulator_hosts()
        session = _bounded_session(credentials)
        if hosts is None:
            return bigquery.Client(project=project(), credentials=credentials, _http=session)
        from google.api_core.client_options import ClientOptions

        return bigquery.Client(
            project=project(),
            credentials=credentials,
            client_options=ClientOptions(api_endpoint=f"http://{hosts[0]}"),
            _http=session,
        )

    return _cached("rest", make)


def _bounded_session(credentials):
    """The REST client's session: a request made without a timeout waits call_timeout() for
    each answer (requests alone waits for ever on a server that stopped answering)."""
    from google.auth.transport.requests import AuthorizedSession

    class Bounded(AuthorizedSession):
        def request(self, method, url, data=None, headers=None, timeout=None, **kwargs):
            timeout = call_timeout() if timeout is None else timeout
            return super().request(method, url, data, headers, timeout=timeout, **kwargs)

    return Bounded(credentials)


def read_client():
    """The Storage Read API's client (the generated one: plain ReadRowsResponse messages)."""

    def make():
        from google.cloud.bigquery_storage_v1.services.big_query_read import (
            BigQueryReadClient,
        )
        from google.cloud.bigquery_storage_v1.services.big_query_read.transports import (
            BigQueryReadGrpcTransport,
        )

        hosts = emulator_hosts()
        options = [("grpc.max_receive_message_length", -1)]
        if hosts is None:
            credentials, _ = _cached("credentials", _credentials)
            channel = BigQueryReadGrpcTransport.create_channel(
                credentials=credentials, scopes=list(SCOPES), options=options
            )
        else:
            import grpc

            # An emulator speaks plain gRPC: with TLS (an api_endpoint alone) the handshakes hang.
            channel = grpc.insecure_channel(hosts[1], options=options)
        return BigQueryReadClient(transport=BigQueryReadGrpcTransport(channel=channel))

    return _cached("read", make)


# --------------------------------------------------------------------------- retries

_TRANSIENT_REASONS = {"rateLimitExceeded", "backendError", "internalError", "badGateway"}


def transient(error: BaseException) -> bool:
    """Whether a call that failed with `error` may pass when tried again."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth_exceptions

    if isinstance(
        error,
        (
            exceptions.ServiceUnavailable,
            exceptions.InternalServerError,
            exceptions.TooManyRequests,
            exceptions.BadGateway,
            exceptions.GatewayTimeout,
            exceptions.DeadlineExceeded,
            exceptions.Aborted,
            auth_exceptions.TransportError,
            ConnectionError,
        ),
    ):
        return True
    errors = getattr(error, "errors", None) or []
    if errors and isinstance(errors[0], dict) and errors[0].get("reason") in _TRANSIENT_REASONS:
        return True
    import requests

    return isinstance(error, (requests.ConnectionError, requests.Timeout)) and not isinstance(
        error, requests.exceptions.SSLError
    )


_OUTAGE = {"start": None}  # when this process's calls began to fail, until one succeeds


def in_outage_budget(error: BaseException, since: float | None = None) -> bool:
    """Whether a call that failed with the transient `error` may be tried again: until this
    process has seen calls fail for BEAM_GRAPH_GCS_RETRY_S without one succeeding (one outage
    is retried that long in all, not per call: a read of many streams would wait again for
    each). `since`: when the failed call began (monotonic), the outage's start when it is the
    first failure (a call that waited for no answer counts its wait)."""
    now = time.monotonic()
    with _LOCK:
        if _OUTAGE["start"] is None:
            _OUTAGE["start"] = now if since is None else min(since, now)
        return now - _OUTAGE["start"] < gcs.retry_seconds()


def succeeded() -> None:
    """A call got an answer: the outage, if any, is over."""
    _OUTAGE["start"] = None


def retry():
    """google.api_core's Retry for one call: transient errors, within the outage budget
    counted from the call's start. Pass `timeout=call_timeout()` too: an attempt the server
    does not answer ends then (gRPC alone waits 20 s for a connection)."""
    from google.api_core.retry import Retry

    started = time.monotonic()

    def predicate(error: BaseException) -> bool:
        return transient(error) and in_outage_budget(error, started)

    return Retry(predicate=predicate, initial=0.2, maximum=5.0, timeout=gcs.retry_seconds())


def call_timeout() -> float:
    """Seconds one attempt of a call may wait for its answer: BEAM_GRAPH_GCS_RETRY_S."""
    return gcs.retry_seconds()


# --------------------------------------------------------------------------- one line


def fault(error: BaseException, label: str) -> UserError:
    """One line for a failed BigQuery call: `label` (the set and its table), then the cause."""
    from google.api_core import exceptions

    if isinstance(error, UserError):
        return UserError(f"{label}: {error}") if not str(error).startswith(label) else error
    cause = error
    if isinstance(error, exceptions.RetryError) and error.cause is not None:
        cause = error.cause
    if isinstance(error, exceptions.RetryError) or transient(cause):
        return UserError(
            f"{label}: cannot reach {where()}: {_first_line(cause)} (retried for "
            f"{gcs.retry_seconds():g} s; {gcs.RETRY_ENV} sets how long)"
        )
    text = _first_line(cause)
    if isinstance(cause, (exceptions.Forbidden, exceptions.PermissionDenied)):
        text += (
            " (the account needs the BigQuery Data Viewer, BigQuery Read Session User and, for "
            "a query, BigQuery Job User roles: docs/dataflow.md)"
        )
    return UserError(f"{label}: {text}")


_REQUEST = re.compile(r"^(GET|POST|PUT|PATCH|DELETE) \S+: ")  # a REST error's request


def _first_line(error: BaseException) -> str:
    message = getattr(error, "message", None) or str(error) or type(error).__name__
    code = getattr(error, "code", None)
    line = _REQUEST.sub("", " ".join(str(message).split("\n")[0].split()))
    if isinstance(code, int) and not line.startswith(str(code)):
        line = f"{code} {line}"
    return line[:400]
