"""gs:// through Beam's GCS filesystem: a storage emulator, and a bounded retry.

* **Emulator.** With `STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` set (the variable the
  google-cloud-storage client itself honours), gs:// paths go to that server (say
  `gcp-storage-emulator`). It takes no credentials: Beam is told at once that there are none
  (an anonymous client), instead of retrying Google's default credentials for about 20 s in
  every process (the CLI, each SDK worker).
* **A deadline.** The GCS client retries a lost connection (no network, a DNS failure, a
  server gone) for 120 s per call, waits 60 s for each request's answer, and a run makes
  many calls: a run without network, or whose server stopped answering, went on for many
  minutes without a word. Here one outage is waited for at most `BEAM_GRAPH_GCS_RETRY_S`
  seconds (default 30) per process, over all its calls and in every layer that retries or
  waits (sampler.io.gcs_deadline); then the error reaches the CLI, which reports it in one
  line naming the path, the server and the cause (`error_line`).
* **Errors the server answers** (a bucket or object that does not exist, a 403, a 5xx that
  retries did not cure) read as one line too (`failure_reason`), as do object names with
  '#' or '?' (`check_object_name`), refused before any request.

The bound applies where `BEAM_GRAPH_GCS_RETRY_S` is set: the CLIs set it (to 30 unless
given), so it covers them and their local SDK workers, which inherit it; a Dataflow worker
keeps the GCS client's own retries (Dataflow retries a failed work item itself).

`prepare()` applies each once per process (the bound once the variable is set), before Beam makes its first GCS client: it is
called where Beam is loaded (sampler.io.files for gs:// paths, pipelines.runtime.runner for a
pipeline, sampler.beam for SDK workers). It never imports Beam itself when Beam is not
loaded yet, except from those places.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from http import HTTPStatus

from sampler.io.gcs_deadline import DEFAULT_RETRY_S, RETRY_ENV, retry_seconds  # noqa: F401

EMULATOR_HOST = "STORAGE_EMULATOR_HOST"

_DONE = {"bounded": False, "anonymous": False}


def emulator_host() -> str | None:
    """The storage emulator's address when one is set, else None."""
    return os.environ.get(EMULATOR_HOST) or None


def prepare() -> None:
    """Anonymous credentials when an emulator is set; every GCS wait bounded (see above).

    Only in a process that has loaded Beam: every GCS access goes through Beam's FileSystems,
    whose callers import it first (sampler.io.files, the pipeline's construction, an SDK
    worker), and a process that never touches Beam (`--runner InMemory` on local files) must
    not load it here."""
    if "apache_beam" not in sys.modules:
        return
    if _DONE["bounded"] and (_DONE["anonymous"] or not emulator_host()):
        return
    try:
        import google.cloud.storage  # noqa: F401 - only whether it is installed
    except ImportError:  # no GCS support installed: Beam reports that itself
        return
    # Set by the CLIs (pipelines.runtime.runner.run_main), inherited by their local workers.
    if not _DONE["bounded"] and RETRY_ENV in os.environ:
        from sampler.io import gcs_deadline

        _DONE["bounded"] = True
        gcs_deadline.install()
    if not _DONE["anonymous"] and emulator_host():
        _DONE["anonymous"] = True
        _anonymous_credentials()


def _anonymous_credentials() -> None:
    """Beam's GCS client asks google.auth for credentials with retries (about 20 s without
    any); an emulator needs none: record 'none found' as already looked up."""
    try:
        from apache_beam.internal.gcp import auth
    except ImportError:
        return
    with auth._Credentials._credentials_lock:
        auth._Credentials._credentials = None
        auth._Credentials._credentials_init = True


