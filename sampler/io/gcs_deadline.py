"""The gs:// deadline: one outage is waited for BEAM_GRAPH_GCS_RETRY_S seconds in all, in every
layer that retries or waits, so that a run whose server stops answering ends within it.

An outage starts when the server was last heard from before a request failed (a lost or
refused connection, no answer, or a retryable answer: 408, 429, 5xx) and ends with any other
answer. The layers of a gs:// call, and how each is bounded (`install`, from
sampler.io.gcs.prepare):

* **google-api-core's Retry** objects that google-cloud-storage and Beam's gcsio bind as
  defaults (storage.retry.DEFAULT_RETRY, gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER;
  every storage call and media upload or download retries through one of them): their total
  timeout is capped at the deadline and their back-off at a quarter of it, and their
  predicate says no once the outage has lasted the deadline. They were: 120 s per call, and
  per call again (a run makes many).
* **Each HTTP request's socket timeouts** (google-cloud-storage: 60 s per request, its media
  requests (61, 60); google-auth's AuthorizedSession: 120 s, also for a token refresh): capped
  at what is left of the deadline, so that a request to a server that stopped answering ends
  when the deadline does. Once the deadline has passed, a server that answered nothing (no
  answer in time) is not asked again: a request fails at once (NoAnswer), so that the run's
  clean-up does not wait either (its leftovers stay; the next run's --overwrite removes them).
  A server that refuses or answers with errors is asked again, with one short try (PROBE_S)
  per request, so that one that answers again is seen (and a clean-up can delete).
* **google-auth's token refresh** retries connections 3 times in urllib3 (its own session's
  adapter): that session retries nothing now; the Retry above retries the whole request.
* Not on this path: Beam's gcsio uses google-cloud-storage only (apitools, and Beam's
  retry.with_exponential_backoff, serve the Dataflow client and BigQuery); requests' own
  adapters retry nothing; the local runner does not retry a failed bundle.

Only a storage client's requests are bounded (its session, google.cloud.storage.Client._http),
not every HTTP request of the process.
"""

from __future__ import annotations

import contextlib
import threading
import time

from sampler import settings

RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})
# A request's timeout once the deadline has passed (seconds; at most a quarter of it)
PROBE_S = 1.0
# What google-auth's AuthorizedSession waits when no timeout is given (its _DEFAULT_TIMEOUT)
_SESSION_DEFAULT_TIMEOUT = 120.0

_LOCK = threading.Lock()
# start: when the server was last heard from before the current outage (monotonic), None when
# none; last: when the latest failure of it was seen; silent: that failure got no answer
_OUTAGE: dict = {"start": None, "last": None, "silent": False}
_INSTALLED = {"retries": False, "sessions": False}


RETRY_ENV = settings.GCS_RETRY_S
DEFAULT_RETRY_S = settings.SETTINGS[RETRY_ENV].default


def retry_seconds() -> float:
    """The deadline: how long one outage is waited for (BEAM_GRAPH_GCS_RETRY_S, default 30)."""
    return settings.seconds(RETRY_ENV)  # (a bad value: one line, sampler/settings.py)


def _deadline() -> float:
    return retry_seconds()


def probe_s() -> float:
    return min(PROBE_S, _deadline() / 4)


class NoAnswer(OSError):
    """A request not made: the server has answered nothing for longer than the deadline."""


def failed(since: float, silent: bool = False) -> None:
    """A request failed (`silent`: no answer in time); the server was last heard from at
    `since` (monotonic). A failure more than twice the deadline after the previous one starts a
    new outage."""
    now = time.monotonic()
    with _LOCK:
        if _OUTAGE["start"] is None or now - _OUTAGE["last"] > 2 * _deadline():
            _OUTAGE["start"] = min(since, now)
        _OUTAGE["last"] = now
        _OUTAGE["silent"] = silent


def answered() -> None:
    """The server answered: no outage."""
    with _LOCK:
        _OUTAGE.update(start=None, last=None, silent=False)


_TRY_ANYWAY = threading.local()


@contextlib.contextmanager
def try_anyway():
    """Requests in this block are made even when the server has answered nothing for the
    deadline (one short try each): what a run must try before it gives up, such as removing the
    output marker it wrote."""
    depth = getattr(_TRY_ANYWAY, "depth", 0)
    _TRY_ANYWAY.depth = depth + 1
    try:
        yield
    finally:
        _TRY_ANYWAY.depth = depth


def _outage() -> tuple[float | None, bool]:
    """(start, silent) of the current outage; (None, False) when there is none (no failure
    for twice the deadline ends one)."""
    with _LOCK:
        start, last, silent = _OUTAGE["start"], _OUTAGE["last"], _OUTAGE["silent"]
    if start is None or time.monotonic() - last > 2 * _deadline():
        return None, False
    return start, silent


def check_asking() -> None:
    """NoAnswer when the server has answered nothing for the deadline (see the docstring);
    twice the deadline after its last failure, it is asked again."""
    if getattr(_TRY_ANYWAY, "depth", 0):
        return
    start, silent = _outage()
    if start is None or not silent:
        return
    waited = time.monotonic() - start
    if waited >= _deadline():
        raise NoAnswer(
            f"no request made: the server answered nothing for {waited:.0f} s (timed out)"
        )


def seconds_left() -> float | None:
    """What is left of the deadline in the current outage (<= 0: it has passed); None when the
    server is answering."""
    start, _ = _outage()
    return None if start is None else _deadline() - (time.monotonic() - start)


def may_retry() -> bool:
    left = seconds_left()
    return left is None or left > 0


