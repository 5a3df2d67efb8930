"""The compiled kernels' cache is a cache: a damaged cache file, a cache on a full file system,
a compile lock held by a stuck process and NUMBA_DISABLE_JIT=1 each give a run that ends well,
with the same records, and at most one warning line (sampler/jit.py, sampler/jit_cache.py).

Each case runs a copy of the package whose kernel cache (`__pycache__` beside the source) is
copied from this checkout's, warm, and then damaged: the copy's runs load what they can and
compile only what was damaged (a second or two), not every kernel.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "cites" input_op_names: "seed" edge_set_name: "cites" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "top" input_op_names: "cites" edge_set_name: "cites" sample_size: 2
  strategy: TOP_K }
sampling_ops { op_name: "weighted" input_op_names: "seed" edge_set_name: "cites"
  sample_size: 2 strategy: RANDOM_WEIGHTED }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written"
  sample_size: 2 strategy: RANDOM_UNIFORM }
"""
ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "PATH": os.environ["PATH"]}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """A small graph (weighted, so that every strategy runs), its spec, and the records of a
    run of this checkout with its warm cache."""
    folder = tmp_path_factory.mktemp("graph")
    subprocess.run([sys.executable, "-m", "pipelines.generate", "--num_papers", "60",
                    "--output_dir", str(folder), "--edge_weights"],
                   check=True, cwd=ROOT, capture_output=True)  # fmt: skip
    (folder / "spec.pbtxt").write_text(SPEC)
    # the checkout's cache warm (the suite's first compile, if no test compiled before)
    subprocess.run([sys.executable, "-m", "sampler.jit_warm"], check=True, cwd=ROOT,
                   capture_output=True, env={**os.environ, **ENV})  # fmt: skip
    want = run(ROOT, folder, folder / "want", "InMemory")
    assert want.returncode == 0, want.stderr[-3000:]
    return folder


def run(site: Path, graph: Path, out: Path, runner: str, env: dict | None = None):
    command = [
        sys.executable, "-m", "pipelines.sample", "--graph_schema", str(graph),
        "--sampling_spec", str(graph / "spec.pbtxt"), "--output_samples", str(out / "s"),
        "--runner", runner, "--progress_interval", "0",
    ]  # fmt: skip
    env = {**ENV, "PYTHONPATH": str(site), **(env or {})}
    return subprocess.run(command, cwd=site, env=env, capture_output=True, text=True, timeout=240)


def copy_site(dest: Path) -> Path:
    """A copy of the package with this checkout's (warm) kernel cache."""
    for package in ("sampler", "pipelines"):
        shutil.copytree(ROOT / package, dest / package, ignore=shutil.ignore_patterns("*.lock"))
    return dest


def kernel_files(site: Path, pattern: str) -> list[Path]:
    """The sampling kernels' cache files (every run samples with them)."""
    files = sorted((site / "sampler" / "sample" / "__pycache__").glob(f"sample_jit.{pattern}"))
    assert files, "the checkout's kernel cache is empty"
    return files


def check(proc, graph: Path, out: Path, warnings: int | range) -> list[str]:
    """The run ended well, its records are the checkout's, it said `warnings` warning lines
    (a range: the Beam runner's processes each say it once when they meet it at once)."""
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert (out / "s").read_bytes() == (graph / "want" / "s").read_bytes()
    said = [line for line in proc.stderr.splitlines() if line.startswith("warning: ")]
    assert len(said) in (warnings if isinstance(warnings, range) else [warnings]), proc.stderr
    assert len(set(said)) <= 1, said
    return said


@pytest.mark.parametrize("damage", ["truncated index", "garbage data"])
def test_a_damaged_cache_file_is_compiled_again(graph, tmp_path, damage):
    site = copy_site(tmp_path / "site")
    if damage == "truncated index":
        for path in kernel_files(site, "*.nbi"):
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        for path in kernel_files(site, "*.nbc"):
            path.write_bytes(os.urandom(64))
    said = check(run(site, graph, tmp_path / "out", "InMemory"), graph, tmp_path / "out", 1)
    assert "kernel cache" in said[0] and "compiled again" in said[0], said
    # the files were written again: the next run loads them without a word
    check(run(site, graph, tmp_path / "again", "InMemory"), graph, tmp_path / "again", 0)


def test_a_damaged_cache_file_on_the_beam_runner(graph, tmp_path):
    site = copy_site(tmp_path / "site")
    for path in kernel_files(site, "*.nbc"):
        path.write_bytes(b"\x80\x05garbage")
    out = tmp_path / "out"
    said = check(run(site, graph, out, "DirectRunner"), graph, out, range(1, 4))
    assert "kernel cache" in said[0] and "compiled again" in said[0], said


