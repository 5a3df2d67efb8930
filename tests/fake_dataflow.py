"""A stand-in for the Dataflow API on a loopback port: it takes a job's creation and records it.

  python -m tests.fake_dataflow --port P --record FILE [--job_id ID]

Beam's DataflowRunner, given `--dataflow_endpoint http://127.0.0.1:P --no_auth`, sends it the
job request that Dataflow would get (after staging the job's files, on a GCS emulator). The
request is written to FILE as it came (JSON), and the job is answered as created with id ID,
then, when asked, as done: nothing ran (the CLI reports 0 subgraphs). scripts/test_docker.sh uses it to drive
scripts/launch_dataflow.sh's docker launcher, offline, up to the job submission.
"""

from __future__ import annotations

import argparse
import json
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

JOBS = re.compile(r"^/v1b3/projects/(?P<project>[^/]+)/locations/(?P<region>[^/]+)/jobs")


def make_handler(record: str, job_id: str):
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _job(self, match, state: str) -> dict:
            return {
                "id": job_id,
                "projectId": match.group("project"),
                "location": match.group("region"),
                "name": self.server.job_name,
                "type": "JOB_TYPE_BATCH",
                "currentState": state,
            }

        def do_POST(self):  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            match = JOBS.match(self.path)
            if not match:
                self._reply(404, {"error": {"code": 404, "message": self.path}})
                return
            request = json.loads(body or b"{}")
            with open(record, "w") as f:
                json.dump({"path": self.path, "job": request}, f)
            self.server.job_name = request.get("name", "")
            self._reply(200, self._job(match, "JOB_STATE_PENDING"))

        def do_GET(self):  # noqa: N802
            match = JOBS.match(self.path)
            if not match:
                self._reply(404, {"error": {"code": 404, "message": self.path}})
            elif "/messages" in self.path:
                self._reply(200, {"jobMessages": []})
            elif "/metrics" in self.path:
                self._reply(200, {"metrics": []})
            else:
                self._reply(200, self._job(match, "JOB_STATE_DONE"))

        def log_message(self, format, *args):  # noqa: A002 - http.server's signature
            print(f"fake_dataflow: {self.command} {self.path}", flush=True)

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", required=True)
    parser.add_argument("--job_id", default="2000-01-01_00_00_00-1")
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args.record, args.job_id))
    server.job_name = ""
    print(f"fake_dataflow: listening on {args.host}:{args.port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
