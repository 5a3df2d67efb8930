"""Benchmark: the same sample and partition runs from gs:// (a GCS emulator on a loopback port)
and from local disk, on one machine.

Starts gcp-storage-emulator (tests/gcs_emulator.py) with a temporary data folder, generates a
MAG-shaped graph, uploads it, and runs each command twice: inputs and outputs on local disk,
then on gs://. Records per run: wall seconds, CPU seconds of the CLI's process tree (getrusage
of the reaped run), CPU seconds of the emulator process (/proc/PID/stat) and the bytes the
run wrote (its output folder or objects).

  python scripts/bench_gcs.py --num_papers 50000 --feature_dim 128 --input_seeds 10000 \\
      [--out docs/bench_gcs.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.gcs_emulator import GcsEmulator  # noqa: E402


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(cmd: list[str], env: dict, emulator: GcsEmulator) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(emulator.process.pid)
    start = time.time()
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.time() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"failed: {' '.join(cmd)}\n{result.stderr[-3000:]}")
    return {
        "seconds": round(seconds, 2),
        "tree_cpu_seconds": round(
            after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2
        ),
        "emulator_cpu_seconds": round(cpu_seconds(emulator.process.pid) - server_before, 2),
    }


def local_bytes(folder: str) -> int:
    return sum(
        os.path.getsize(os.path.join(d, n)) for d, _, names in os.walk(folder) for n in names
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num_papers", type=int, default=50000)
    parser.add_argument("--feature_dim", type=int, default=128)
    parser.add_argument("--input_seeds", type=int, default=10000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", default="", help="comma-separated run names")
    parser.add_argument("--out")
    args = parser.parse_args()
    py = sys.executable
    work = tempfile.mkdtemp(prefix="bench-gcs-")
    graph = os.path.join(work, "graph")
    subprocess.run(
        [py, "-m", "pipelines.generate", "--num_papers", str(args.num_papers), "--feature_dim",
         str(args.feature_dim), "--output_dir", graph, "--format", "parquet", "--num_shards",
         "4", "--write_spec"],
        cwd=ROOT, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT),
    )  # fmt: skip
    seeds = os.path.join(graph, "seeds.csv")
    with open(seeds, "w") as f:
        f.write("#id\n" + "".join(f"p{i}\n" for i in range(args.input_seeds)))
    emulator = GcsEmulator().start()
    rows = []
    try:
        remote = emulator.upload_folder(graph, "graph")
        env = emulator.env(TMPDIR=work)
        for where, src, out in (("local", graph, os.path.join(work, "out")),
                                ("gs", remote, emulator.gs("out"))):  # fmt: skip
            runs = {
                "sample InMemory": [
                    "pipelines.sample", "--runner", "InMemory",
                    "--output_samples", f"{out}/sample-mem/samples@4"],
                f"sample {args.workers} workers": [
                    "pipelines.sample", "--direct_running_mode=multi_processing",
                    f"--direct_num_workers={args.workers}", "--graph_placement", "worker",
                    "--output_samples", f"{out}/sample-beam/samples@4"],
                "partition InMemory lp": [
                    "pipelines.partition", "--runner", "InMemory", "--part_method", "lp",
                    "--graph_name", "g", "--num_parts", "2", "--output_dir", f"{out}/part-mem"],
            }  # fmt: skip
            for name, cmd in runs.items():
                if args.only and name not in args.only.split(","):
                    continue
                cmd = [py, "-m", *cmd, "--graph_schema", src]
                if cmd[2] == "pipelines.sample":
                    cmd += ["--sampling_spec", f"{src}/sampling_spec.pbtxt",
                            "--input_seeds", f"{src}/seeds.csv"]  # fmt: skip
                row = {"run": name, "where": where, **run(cmd, env, emulator)}
                folder = cmd[cmd.index("--output_samples") + 1].rsplit("/", 1)[0] if (
                    "--output_samples" in cmd) else cmd[cmd.index("--output_dir") + 1]  # fmt: skip
                if where == "local":
                    row["bytes_written"] = local_bytes(folder)
                else:
                    prefix = folder[len(emulator.gs("")) :]
                    row["bytes_written"] = sum(emulator.sizes(prefix + "/").values())
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        emulator.close()
        subprocess.run(["rm", "-rf", work], check=False)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "runs": rows}, f, indent=1)


if __name__ == "__main__":
    main()
