"""gs:// through Beam's GCS filesystem: a storage emulator, and a bounded retry.

* **Emulator.** With `STORAGE_EMULATOR_HOST=http://127.0.0.1:PORT` set (the variable the
  google-cloud-storage client itself honours), gs:// paths go to that server (say
  `gcp-storage-emulator`). It takes no credentials: Beam is told at once that there are none
  (an anonymous client), instead of retrying Google's default credentials for about 20 s in
  every process (the CLI, each SDK worker).
* **Bounded retry.** The GCS client retries a lost connection (no network, a DNS failure, a
  server gone) for 120 s per call, and a run makes many calls: a run without network
  retried for many minutes without a word. Here one outage is retried for at most
  `BEAM_GRAPH_GCS_RETRY_S` seconds (default 30) per process, over all its calls; then the
  error reaches the CLI, which reports it in one line (`network_error_line`).

The bound applies where `BEAM_GRAPH_GCS_RETRY_S` is set: the CLIs set it (to 30 unless
given), so it covers them and their local SDK workers, which inherit it; a Dataflow worker
keeps the GCS client's own retries (Dataflow retries a failed work item itself).

`prepare()` applies each once per process (the bound once the variable is set), before Beam makes its first GCS client: it is
called where Beam is loaded (sampler.io.files for gs:// paths, pipelines.runtime.runner for a
pipeline, sampler.beam for SDK workers). It never imports Beam itself when Beam is not
loaded yet, except from those places.
"""

from __future__ import annotations

import os
import re
import sys
import time

EMULATOR_HOST = "STORAGE_EMULATOR_HOST"
RETRY_ENV = "BEAM_GRAPH_GCS_RETRY_S"
DEFAULT_RETRY_S = 30.0

_DONE = {"bounded": False, "anonymous": False}


def emulator_host() -> str | None:
    """The storage emulator's address when one is set, else None."""
    return os.environ.get(EMULATOR_HOST) or None


def retry_seconds() -> float:
    """How long one GCS call retries a lost connection (BEAM_GRAPH_GCS_RETRY_S, default 30)."""
    try:
        value = float(os.environ.get(RETRY_ENV, DEFAULT_RETRY_S))
    except ValueError:
        return DEFAULT_RETRY_S
    return value if value > 0 else DEFAULT_RETRY_S


def prepare() -> None:
    """Anonymous credentials when an emulator is set; every GCS retry bounded (see above).

    Only in a process that has loaded Beam: every GCS access goes through Beam's FileSystems,
    whose callers import it first (sampler.io.files, the pipeline's construction, an SDK
    worker), and a process that never touches Beam (`--runner InMemory` on local files) must
    not load it here."""
    if "apache_beam" not in sys.modules:
        return
    if _DONE["bounded"] and (_DONE["anonymous"] or not emulator_host()):
        return
    try:
        from google.api_core import retry as api_retry
        from google.cloud.storage import retry as storage_retry
    except ImportError:  # no GCS support installed: Beam reports that itself
        return
    # Set by the CLIs (pipelines.runtime.runner.run_main), inherited by their local workers.
    if not _DONE["bounded"] and RETRY_ENV in os.environ:
        _DONE["bounded"] = True
        _bound_retries(api_retry, storage_retry)
    if not _DONE["anonymous"] and emulator_host():
        _DONE["anonymous"] = True
        _anonymous_credentials()


def _bound_retries(api_retry, storage_retry) -> None:
    """Caps the timeout of the GCS client's retry objects that Beam and the storage library
    bind as defaults (module constants and default arguments alike, so they are changed in
    place)."""
    seconds = retry_seconds()
    policies = [storage_retry.DEFAULT_RETRY]
    try:
        from apache_beam.io.gcp import gcsio_retry

        policies.append(gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER)
    except ImportError:
        pass
    for policy in policies:
        if isinstance(policy, api_retry.Retry):
            if (policy._timeout or 1e9) > seconds:
                policy._timeout = seconds
                if hasattr(policy, "_deadline"):
                    policy._deadline = seconds
            policy._predicate = _within_outage_budget(policy._predicate)


_OUTAGE = {"start": None, "last": None}


def _within_outage_budget(predicate):
    """`predicate`, and no retry once this process has seen retryable errors for
    retry_seconds() without a pause: one outage is retried for that long in all, not that long
    per call (a run without network makes many calls: each would wait again). A gap of twice
    that between errors starts a new outage."""

    def should_retry(error) -> bool:
        if not predicate(error):
            return False
        now = time.monotonic()
        if _OUTAGE["last"] is None or now - _OUTAGE["last"] > 2 * retry_seconds():
            _OUTAGE["start"] = now
        _OUTAGE["last"] = now
        return now - _OUTAGE["start"] < retry_seconds()

    return should_retry


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
    if reason is None:
        return None
    path = gs_path_in(error)
    if not path or (fallback_path and fallback_path.startswith(path)):
        path = fallback_path or path or "gs://"  # the run's output folder says more
    return f"{path}: {reason}"


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
