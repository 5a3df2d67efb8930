"""One SDK worker of the local runner, forked by pipelines.runtime.sdk_fork_server (standard library only).

Run by Beam as the worker's command line (`python -I sdk_fork_client.py SOCKET COLD_COMMAND`):
sends this process's environment and stderr to the server, which forks a warm SDK worker with
them and answers `pid N`, and exits as that worker did (its exit code, or the signal that
killed it, which the runner reports).

When the server is gone (it cannot be reached, or it closes the connection before it forked
a worker) the client becomes Beam's cold worker, COLD_COMMAND, so that a dead server costs
speed, never a hang. When the server dies after it forked the worker, the worker goes on and
the client waits for it.
"""

import array
import json
import os
import signal
import socket
import sys
import time


def _cold(cold_command: str, why: str) -> int:
    """Runs Beam's own worker command in this process (never returns on success)."""
    print(f"sdk_fork_client: {why}; starting a cold SDK worker", file=sys.stderr, flush=True)
    os.execv("/bin/sh", ["/bin/sh", "-c", cold_command])
    return 1  # not reached


def _wait_gone(pid: int) -> int:
    """The forked worker, orphaned by a dead server: waits until it has ended."""
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return 0
        except PermissionError:  # the pid was reused by another user's process
            return 0
        time.sleep(0.2)


def _exit_as(code: int) -> int:
    """The worker's exit: a signal that killed it kills this process too, so that the runner
    sees which one (the out-of-memory killer's SIGKILL)."""
    if code < 0:
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # their handlers cannot be set
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


def main(socket_path: str, cold_command: str = "") -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    message = json.dumps(dict(os.environ)).encode() + b"\n"
    stderr = array.array("i", [sys.stderr.fileno()])
    try:
        conn.connect(socket_path)
        conn.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, stderr.tobytes())])
    except OSError as e:
        if not cold_command:
            raise
        return _cold(cold_command, f"the fork server at {socket_path} is gone ({e.strerror})")
    reply = b""
    pid = None
    while True:
        data = conn.recv(64)
        if not data:  # the server went away
            if pid is None and cold_command:
                return _cold(cold_command, "the fork server ended before it forked a worker")
            return _wait_gone(pid) if pid is not None else 1
        reply += data
        while b"\n" in reply:
            line, reply = reply.split(b"\n", 1)
            if line.startswith(b"pid "):
                pid = int(line[4:])
            else:
                return _exit_as(int(line))


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
