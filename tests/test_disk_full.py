"""A disk that fills up during a run: one line naming the path, exit 2, no shards left.

The output folder is a 64 KiB tmpfs mounted in a private mount namespace (`unshare -Urm`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_sample_stage_on_a_full_disk_is_one_line(tmp_path):
    schema = tmp_path / "graph"
    spec = schema / "sampling_spec.pbtxt"
    subprocess.run([sys.executable, "-m", "pipelines.generate", "--num_papers", "300",
                    "--output_dir", str(schema), "--write_spec"],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f'mount -t tmpfs -o size=64k tmpfs "{disk}" && "{sys.executable}" -m pipelines.sample '
        f'--graph_schema "{schema}" --sampling_spec "{spec}" --output_samples "{disk}/out/s" '
        f'--progress_interval 0; echo "rc=$?"; ls -A "{disk}/out"'
    )
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert "rc=2" in lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert lines[-1] == ".beam_graph_manifest.json"  # no shard, no temp folder
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: cannot write the output {disk}/out/"), err
    assert "no space left on device" in err and "Traceback" not in proc.stderr
