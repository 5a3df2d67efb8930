"""One run per output folder: a run holds its folder from its output check to its end.

The hold is the file `<output dir>/.beam_graph_run.json`, holding the run's pid, host, start
time and command. On a local path it is also an OS lock (flock on that file): the kernel
drops the lock when the process ends, however it ends, so a marker whose lock nobody holds was
left by a dead run and is replaced. On a path with a scheme (gs://, through sampler.io.files)
no lock exists: the marker alone says who holds the folder. A marker from this host whose pid
is gone (or is another process now: its start time differs) is stale; a marker from another
host is taken as live, and the refusal names the file to delete when that run is gone.

A second run into a held folder is refused with one line naming the running one, whatever
--overwrite says, before it deletes or writes anything; its clean-up then has nothing to touch
(`holds` tells the clean-up functions whether the folder is this process's).

`release` (run_main calls release_all at the end of every CLI run) removes the marker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import os
import socket
import sys
import time
import uuid

from sampler.errors import UserError
from sampler.io import files as io_files
from sampler.io import gcs, no_follow
from sampler.io.files import has_scheme

MARKER_NAME = ".beam_graph_run.json"

try:  # not on every platform: there the marker alone holds the folder
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


@dataclasses.dataclass
class Held:
    """A folder this process holds: its marker, the lock's descriptor (None: marker only)."""

    folder: str
    marker: str
    fd: int | None
    token: str
    pid: int


_HELD: dict[str, Held] = {}


def _key(folder: str) -> str:
    if has_scheme(folder):
        return folder.rstrip("/")
    return os.path.realpath(os.path.abspath(folder or "."))


def marker_path(folder: str) -> str:
    return io_files.join(folder, MARKER_NAME) if folder else MARKER_NAME


def _process_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot (/proc), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _own_record(token: str) -> dict:
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pid_start": _process_start(os.getpid()),
        "command": [os.path.basename(sys.argv[0]) or "python", *sys.argv[1:]][:40],
        "token": token,
    }


def is_stale(record: dict) -> bool:
    """Whether a marker (not locked, or where no lock exists) was left by a run that ended:
    one from this host whose pid is gone or now another process. One from another host, or
    unreadable, cannot be judged here: it counts as live."""
    pid, host = record.get("pid"), record.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return False
    if not _alive(pid):
        return True
    started = record.get("pid_start")
    return started is not None and started != _process_start(pid)


def _who(record: dict) -> str:
    if not record:
        return "a run that is starting"
    return (
        f"pid {record.get('pid', '?')} on {record.get('host', '?')}, started"
        f" {record.get('started', '?')}"
    )


def _refuse(flag: str, folder: str, record: dict, marker: str, judged: bool) -> UserError:
    gone = "" if judged else f"; if that run is gone, delete {marker}"
    return UserError(
        f"{flag} {folder or '.'}: another run is writing there ({_who(record)}); wait for it to"
        f" end or write elsewhere{gone}"
    )


def hold(folder: str, flag: str, use_lock: bool = True) -> Held:
    """Takes `folder` for this run (created if needed), or raises a one-line UserError naming
    the run that holds it. Holding it already (this process) is no error. `use_lock=False`:
    the marker alone, as on gs:// (tests run that path on local folders)."""
    key = _key(folder)
    held = _HELD.get(key)
    if held is not None and held.pid == os.getpid():
        return held
    marker = marker_path(folder)
    token = uuid.uuid4().hex
    if use_lock and fcntl is not None and not has_scheme(folder):
        held = _hold_locked(folder, marker, flag, token)
        if held is not None:
            _HELD[key] = held
            return held
    held = _hold_marker(folder, marker, flag, token)
    _HELD[key] = held
    return held