_NETWORK_CAUSES = (
    (re.compile(r"Name or service not known|Temporary failure in name resolution|"
                r"nodename nor servname|getaddrinfo failed|NameResolutionError"),
     "the host name does not resolve (no network, or DNS fails)"),
    (re.compile(r"Connection refused|ConnectionRefusedError"),
     "the connection was refused (the server is not running)"),
    (re.compile(r"Connection reset|RemoteDisconnected|Connection aborted|BrokenPipe|"
                r"ChunkedEncodingError|IncompleteRead|ProtocolError"),
     "the connection was broken"),
    (re.compile(r"timed out|Timeout of [\d.]+s exceeded|ReadTimeout|ConnectTimeout"),
     "the server did not answer in time"),
    (re.compile(r"Max retries exceeded|NewConnectionError|Network is unreachable|"
                r"No route to host"),
     "no connection to the server"),
)  # fmt: skip


def network_cause(error: BaseException | str) -> str | None:
    """The cause of a lost connection in `error` (its chain, or a worker's error text) in a
    few words, else None."""
    texts = []
    if isinstance(error, BaseException):
        seen, depth = error, 0
        while seen is not None and depth < 20:
            texts.append(f"{type(seen).__name__}: {seen}")
            seen, depth = seen.__cause__ or seen.__context__, depth + 1
    else:
        texts.append(error)
    text = "\n".join(texts)
    for pattern, cause in _NETWORK_CAUSES:
        if pattern.search(text):
            return cause
    return None


_GS_PATH = re.compile(r"gs://[^\s'\"`,;)\]]+")
# An object in a GCS JSON API request: /b/BUCKET/o/NAME, /b/BUCKET/o?...name=NAME (an upload)
# or ?...prefix=NAME (a listing)
_API_OBJECT = re.compile(
    r"/b/(?P<bucket>[^/?\s]+)/o(?:/(?P<name>[^?\s]+)|\?\S*?\b(?:name|prefix)=(?P<q>[^&\s]+))?"
)


def gs_path_in(error: BaseException | str) -> str | None:
    """The first gs:// path named in `error` or its chain (also as the object of a GCS API
    request's URL, or in a worker's error text), if any."""
    from urllib.parse import unquote

    seen, depth = error, 0
    while seen is not None and depth < 20:
        text = str(seen)
        match = _GS_PATH.search(text)
        if match:
            return match.group(0)
        api = _API_OBJECT.search(text)
        if api:
            name = api.group("name") or api.group("q") or ""
            return f"gs://{api.group('bucket')}/{unquote(unquote(name))}"
        if not isinstance(seen, BaseException):
            return None
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    return None


def network_reason(error: BaseException) -> str | None:
    """'cannot reach SERVER: CAUSE (retried ...)' for a GCS call that failed on a lost
    connection (after its bounded retry); None when `error` is something else."""
    cause = network_cause(error)
    if cause is None:
        return None
    return (
        f"cannot reach {where()}: {cause} (retried for {retry_seconds():g} s; "
        f"{RETRY_ENV} sets how long)"
    )


def network_error_line(error: BaseException, fallback_path: str | None = None) -> str | None:
    """One line for a run that failed on a lost connection: the path, the server, the cause;
    None when `error` is something else."""
    reason = network_reason(error)
    return None if reason is None else f"{_line_path(error, fallback_path)}: {reason}"


def _line_path(error: BaseException, fallback_path: str | None) -> str:
    path = gs_path_in(error)
    if not path or (fallback_path and fallback_path.startswith(path)):
        path = fallback_path or path or "gs://"  # the run's output folder says more
    return path


# --------------------------------------------------------------------------- answers

# A status in a worker's error text: api_core's "403 GET http://...", or the storage media
# library's "('Request failed with status code', 403, ...".
_STATUS_TEXT = re.compile(
    r"\b(?P<a>[1-5]\d\d) (?:GET|POST|PUT|PATCH|DELETE|HEAD) https?://|"
    r"'Request failed with status code', (?P<b>[1-5]\d\d)"
)
RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})  # what the GCS client retries


def _chain(error: BaseException | str) -> list:
    if not isinstance(error, BaseException):
        return [error]
    out, seen = [], error
    while seen is not None and len(out) < 20:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def http_status(error: BaseException | str) -> int | None:
    """The HTTP status a GCS server answered with, in `error`'s chain (google-api-core's and
    the storage library's errors) or in a worker's error text; None when there is none."""
    for seen in _chain(error):
        if isinstance(seen, BaseException) and type(seen).__module__.startswith("google."):
            code = getattr(seen, "code", None)
            response = getattr(seen, "response", None)
            code = code if isinstance(code, int) else getattr(response, "status_code", None)
            if isinstance(code, int) and 100 <= code < 600:
                return code
    for seen in _chain(error):
        match = _STATUS_TEXT.search(str(seen))
        if match:
            return int(match.group("a") or match.group("b"))
    return None


