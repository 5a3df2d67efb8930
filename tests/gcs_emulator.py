"""A real GCS JSON API server on a loopback port: `gcp-storage-emulator`, as a process.

`GcsEmulator` starts `python -m gcp_storage_emulator start` on a free 127.0.0.1 port with a
temporary data folder and one bucket, waits until it answers, and stops it (`stop`); a test
can stop it mid-run (the server goes away) and start it again (`start`). `env()` is the
environment that sends gs:// to it (STORAGE_EMULATOR_HOST) with no Google credentials, no
metadata server (a closed loopback port) and HOME in the temporary folder: a new user's
machine. Only loopback addresses are ever contacted.

The tests use its objects through the server's own API (`put`, `get`, `names`), not through
the code under test.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUCKET = "graphs"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def end_server(process: subprocess.Popen | None, log) -> None:
    """Stops a test server's process (SIGTERM, then SIGKILL after 10 s) and closes its log."""
    if process is not None and process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    if log is not None:
        log.close()


class GcsEmulator:
    def __init__(self, bucket: str = BUCKET):
        self.bucket = bucket
        self.folder = Path(tempfile.mkdtemp(prefix="gcs-emulator-"))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None

    # ---------------------------------------------------------------- process
    def start(self) -> GcsEmulator:
        (self.folder / "home").mkdir(exist_ok=True)
        self._log = open(self.folder / "emulator.log", "ab")  # noqa: SIM115 - closed in stop
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gcp_storage_emulator", "-d", str(self.folder / "data"),
             "start", "--host", "127.0.0.1", "--port", str(self.port),
             "--default-bucket", self.bucket],
            stdout=self._log, stderr=self._log, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                self._request("GET", f"/storage/v1/b/{self.bucket}")
                return self
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    log = (self.folder / "emulator.log").read_text(errors="replace")
                    raise RuntimeError(
                        f"gcp-storage-emulator did not start:\n{log[-3000:]}"
                    ) from None
                time.sleep(0.05)

    def stop(self) -> None:
        end_server(self.process, getattr(self, "_log", None))
        self.process = None

    def log_size(self) -> int:
        """Where the request log ends now (for `downloads(since=...)`)."""
        path = self.folder / "emulator.log"
        return path.stat().st_size if path.exists() else 0

    def downloads(self, since: int = 0) -> list[str]:
        """The object names whose bytes were read (GET ...?alt=media, or /download/...) since
        the log offset `since`, one entry per request."""
        with open(self.folder / "emulator.log", "rb") as f:
            f.seek(since)
            text = f.read().decode(errors="replace")
        pattern = re.compile(
            rf'"GET (?:/download)?/storage/v1/b/{re.escape(self.bucket)}/o/([^ ?"]+)\?[^ "]*alt=media'
        )
        return [urllib.parse.unquote(m.group(1)) for m in pattern.finditer(text)]

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def env(self, **extra: str) -> dict:
        """The environment of a CLI run against this server (see the module's docstring)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "CLOUDSDK_"))}
        home = self.folder / "home"
        env.update(
            STORAGE_EMULATOR_HOST=self.url,
            HOME=str(home),
            CLOUDSDK_CONFIG=str(home / "gcloud"),
            GCE_METADATA_HOST="127.0.0.1:9",
            GCE_METADATA_IP="127.0.0.1:9",
            NO_GCE_CHECK="True",
            PYTHONPATH=str(ROOT),
            TF_USE_LEGACY_KERAS="1",
            TF_CPP_MIN_LOG_LEVEL="2",
        )
        env.update(extra)
        return env

    # ---------------------------------------------------------------- objects
    def _request(self, method: str, path: str, data: bytes | None = None) -> bytes:
        request = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def gs(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}"

    def put(self, name: str, data: bytes) -> None:
        query = urllib.parse.urlencode({"uploadType": "media", "name": name})
        self._request("POST", f"/upload/storage/v1/b/{self.bucket}/o?{query}", data)

    def upload_folder(self, folder: Path, prefix: str) -> str:
        """Every file under `folder` as objects under `prefix/`; returns gs://bucket/prefix."""
        for path in sorted(Path(folder).rglob("*")):
            if path.is_file():
                self.put(f"{prefix}/{path.relative_to(folder).as_posix()}", path.read_bytes())
        return self.gs(prefix)

    def get(self, name: str) -> bytes:
        quoted = urllib.parse.quote(name, safe="")
        return self._request("GET", f"/storage/v1/b/{self.bucket}/o/{quoted}?alt=media")

    def names(self, prefix: str = "") -> list[str]:
        """The object names under `prefix`, sorted (every page)."""
        return sorted(self.sizes(prefix))

    def sizes(self, prefix: str = "") -> dict[str, int]:
        """{object name: size in bytes} under `prefix` (every page)."""
        out, token = {}, None
        while True:
            query = {"prefix": prefix}
            if token:
                query["pageToken"] = token
            listing = json.loads(
                self._request(
                    "GET", f"/storage/v1/b/{self.bucket}/o?" + urllib.parse.urlencode(query)
                )  # fmt: skip
            )
            out.update((item["name"], int(item["size"])) for item in listing.get("items", []))
            token = listing.get("nextPageToken")
            if not token:
                return out

    def download_folder(self, prefix: str, folder: Path) -> Path:
        """The objects under `prefix/` as files under `folder` (to compare with a local run)."""
        for name in self.names(prefix.rstrip("/") + "/"):
            target = Path(folder) / name[len(prefix.rstrip("/")) + 1 :]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.get(name))
        return Path(folder)