def _hold_locked(folder: str, marker: str, flag: str, token: str) -> Held | None:
    """The flock path; None where the file system has no locks (the marker path then)."""
    try:
        os.makedirs(folder or ".", exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot write the output {marker}: {e.strerror or e}") from e
    for _ in range(100):  # a holder that removes its marker between our open and lock: again
        try:  # never through a link, never a FIFO: the marker is written into what it opens
            fd = no_follow.open_regular(marker, os.O_RDWR | os.O_CREAT, 0o644, follow=False)
        except UserError as e:
            raise UserError(f"{flag} {folder or '.'}: {e}") from e
        except OSError as e:
            raise UserError(f"cannot write the output {marker}: {e.strerror or e}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read_fd(fd)
            os.close(fd)
            raise _refuse(flag, folder, record, marker, judged=True) from None
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                return None
            raise
        try:
            same = os.stat(marker).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            continue
        data = (json.dumps(_own_record(token), indent=1) + "\n").encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        return Held(folder, marker, fd, token, os.getpid())
    raise UserError(f"{flag} {folder}: cannot take its marker {marker} (it keeps changing)")


def _read_fd(fd: int) -> dict:
    try:
        data = json.loads(os.pread(fd, 1 << 16, 0).decode("utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_marker(marker: str) -> dict | None:
    """The marker's record; None when there is none (or it is empty: a lock file no run
    wrote its record into); {} when it cannot be read. On gs://, a failed request is a
    UserError naming the marker, the server and the cause (sampler.io.files), not a record."""
    if not io_files.exists(marker):
        return None
    try:
        if has_scheme(marker):
            with io_files.open_stream(marker) as f:
                text = f.read()
        else:  # a FIFO there: refused, never a read that waits
            text = no_follow.read_regular(marker)
        if not text.strip():
            return None
        data = json.loads(text.decode("utf-8"))
    except UserError:
        raise
    except Exception:  # noqa: BLE001 - half written, or not ours: unreadable
        return {}
    return data if isinstance(data, dict) else {}


def _write_marker(marker: str, token: str) -> None:
    with io_files.create_file(marker) as f:  # a UserError naming the path when it cannot
        f.write((json.dumps(_own_record(token), indent=1) + "\n").encode())


def _hold_marker(folder: str, marker: str, flag: str, token: str) -> Held:
    """No lock: a marker that is not stale refuses; ours is written, then read back (of two
    runs writing at once, the one whose token stayed goes on). A read back that fails is no
    other run: one line naming the marker and the cause, and the marker written goes."""
    record = _read_marker(marker)
    if record is not None and not is_stale(record):
        raise _refuse(flag, folder, record, marker, judged=False)
    _write_marker(marker, token)
    try:
        record = _read_back(marker)
    except UserError as e:
        _remove_written(marker)
        reason = gcs.failure_reason(e, marker) or str(e)
        raise UserError(
            f"{flag} {folder}: cannot read back this run's marker {marker}: {reason}"
        ) from e
    if record.get("token") != token:
        raise _refuse(flag, folder, record, marker, judged=False)
    return Held(folder, marker, None, token, os.getpid())


def _read_back(marker: str) -> dict:
    """The record of the marker this run has just written. Missing (a 404: the server had it a
    moment ago) is read again for up to the gs:// deadline; a failure the storage client has
    retried already (a 5xx, no answer) is a UserError at once."""
    start, pause = time.monotonic(), 0.1
    while True:
        try:
            record = _read_marker(marker)
        except UserError as e:
            if gcs.http_status(e) != 404 or time.monotonic() - start >= gcs.retry_seconds():
                raise
            record = None
        if record is not None:
            return record
        if time.monotonic() - start >= gcs.retry_seconds():
            raise UserError("it is missing, though this run wrote it")
        time.sleep(pause)
        pause = min(2 * pause, 1.0)


def _remove_written(marker: str) -> None:
    """Removes the marker this run wrote and could not read back (best effort; one try even
    when the server has stopped answering)."""
    from sampler.io import gcs_deadline

    with gcs_deadline.try_anyway(), contextlib.suppress(Exception):
        io_files.delete([marker])


def holds(folder: str) -> bool:
    """Whether this process holds `folder` (its clean-up may delete the run's files there)."""
    held = _HELD.get(_key(folder))
    return held is not None and held.pid == os.getpid()


def release(folder: str) -> None:
    """Removes this process's marker of `folder` (then drops the lock)."""
    held = _HELD.pop(_key(folder), None)
    if held is None or held.pid != os.getpid():
        return
    if held.fd is not None:
        with contextlib.suppress(OSError):
            if os.stat(held.marker).st_ino == os.fstat(held.fd).st_ino:
                os.remove(held.marker)
        with contextlib.suppress(OSError):
            os.close(held.fd)
        return
    with contextlib.suppress(Exception):
        record = _read_marker(held.marker) or {}
        if record.get("token") == held.token:
            io_files.delete([held.marker])


def release_all() -> None:
    """Releases every folder this process holds (the end of a CLI run, however it ended)."""
    for key in list(_HELD):
        held = _HELD[key]
        if held.pid == os.getpid():
            release(held.folder)
        else:  # a forked child's copy: the parent's to release
            _HELD.pop(key, None)