def bucket_of(path: str | None) -> str | None:
    match = re.match(r"^gs://([^/]+)", path or "")
    return match.group(1) if match else None


def bucket_exists(bucket: str) -> bool | None:
    """Whether the bucket exists (one request); None when that cannot be told."""
    try:
        from apache_beam.io.gcp import gcsio

        prepare()
        return gcsio.GcsIO().get_bucket(bucket) is not None
    except Exception:  # noqa: BLE001 - unknown: the caller says less
        return None


def answer_reason(error: BaseException | str, path: str | None = None) -> str | None:
    """Why a GCS call failed, for an error the server answered (a 4xx, or a 5xx that retries
    did not cure), naming the server; None when it answered none. A 404 on `path` (or the
    object the error names) says whether its bucket exists."""
    code = http_status(error)
    if code is None:
        return None
    server = where()
    if code == 403:
        return f"permission denied (HTTP 403 from {server})"
    if code == 401:
        return f"the credentials were refused (HTTP 401 from {server})"
    if code == 404:
        bucket = bucket_of(path or gs_path_in(error))
        if bucket and bucket_exists(bucket) is False:
            return f"the bucket gs://{bucket} does not exist (HTTP 404 from {server})"
        return f"no such object (HTTP 404 from {server})"
    try:
        phrase = f"HTTP {code} {HTTPStatus(code).phrase}"
    except ValueError:
        phrase = f"HTTP {code}"
    if code in RETRYABLE_STATUS:
        return f"{server} answered {phrase} (retried for {retry_seconds():g} s; {RETRY_ENV} sets how long)"
    return f"{server} answered {phrase}"


def failure_reason(error: BaseException | str, path: str | None = None) -> str | None:
    """Why a GCS call failed: the server's answer (answer_reason) or a lost connection
    (network_reason); None for an error that is neither."""
    return answer_reason(error, path) or (
        network_reason(error) if isinstance(error, BaseException) else None
    )


def error_line(error: BaseException, fallback_path: str | None = None) -> str | None:
    """One line for a run that failed on GCS: the path, the server, the cause; None when
    `error` is no GCS failure. `fallback_path` (the run's output folder) stands in for a path
    the error does not name, or names only a part of."""
    path = _line_path(error, fallback_path)
    reason = failure_reason(error, path if path != "gs://" else None)
    return None if reason is None else f"{path}: {reason}"


def check_object_name(path: str, flag: str | None = None) -> None:
    """UserError for a gs:// path whose object name holds '#' or '?', before any request:
    Google's naming guidelines advise against both (gcloud reads '#' as a generation and '?'
    as a wildcard; so does Beam's file matching, for '?'), and requests with them go wrong."""
    if not path.startswith("gs://"):
        return
    name = path[len("gs://") :].partition("/")[2]
    if "#" in name or "?" in name:
        from sampler.errors import UserError

        named = f"{flag} {path}" if flag else path
        raise UserError(
            f"{named}: gs:// object names with '#' or '?' are not supported (Google Cloud "
            "Storage's naming guidelines advise against both: '#' reads as a version and '?' "
            "as a wildcard); rename it"
        )


def raise_if_failure(path: str, error: BaseException, doing: str = "") -> None:
    """UserError 'PATH: [DOING]REASON' when `error` is a GCS failure (failure_reason)."""
    reason = failure_reason(error, path)
    if reason:
        from sampler.errors import UserError

        raise UserError(f"{path}: {doing}{reason}") from error


@contextlib.contextmanager
def failures_named(path: str, doing: str = ""):
    """`with failures_named(path):` a GCS failure in the block is raise_if_failure's line."""
    try:
        yield
    except Exception as e:  # noqa: BLE001 - a GCS failure becomes one line, else unchanged
        raise_if_failure(path, e, doing)
        raise