@pytest.mark.parametrize("runner", ["InMemory", "DirectRunner"])
def test_a_cache_on_a_full_file_system_is_bypassed(graph, tmp_path, runner):
    """The package and its cache on a tmpfs that is full; one kernel's cache files are gone, so
    the run compiles it and cannot write it (ENOSPC)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    out = tmp_path / "out"
    script = (
        f'mount -t tmpfs -o size=48m tmpfs "{disk}" && cp -r "{ROOT}/sampler" "{ROOT}/pipelines"'
        f' "{disk}/" && rm -f "{disk}"/sampler/sample/__pycache__/sample_jit.*.nb? &&'
        f' (dd if=/dev/zero of="{disk}/fill" bs=64k 2>/dev/null; true) && df -k "{disk}" >&2 &&'
        f' cd "{disk}" && PYTHONPATH="{disk}" exec "{sys.executable}" -m pipelines.sample'
        f' --graph_schema "{graph}" --sampling_spec "{graph}/spec.pbtxt" --output_samples'
        f' "{out}/s" --runner {runner} --progress_interval 0'
    )
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    said = check(proc, graph, out, 1 if runner == "InMemory" else range(1, 4))
    assert "cannot write the kernel cache" in said[0], said
    assert "no space left on device" in said[0].lower(), said


def test_a_stuck_compile_lock_is_reported_and_bypassed(graph, tmp_path):
    """Another process holds the compile lock and is stopped (a stuck earlier run); the
    run's kernels are not cached, so it must compile: it waits, says so, compiles alone."""
    site = copy_site(tmp_path / "site")
    for path in kernel_files(site, "*.nb?"):
        path.unlink()
    locks = [str(p / ".sampler-compile.lock") for p in (site / "sampler").rglob("__pycache__")]
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys, signal\n"
         "held = [open(p, 'a') for p in sys.argv[1:]]\n"
         "[fcntl.flock(h, fcntl.LOCK_EX) for h in held]\n"
         "print('held', flush=True)\nos.kill(os.getpid(), signal.SIGSTOP)\n", *locks],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        out = tmp_path / "out"
        try:
            proc = run(site, graph, out, "InMemory", {"BEAM_GRAPH_COMPILE_WAIT_S": "2"})
        except subprocess.TimeoutExpired:
            pytest.fail("the run waited for the compile lock until the test's timeout")
        said = check(proc, graph, out, 1)
        assert "compile lock" in said[0] and "held for 2 s" in said[0], said
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


@pytest.mark.parametrize("runner", ["InMemory", "DirectRunner"])
def test_numba_disable_jit_runs_the_kernels_as_python(graph, tmp_path, runner):
    """NUMBA_DISABLE_JIT=1, what a numba user sets to debug a kernel: the same records."""
    out = tmp_path / "out"
    proc = run(ROOT, graph, out, runner, {"NUMBA_DISABLE_JIT": "1"})
    check(proc, graph, out, 0)


@pytest.mark.parametrize(
    "name, value",
    [("BEAM_GRAPH_COMPILE_WAIT_S", v) for v in ("abc", "nan", "inf", "-1")]
    + [("BEAM_GRAPH_GCS_RETRY_S", v) for v in ("abc", "nan", "0")],
)
def test_a_bad_seconds_setting_is_one_line(graph, tmp_path, name, value):
    """A setting of seconds that is not a finite number in its range is refused before the run
    does anything (it used to be a traceback where it was read, or a wait without end)."""
    proc = run(ROOT, graph, tmp_path / "out", "InMemory", {name: value})
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: {name}={value!r}: expected a number of seconds"), lines
    assert not (tmp_path / "out").exists()


def test_the_seconds_settings_accepted():
    """Unset or empty: the default; a number in range: itself; one parser for every setting
    (sampler/settings.py), also in `python -m sampler.jit_warm`."""
    from sampler import settings

    for name, spec in settings.SETTINGS.items():
        for text, want in (("", spec.default), (" ", spec.default), ("2.5", 2.5), ("7", 7.0)):
            os.environ[name] = text
            try:
                assert settings.seconds(name) == want, (name, text)
            finally:
                del os.environ[name]
    os.environ[settings.COMPILE_WAIT_S] = "0"  # never wait for the lock
    try:
        assert settings.seconds(settings.COMPILE_WAIT_S) == 0
    finally:
        del os.environ[settings.COMPILE_WAIT_S]
    proc = subprocess.run([sys.executable, "-m", "sampler.jit_warm"], cwd=ROOT, text=True,
                          env={**ENV, "BEAM_GRAPH_COMPILE_WAIT_S": "nan"}, capture_output=True,
                          timeout=240)  # fmt: skip
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-3000:]
    assert proc.stderr.startswith("error: BEAM_GRAPH_COMPILE_WAIT_S='nan': expected"), proc.stderr


