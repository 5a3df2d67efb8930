"""One SDK worker of the local runner, forked by pipelines.sdk_fork_server (standard library only).

Run by Beam as the worker's command line (`python -I sdk_fork_client.py SOCKET`): sends this
process's environment and stderr to the server, which forks a warm SDK worker with them, and
exits with that worker's exit code.
"""

import array
import json
import os
import socket
import sys


def main(socket_path: str) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(socket_path)
    message = json.dumps(dict(os.environ)).encode() + b"\n"
    stderr = array.array("i", [sys.stderr.fileno()])
    conn.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, stderr.tobytes())])
    reply = b""
    while not reply.endswith(b"\n"):
        data = conn.recv(64)
        if not data:  # the server went away before the worker ended
            return 1
        reply += data
    return int(reply)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