def bounded_timeout(timeout):
    """`timeout` (seconds, a (connect, read) pair, or None: none given) capped at what is left
    of the deadline; a short try once it has passed."""
    left = seconds_left()
    cap = _deadline() if left is None else max(probe_s(), left)
    if isinstance(timeout, tuple):
        return tuple(cap if t is None else min(t, cap) for t in timeout)
    return cap if timeout is None else min(timeout, cap)


def _longest(timeout) -> float:
    return max(timeout) if isinstance(timeout, tuple) else float(timeout)


def _lost(error: BaseException) -> bool:
    """Whether `error` is a failed exchange with the server: requests' errors (RequestException
    is an OSError), sockets', google-auth's TransportError (a token refresh)."""
    if isinstance(error, OSError):
        return True
    from google.auth import exceptions as auth_exceptions

    return isinstance(error, auth_exceptions.TransportError)


def _no_answer(error: BaseException) -> bool:
    """Whether `error` (or what it wraps) is a timeout: the server answered nothing."""
    import requests

    seen = error
    while seen is not None:
        if isinstance(seen, (requests.Timeout, TimeoutError)) or "timed out" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _timed(call, method, url, args, kwargs, default):
    """`call(method, url, *args, **kwargs)` with its timeout bounded, its outcome on the clock."""
    check_asking()
    timeout = bounded_timeout(kwargs.get("timeout", default))
    kwargs["timeout"] = timeout
    started = time.monotonic()
    try:
        response = call(method, url, *args, **kwargs)
    except NoAnswer:  # a refresh inside this request was not made: no new failure
        raise
    except Exception as e:
        if not _lost(e):
            raise
        if _no_answer(e):  # unanswered for its timeout: last heard from that long ago
            failed(max(started, time.monotonic() - _longest(timeout)), silent=True)
        else:
            failed(time.monotonic())
        raise
    if getattr(response, "status", getattr(response, "status_code", 200)) in RETRYABLE_STATUS:
        failed(started)
    else:
        answered()
    return response


def bound_session(session) -> None:
    """Bounds the requests of a storage client's session (an AuthorizedSession) and of its
    token refreshes; once per session."""
    if getattr(session, "_beam_graph_deadline", False):
        return
    session._beam_graph_deadline = True
    request = session.request

    def bounded_request(method, url, *args, **kwargs):
        return _timed(request, method, url, args, kwargs, _SESSION_DEFAULT_TIMEOUT)

    session.request = bounded_request
    auth_request = getattr(session, "_auth_request", None)
    if auth_request is not None:
        session._auth_request = _BoundedAuthRequest(auth_request)
    auth_session = getattr(session, "_auth_request_session", None)
    if auth_session is not None:  # the Retry of the storage call retries a refresh instead
        import requests

        for prefix in ("https://", "http://"):
            auth_session.mount(prefix, requests.adapters.HTTPAdapter(max_retries=0))


class _BoundedAuthRequest:
    """google-auth's transport Request (a token refresh), its timeout bounded."""

    def __init__(self, request):
        self._request = request

    def __call__(self, url, method="GET", *args, **kwargs):
        def call(method, url, *args, **kwargs):
            return self._request(url, method, *args, **kwargs)

        return _timed(call, method, url, args, kwargs, _SESSION_DEFAULT_TIMEOUT)

    def __getattr__(self, name: str):
        return getattr(self._request, name)


def install() -> None:
    """Bounds the Retry objects and every storage client's session (see the module's
    docstring); once per process."""
    if not _INSTALLED["retries"]:
        _INSTALLED["retries"] = True
        _bound_retries()
    if not _INSTALLED["sessions"]:
        _INSTALLED["sessions"] = True
        _bound_sessions()


def _bound_retries() -> None:
    """Caps the GCS client's Retry objects that Beam and the storage library bind as defaults
    (module constants and default arguments alike, so they are changed in place)."""
    from google.api_core import retry as api_retry
    from google.cloud.storage import retry as storage_retry

    seconds = _deadline()
    policies = [storage_retry.DEFAULT_RETRY]
    try:
        from apache_beam.io.gcp import gcsio_retry

        policies.append(gcsio_retry.DEFAULT_RETRY_WITH_THROTTLING_COUNTER)
    except ImportError:
        pass
    for policy in policies:
        if not isinstance(policy, api_retry.Retry):
            continue
        if (policy._timeout or 1e9) > seconds:
            policy._timeout = seconds
            if hasattr(policy, "_deadline"):
                policy._deadline = seconds
        # A back-off sleep may start just before the deadline: at most a quarter of it late.
        policy._maximum = min(policy._maximum, max(seconds / 4, 0.1))
        policy._initial = min(policy._initial, policy._maximum)
        policy._predicate = _within_deadline(policy._predicate)


def _within_deadline(predicate):
    """`predicate`, and no retry once this process's outage has lasted the deadline (one
    outage is retried for that long in all, not that long per call)."""

    def should_retry(error) -> bool:
        if not predicate(error):
            return False
        if seconds_left() is None:  # a failure the session did not see (a body cut short)
            failed(time.monotonic())
        return may_retry()

    return should_retry


def _bound_sessions() -> None:
    """Every storage client's session (google.cloud.storage.Client._http) is bounded when
    first used."""
    from google.cloud.storage import client as storage_client

    inherited = storage_client.Client._http
    if getattr(inherited.fget, "_beam_graph_deadline", False):
        return

    def _http(self):
        session = inherited.fget(self)
        bound_session(session)
        return session

    _http._beam_graph_deadline = True
    storage_client.Client._http = property(_http)