def test_a_read_only_install_compiles_once_per_run_and_says_why(graph, tmp_path):
    """The package on a read-only mount, no writable user cache: the run's two SDK worker
    processes share one temporary cache (the run's CLI makes it), the run says once that the
    kernels compile and why, and nothing is left in TMPDIR, also when the run is ended by a
    SIGTERM."""
    site = tmp_path / "site"
    for package in ("sampler", "pipelines"):  # no kernel cache: the install was not warmed
        shutil.copytree(ROOT / package, site / package,
                        ignore=shutil.ignore_patterns("*.nbi", "*.nbc", "*.lock"))  # fmt: skip
    (site / "home").mkdir()
    tmp, out = tmp_path / "tmp", tmp_path / "out"
    tmp.mkdir()
    script = (
        f'mount --bind "{site}" "{site}" && mount -o remount,bind,ro "{site}" && cd "{site}" &&'
        f' HOME="{site}/home" TMPDIR="{tmp}" PYTHONPATH="{site}" exec "{sys.executable}" -m'
        f' pipelines.sample --graph_schema "{graph}" --sampling_spec "{graph}/spec.pbtxt"'
        f' --output_samples "{out}/s" --runner DirectRunner --progress_interval 0'
        " --direct_running_mode=multi_processing --direct_num_workers=2"
    )
    proc = subprocess.run(["unshare", "-Urm", "sh", "-c", script], env=ENV, capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    check(proc, graph, out, 0)
    said = [line for line in proc.stderr.splitlines() if "compiling the kernels" in line]
    assert len(said) == 1, proc.stderr[-3000:]
    assert "kernel cache" in said[0] and "is read-only" in said[0], said
    assert "python -m sampler.jit_warm" in said[0], said
    ready = [line for line in proc.stderr.splitlines() if "kernels ready" in line]
    assert len(ready) <= 1, ready  # one process compiled; the other loaded what it wrote
    assert not list(tmp.iterdir()), list(tmp.iterdir())
    # a SIGTERM while a worker compiles: the run ends in its one line, its cache removed
    shutil.rmtree(out)
    run = subprocess.Popen(["unshare", "-Urm", "sh", "-c", script], env=ENV, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        while not list(tmp.glob("sampler-numba-*/.sampler-compile.lock")):
            assert run.poll() is None, run.communicate()[1][-3000:]
            time.sleep(0.05)
        run.send_signal(signal.SIGTERM)
        _, err = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err[-3000:]
    assert not list(tmp.iterdir()), list(tmp.iterdir())


LOOKUP = (
    "import json, numpy as np\n"
    "from sampler.jit_loader import kernels\n"
    "m = kernels('sampler.partition.lookup_jit')\n"
    "found = m.positions(np.array([3, 5], np.uint64), np.array([5], np.uint64), 1)\n"
    "print(json.dumps([found.tolist(), sum(m.positions.stats.cache_misses.values())]))\n"
)


def test_a_cache_built_for_another_cpu_is_compiled_and_said(tmp_path):
    """The package's kernel cache is warm for this host's CPU; a process that compiles for
    another (NUMBA_CPU_NAME=generic: a cache built on one machine, run on another) finds the
    same files but no machine code for its CPU: it compiles, says so once, and caches it, so
    that the next such process loads it, silent; the host's code stays. (A copy of the
    package whose one kernel module is the smallest, so that it compiles in a second.)"""
    site = copy_site(tmp_path / "site")
    for module in (site / "sampler").rglob("*_jit.py"):
        if module.name != "lookup_jit.py":
            module.unlink()

    def child(cpu: str | None) -> tuple[list, str]:
        env = {**ENV, "PYTHONPATH": str(site), **({"NUMBA_CPU_NAME": cpu} if cpu else {})}
        proc = subprocess.run([sys.executable, "-c", LOOKUP], cwd=site, env=env, text=True,
                              capture_output=True, timeout=240)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr

    host, said = child(None)
    assert host[1] == 0 and "compiling" not in said, (host, said)  # the checkout's cache
    generic, said = child("generic")
    assert generic == [host[0], 1], (host, generic)  # compiled, for generic
    lines = [line for line in said.splitlines() if "compiling the kernels" in line]
    assert len(lines) == 1, said
    for cpu in ("generic", None):  # both are in the cache now
        again, said = child(cpu)
        assert again == [host[0], 0] and "compiling" not in said, (cpu, again, said)
