"""Measures the gs:// deadline: how long after the server stops answering a run's one line
comes, for each BEAM_GRAPH_GCS_RETRY_S.

Starts gcp-storage-emulator (tests/gcs_emulator.py) and the fault-injecting proxy in front of it
(tests/gcs_fault_proxy.py), uploads a small MAG-shaped graph, and runs `sample` into the bucket
with each runner. Once the run has written (its manifest with --runner InMemory, a first part
of its pipeline's output with the Beam runner), the server stops: `sigstop` stops the emulator
process, `stall` makes the proxy leave every request unanswered. Records the seconds from the
stop to the error line and to the run's exit, and the line.

  python scripts/bench_gcs_deadline.py [--settings 5,10,30] [--faults sigstop,stall]
      [--runners inmemory,beam] [--wait_s 600] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.gcs_emulator import GcsEmulator  # noqa: E402
from tests.gcs_fault_proxy import FaultProxy  # noqa: E402
from tests.test_gcs_faults import run_until_stopped  # noqa: E402

AFTER = {"inmemory": r"/\.beam_graph_manifest\.json$", "beam": r"/\.temp-samples-[^/]+/graph/part-"}
RUNNER_FLAGS = {"inmemory": ["--runner", "InMemory"], "beam": []}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default="5,10,30")
    parser.add_argument("--faults", default="sigstop,stall")
    parser.add_argument("--runners", default="inmemory,beam")
    parser.add_argument("--wait_s", type=float, default=600)
    parser.add_argument("--out")
    args = parser.parse_args()
    graph = Path(tempfile.mkdtemp(prefix="bench-gcs-deadline-"))
    subprocess.run(
        [sys.executable, "-m", "pipelines.generate", "--num_papers", "100", "--output_dir",
         str(graph), "--format", "parquet", "--num_shards", "2", "--write_spec"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True, capture_output=True,
    )  # fmt: skip
    emulator = GcsEmulator().start()
    proxy = FaultProxy(emulator.url).start()
    rows = []
    try:
        remote = emulator.upload_folder(graph, "in/graph")
        for setting in args.settings.split(","):
            for fault in args.faults.split(","):
                for runner in args.runners.split(","):
                    out = f"bench/{fault}-{runner}-{setting}"
                    if fault == "sigstop":
                        server, env = emulator.url, emulator.env(BEAM_GRAPH_GCS_RETRY_S=setting)
                        stop = functools.partial(os.kill, emulator.process.pid, signal.SIGSTOP)
                        resume = functools.partial(os.kill, emulator.process.pid, signal.SIGCONT)
                    else:
                        server = proxy.url
                        env = emulator.env(STORAGE_EMULATOR_HOST=proxy.url,
                                           BEAM_GRAPH_GCS_RETRY_S=setting)  # fmt: skip
                        stop, resume = (lambda: proxy.add("stall")), proxy.clear
                    code, lines = run_until_stopped(
                        ["pipelines.sample", "--graph_schema", remote, "--sampling_spec",
                         f"{remote}/sampling_spec.pbtxt", "--output_samples",
                         emulator.gs(f"{out}/samples@2"), *RUNNER_FLAGS[runner]],
                        env, emulator, stop, resume, out, AFTER[runner], args.wait_s,
                    )  # fmt: skip
                    shown = [(at, line) for at, line in lines if line is not None]
                    row = {
                        "setting_s": float(setting), "fault": fault, "runner": runner,
                        "exit": code, "line_s": round(shown[0][0], 1) if shown else None,
                        "exit_s": round(lines[-1][0], 1), "lines": len(shown),
                        "line": shown[0][1].replace(server, "SERVER") if shown else None,
                    }  # fmt: skip
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        proxy.close()
        emulator.close()
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
