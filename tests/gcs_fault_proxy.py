"""A fault-injecting HTTP proxy on a loopback port, in front of the GCS emulator.

`FaultProxy(upstream_url).start()` listens on a free 127.0.0.1 port and forwards every HTTP
request to the emulator (tests/gcs_emulator.py), keeping the client's Host header (the
emulator builds its resumable-upload URLs from it, so they point back at the proxy) and
rewriting the emulator's own address in its answers to the proxy's (an object uploaded
straight to the emulator names the emulator in its download link). A test points STORAGE_EMULATOR_HOST at `proxy.url` and adds faults for chosen
requests:

    proxy.add("403", method="POST", path=r"/upload/.*samples")   # every matching upload
    proxy.add("404", path=r"/o/out%2F\\.beam_graph_run\\.json\\?.*alt=media", times=1)
    proxy.add("stall")                                           # every request, from now on

Actions: an HTTP status (`"403"`, `"404"`, `"503"`, ...) answered with a GCS-style JSON error
body; `"stall"` (the request is read and never answered until `clear()` or `close()`, the
connection left open); `"reset"` (the connection is closed with a TCP reset). A fault with
`times=N` applies to the next N matching requests, else to all. `seen` lists
(method, path, action) of every request, in order; `first(action)` the monotonic time of the
first request a fault answered.

Only loopback addresses are contacted; nothing here imports the code under test.
"""

from __future__ import annotations

import dataclasses
import http.client
import json
import re
import socket
import socketserver
import struct
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "content-length",
}
_REASONS = {403: "Forbidden", 404: "Not Found", 429: "Too Many Requests", 500: "Internal Error",
            503: "Service Unavailable"}  # fmt: skip


@dataclasses.dataclass
class Fault:
    action: str
    method: str | None = None
    path: re.Pattern | None = None
    times: int | None = None
    hits: int = 0

    def matches(self, method: str, path: str) -> bool:
        if self.times is not None and self.hits >= self.times:
            return False
        if self.method is not None and method != self.method:
            return False
        return self.path is None or self.path.search(path) is not None


class _Server(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        """A client that closed its connection (a keep-alive one it no longer needs, or a
        request it gave up on) is no error of the proxy's: not printed."""


class FaultProxy:
    def __init__(self, upstream_url: str):
        parsed = urllib.parse.urlparse(upstream_url)
        self.upstream = (parsed.hostname, parsed.port)
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, str]] = []
        self.times: dict[str, float] = {}
        self._lock = threading.Lock()
        self._release = threading.Event()
        self._server: _Server | None = None
        self.url = ""

    # ---------------------------------------------------------------- life
    def start(self) -> FaultProxy:
        proxy = self

        class Handler(_Handler):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def close(self) -> None:
        self._release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # ---------------------------------------------------------------- faults
    def add(self, action: str, method: str | None = None, path: str | None = None,
            times: int | None = None) -> Fault:  # fmt: skip
        fault = Fault(action, method, re.compile(path) if path else None, times)
        with self._lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        """No more faults; stalled requests are let go (their connections closed)."""
        with self._lock:
            self.faults.clear()
        self._release.set()
        self._release = threading.Event()

    def first(self, action: str) -> float | None:
        return self.times.get(action)

    def _fault_for(self, method: str, path: str) -> str | None:
        with self._lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.hits += 1
                    self.times.setdefault(fault.action, time.monotonic())
                    self.seen.append((method, path, fault.action))
                    return fault.action
            self.seen.append((method, path, "forward"))
        return None


class _Handler(BaseHTTPRequestHandler):
    owner: FaultProxy
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _handle(self) -> None:
        body = self._body()
        action = self.owner._fault_for(self.command, self.path)
        if action is None:
            self._forward(body)
        elif action == "stall":
            self.owner._release.wait()
            self.close_connection = True
        elif action == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
        else:
            code = int(action)
            reason = _REASONS.get(code, "Error")
            data = json.dumps(
                {"error": {"code": code, "message": f"{reason} (injected by the test proxy)",
                           "errors": [{"message": reason, "reason": reason.lower()}]}}
            ).encode()  # fmt: skip
            self.send_response(code, reason)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

    def _forward(self, body: bytes) -> None:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        upstream = http.client.HTTPConnection(*self.owner.upstream, timeout=600)
        try:
            upstream.request(self.command, self.path, body=body, headers=headers)
            response = upstream.getresponse()
            # The emulator names itself in objects' mediaLink (the Host an object was uploaded
            # through): the client is sent back through the proxy.
            upstream_url = "http://{}:{}".format(*self.owner.upstream).encode()
            data = response.read().replace(upstream_url, self.owner.url.encode())
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in _HOP_BY_HOP and key.lower() not in ("server", "date"):
                    self.send_header(key, value.replace(upstream_url.decode(), self.owner.url))
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            upstream.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle
