"""A disk that fills up during a run: one line naming the path, exit 2, nothing left but the
manifest (no shard; no partition folder, node id table, DGL config or report).

The output folder is a 64 KiB tmpfs mounted in a private mount namespace (`unshare -Urm`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


# The full output is about 3.5 MiB: 64 KiB fills up with the part files, 4500 KiB while the
# parts (all written) are concatenated into the two shards (the `topology` placement writes a
# part per chunk; the `worker` placement one per shard, which is renamed: see below).
@pytest.mark.parametrize("size, samples, failing, placement", [
    ("64k", "s", ".temp-samples-", "worker"),
    ("4500k", "s@2", "s-0000", "topology"),
    ("4500k", "s@2", "s-0000", "worker"),  # 32 buckets in 2 shards: a part a bucket, copied
])  # fmt: skip
def test_sample_stage_on_a_full_disk_is_one_line(tmp_path, size, samples, failing, placement):
    proc, disk = _sample_on_tmpfs(tmp_path, size, samples, placement)
    lines = proc.stdout.strip().splitlines()
    assert "rc=2" in lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert lines[-1] == ".beam_graph_manifest.json"  # no shard, no temp folder
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: cannot write the output {disk}/out/{failing}"), err
    assert "no space left on device" in err and "Traceback" not in proc.stderr


def test_the_worker_placement_needs_the_disk_of_its_output_once(tmp_path):
    """With as many buckets as shards, each shard's records are written once, as one part
    that becomes the shard by a rename: the 3.5 MiB output fits 4500 KiB, where a copy of the
    parts into the shards does not (the case above, and `worker` with 32 buckets)."""
    proc, disk = _sample_on_tmpfs(tmp_path, "4500k", "s@2", "worker --num_buckets 2")
    lines = proc.stdout.strip().splitlines()
    assert "rc=0" in lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    sizes = dict(line.split()[::-1] for line in lines[lines.index("rc=0") + 1 :] if " " in line)
    sizes.pop("total", None)
    shards = [f"{disk}/out/s-0000{i}-of-00002" for i in range(2)]
    assert sorted(sizes) == shards, lines  # the tmpfs is gone after the run: sizes by `wc -c`
    total = sum(int(sizes[shard]) for shard in shards)
    assert total > 4500 * 1024 / 2, total  # the parts and a copy of them would not fit


def _sample_on_tmpfs(tmp_path, size: str, samples: str, placement: str):
    schema = tmp_path / "graph"
    spec = schema / "sampling_spec.pbtxt"
    subprocess.run([sys.executable, "-m", "pipelines.generate", "--num_papers", "300",
                    "--output_dir", str(schema), "--write_spec"],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f'mount -t tmpfs -o size={size} tmpfs "{disk}" && "{sys.executable}" -m pipelines.sample '
        f'--graph_schema "{schema}" --sampling_spec "{spec}" --output_samples "{disk}/out/{samples}" '
        f'--graph_placement {placement} --progress_interval 0; echo "rc=$?"; '
        f'wc -c "{disk}"/out/s-0* 2>/dev/null; ls -A "{disk}/out"'
    )
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    return proc, disk


@pytest.fixture(scope="module")
def mag_schema(tmp_path_factory):
    schema = tmp_path_factory.mktemp("mag") / "graph"
    subprocess.run([sys.executable, "-m", "pipelines.generate", "--num_papers", "300",
                    "--output_dir", str(schema), "--write_spec"],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    return schema


# The full output is about 800 KiB: 64 KiB fills up with the node id tables (node_ids/), 400 KiB
# with the part files (part<i>/graph.dgl).
@pytest.mark.parametrize("size, failing", [("64k", "node_ids/"), ("400k", "part")])
def test_partition_stage_on_a_full_disk_is_one_line(mag_schema, tmp_path, size, failing):
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (
        f'mount -t tmpfs -o size={size} tmpfs "{disk}" && "{sys.executable}" -m '
        f'pipelines.partition --graph_schema "{mag_schema}" --output_dir "{disk}/out" '
        f'--graph_name g --num_parts 2; echo "rc=$?"; cd "{disk}/out" && find . -mindepth 1'
    )
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert "rc=2" in lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    # No g.json, cut_report.json, part folder or node id table: only the manifest.
    assert lines[lines.index("rc=2") + 1 :] == ["./.beam_graph_manifest.json"]
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: cannot write the output {disk}/out/{failing}"), err
    assert "no space left on device" in err and "Traceback" not in proc.stderr


def full_disk_run(tmp_path, command: str, size: str | None = None) -> list[str]:
    """`python -m command` (OUT: its output folder) on a tmpfs of `size`, or, without one, on a
    tmpfs one page (4 KiB) smaller than a complete run uses: the disk fills near the run's end.
    Checks the one line; returns the files left."""
    disk = tmp_path / "disk"
    disk.mkdir()
    run = f'"{sys.executable}" -m {command.replace("OUT", f"{disk}/out")}'
    if size is None:
        size = "$(($used - 4))k"
        script = (f'mount -t tmpfs -o size=16m tmpfs "{disk}" && {run} >/dev/null 2>&1 && '
                  f'used=$(df -k --output=used "{disk}" | tail -1) && umount "{disk}" && ')  # fmt: skip
    else:
        script = ""
    script += (f'mount -t tmpfs -o size={size} tmpfs "{disk}" && {run}; echo "rc=$?"; '
               f'cd "{disk}/out" && find . -mindepth 1 | sort')  # fmt: skip
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)  # fmt: skip
    lines = proc.stdout.strip().splitlines()
    assert "rc=2" in lines, proc.stdout[-2000:] + proc.stderr[-3000:]
    err = proc.stderr.strip().splitlines()[-1]
    assert err.startswith(f"error: cannot write the output {disk}/out/"), err
    assert "no space left on device" in err and "Traceback" not in proc.stderr, proc.stderr
    return lines[lines.index("rc=2") + 1 :]


# InMemory: the shard writer (64k), then near the run's end (the shards' last bytes, the summary).
@pytest.mark.parametrize("size", ["64k", None])
def test_in_memory_sample_on_a_full_disk_is_one_line(mag_schema, tmp_path, size):
    spec = mag_schema / "sampling_spec.pbtxt"
    command = (f'pipelines.sample --graph_schema "{mag_schema}" --sampling_spec "{spec}" '
               '--output_samples "OUT/s@2" --runner InMemory --progress_interval 0')  # fmt: skip
    assert full_disk_run(tmp_path, command, size) == ["./.beam_graph_manifest.json"]
