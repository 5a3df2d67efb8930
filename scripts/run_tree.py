"""Run one command and report the CPU, memory and output of its whole process tree, as JSON.

    python scripts/run_tree.py LABEL OUT_GLOB CWD COMMAND...      (OUT_GLOB "-": no output size)

This process becomes a child subreaper (prctl PR_SET_CHILD_SUBREAPER, Linux), so every
descendant (runner, fork server, SDK workers) is reaped here, orphaned or not, and
getrusage(RUSAGE_CHILDREN) holds the CPU of all of them. Reports: wall; CPU-s (user + system)
of the tree; maxrss_mb, the largest single process; tree_peak_mb, the largest sum of RSS over
the tree, polled every 0.1 s (pages shared by processes count once per process); out_mb, the
bytes of the files OUT_GLOB matches (MB = 10^6 bytes) and out_mb per CPU-s; the CLI's `cpu:` and
`cost:` lines.
"""

import ctypes
import glob
import json
import os
import resource
import subprocess
import sys
import threading
import time

import psutil

PR_SET_CHILD_SUBREAPER = 36


def main(label: str, out_glob: str, cwd: str, cmd: list[str]) -> dict:
    ctypes.CDLL("libc.so.6").prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    me, peak_tree = psutil.Process(), 0
    while proc.poll() is None:
        total = 0
        for child in me.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.Error:
                pass
        peak_tree = max(peak_tree, total)
        time.sleep(0.1)
    wall = time.monotonic() - start
    deadline = time.monotonic() + 60  # reap descendants orphaned to this subreaper
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    reader.join(5)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = usage.ru_utime + usage.ru_stime
    out_mb = sum(os.path.getsize(f) for f in glob.glob(out_glob)) / 1e6 if out_glob != "-" else 0.0
    if proc.returncode:
        print("".join(lines)[-3000:], file=sys.stderr)
    return {
        "label": label,
        "rc": proc.returncode,
        "wall": round(wall, 2),
        "cpu": round(cpu, 2),
        "user": round(usage.ru_utime, 2),
        "sys": round(usage.ru_stime, 2),
        "maxrss_mb": round(usage.ru_maxrss / 1024),
        "tree_peak_mb": round(peak_tree / 2**20),
        "out_mb": round(out_mb, 1),
        "mb_per_cpu": round(out_mb / cpu, 1) if out_mb else None,
        "cli_cpu": [line.strip() for line in lines if line.strip().startswith("cpu:")],
        "cli_cost": [line.strip() for line in lines if line.strip().startswith("cost:")],
        "load": os.getloadavg()[0],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:])), flush=True)