def named_stream(stream, path: str, what: str):
    """`stream`, for a gs:// path one whose GCS failures name it (NamedStream)."""
    return NamedStream(stream, path, what) if path.startswith("gs://") else stream


class NamedStream:
    """A gs:// stream whose GCS failures (in a read, a write, or the close that uploads) are
    one-line UserErrors naming its path, the server and the cause (`what` words them: 'read'
    or 'write'); other errors pass unchanged."""

    def __init__(self, stream, path: str, what: str):
        self._stream = stream
        self._path = path
        self._what = what

    def _failed(self, error: Exception) -> None:
        reason = failure_reason(error, self._path)
        if reason is None:
            return
        from sampler.errors import UserError

        if self._what == "write":
            raise UserError(f"cannot write the output {self._path}: {reason}") from error
        raise UserError(f"{self._path}: cannot read: {reason}") from error

    def _call(self, name: str, *args):
        try:
            return getattr(self._stream, name)(*args)
        except Exception as e:  # noqa: BLE001 - a GCS failure becomes one line, else unchanged
            self._failed(e)
            raise

    def read(self, *args):
        return self._call("read", *args)

    def read1(self, *args):
        return self._call("read1", *args)

    def readinto(self, *args):
        return self._call("readinto", *args)

    def readline(self, *args):
        return self._call("readline", *args)

    def write(self, *args):
        return self._call("write", *args)

    def flush(self):
        return self._call("flush")

    def seek(self, *args):
        return self._call("seek", *args)

    def close(self):
        return self._call("close")

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self.close()
        else:  # the body's error is the one to report
            with contextlib.suppress(Exception):
                self._stream.close()

    def __iter__(self):
        return iter(self.readline, b"")

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def where() -> str:
    """The GCS server runs are talking to, for messages."""
    host = emulator_host()
    return f"the storage emulator at {host}" if host else "Google Cloud Storage"


# --------------------------------------------------------------------------- compose

COMPOSE_MAX = 32  # source objects per compose request (the GCS limit)
_GS_OBJECT = re.compile(r"^gs://(?P<bucket>[^/]+)/(?P<name>.+)$")


def _split(path: str) -> tuple[str, str] | None:
    match = _GS_OBJECT.match(path)
    return (match.group("bucket"), match.group("name")) if match else None


def can_compose(target: str, sources: list[str]) -> bool:
    """Whether `target` can be made from `sources` on the server: all gs:// in one bucket."""
    parsed = [_split(path) for path in [target, *sources]]
    return bool(sources) and all(parsed) and len({bucket for bucket, _ in parsed}) == 1


def compose(target: str, sources: list[str], scratch: str) -> None:
    """Writes `target` as the concatenation of the objects `sources`, in order, on the server
    (GCS compose: no byte passes through this process; the object appears whole or not at all).
    More than COMPOSE_MAX sources are composed in rounds into objects named `scratch-R-I`
    (same bucket), removed afterwards."""
    from apache_beam.io.gcp import gcsio
    from google.api_core.exceptions import NotFound

    prepare()
    bucket_name, target_name = _split(target)
    _, scratch_name = _split(scratch)
    bucket = gcsio.GcsIO().client.bucket(bucket_name)
    names = [_split(path)[1] for path in sources]
    made: list[str] = []
    try:
        level = 0
        while len(names) > COMPOSE_MAX:
            combined = []
            for start in range(0, len(names), COMPOSE_MAX):
                group = names[start : start + COMPOSE_MAX]
                name = f"{scratch_name}-{level}-{start // COMPOSE_MAX}"
                bucket.blob(name).compose([bucket.blob(n) for n in group])
                made.append(name)
                combined.append(name)
            names, level = combined, level + 1
        bucket.blob(target_name).compose([bucket.blob(n) for n in names])
    finally:
        for name in made:
            try:
                bucket.blob(name).delete()
            except (NotFound, OSError):  # best effort: the run's temp folder goes anyway
                pass
