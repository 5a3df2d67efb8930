"""Benchmark at ogbn-mag's size: the build, 50k seeds and (optionally) every paper, InMemory and Beam.

Generates the ogbn-mag-sized graph once (`pipelines.generate --num_papers 736389
--feature_dim 128 --format parquet --num_shards 4 --write_spec`: 1,943,743 nodes, 20.5M edges,
490 MB of Parquet) under WORK_DIR/graph, then runs `pipelines.sample` with the MAG spec and
`--output_samples ...@8`:

  build     --runner InMemory, 10 seeds: what reading and building the graph costs
  inmemory  --runner InMemory, --seeds seeds (every 14th paper by default)
  worker    --graph_placement worker with --workers SDK worker processes, the same seeds
  all_inmemory, all_worker   every paper a seed (736,389 subgraphs, ~119 GB of records; see
            --slices: the seeds in slices, each slice's output removed before the next)

Each run is measured from outside (this process is a child subreaper, so every process of the
run is reaped here): wall; CPU seconds of the whole tree (getrusage of the reaped run) and of
each process (/proc/PID/stat, polled, and the runner's own figures in run_summary.json); peak
RSS of the largest process and of the tree; peak PSS of the tree; MB of records written (10^6
bytes) per CPU-second and subgraphs per second; the CPU of each stage (InMemory:
run_summary.json's `stages`, read / build / sample / encode / write; Beam: its `stage_cpu`,
runner and SDK workers apart); the load average before and after. Outputs are removed after
each run (a 50k run writes ~10 GB); with --digest the records' SHA-256 is kept, so that runs
of two checkouts can be checked for the same bytes.

  python scripts/bench_ogbn.py                               # build, inmemory, worker; this tree
  python scripts/bench_ogbn.py --checkout /tmp/base --checkout . --repeat 2 --digest
  python scripts/bench_ogbn.py --runs all_inmemory --slices 8 --dd_mb 8192
  python scripts/bench_ogbn.py --report                      # the table of --out again

With several --checkout the runs alternate (A B, then B A on the next repeat), so that a load
that changes during the session falls on both. Each checkout runs with its own .venv when it
has one (else this interpreter), with its compiled kernels warmed first (not measured).
--dd_mb N also measures the disk: N MB written by `dd` with and without fdatasync, in the
same session. Results are appended to --out (JSON, one record per run) and printed as a table.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import resource
import shutil
import subprocess
import sys
import time

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PR_SET_CHILD_SUBREAPER = 36
PAPERS = 736389
GENERATE = ["--format", "parquet", "--num_shards", "4", "--write_spec"]
FEATURE_DIM = 128
RECORD_KB = 162  # bytes of records per subgraph at this size (MAG spec, 128-dim), to size the disk
RUNS = ("build", "inmemory", "worker", "all_inmemory", "all_worker")
STAGES = ("read", "build", "seeds", "sample", "encode", "write", "other")


def python_of(checkout: str) -> str:
    venv = os.path.join(checkout, ".venv", "bin", "python")
    return venv if os.path.exists(venv) else sys.executable


def environment(checkout: str) -> dict:
    return dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3",
                PYTHONPATH=checkout)  # fmt: skip


def make_graph(work_dir: str, papers: int = PAPERS, dim: int = FEATURE_DIM) -> str:
    graph = os.path.join(work_dir, "graph" if papers == PAPERS else f"graph{papers}")
    graph += "" if dim == FEATURE_DIM else f"_d{dim}"
    if not os.path.exists(os.path.join(graph, "sampling_spec.pbtxt")):
        print(f"generating the graph in {graph} ...", flush=True)
        subprocess.run([python_of(ROOT), "-m", "pipelines.generate", "--num_papers", str(papers),
                        "--feature_dim", str(dim), *GENERATE, "--output_dir", graph], cwd=ROOT,
                       env=environment(ROOT), check=True)  # fmt: skip
    return graph


def seed_file(graph: str, count: int, every: int, first: int = 0) -> str:
    """`count` papers, every `every`-th from paper `first` (p0, p14, p28, ...), as a CSV."""
    path = os.path.join(graph, f"seeds_every{every}_from{first}_{count}.csv")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            f.write("#id\n")
            f.writelines(f"p{first + every * i}\n" for i in range(count))
        os.replace(path + ".tmp", path)
    return path


def command(python: str, graph: str, out_dir: str, seeds: str | None, placement: str,
            workers: int, shards: int = 8) -> list[str]:  # fmt: skip
    cmd = [python, "-m", "pipelines.sample",
           "--graph_schema", os.path.join(graph, "graph_schema.pbtxt"),
           "--sampling_spec", os.path.join(graph, "sampling_spec.pbtxt"),
           "--output_samples", os.path.join(out_dir, f"samples@{shards}"), "--progress_interval", "0"]  # fmt: skip
    cmd += ["--input_seeds", seeds] if seeds else []
    if placement == "inmemory":
        return cmd + ["--runner", "InMemory"]
    return cmd + ["--graph_placement", "worker", "--direct_running_mode=multi_processing",
                  f"--direct_num_workers={workers}"]  # fmt: skip


def _proc_cpu(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().decode().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
    except (OSError, StopIteration):
        return 0


def role(proc: psutil.Process, runner_pid: int, procs: dict[int, dict]) -> str:
    """runner, fork_server (pipelines.runtime.sdk_fork_server: the runner's own fork, or a
    process of its own), sdk_worker (forked by it, or Beam's own worker command), fork_client
    (the tiny client per worker) or other."""
    if proc.pid == runner_pid:
        return "runner"
    try:
        line = " ".join(proc.cmdline())
        parent = proc.ppid()
    except psutil.Error:
        return "other"
    if "sdk_fork_client" in line:
        return "fork_client"
    if procs.get(parent, {}).get("role") == "fork_server" or "sdk_worker_main" in line:
        return "sdk_worker"
    if "sdk_fork_server" in line or parent == runner_pid:
        return "fork_server"
    return "other"


def measure(cmd: list[str], cwd: str, env: dict, log_path: str, timeout: float) -> dict:
    """Runs `cmd` and measures its process tree (see the module docstring)."""
    ctypes.CDLL("libc.so.6").prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load_before = os.getloadavg()
    start = time.monotonic()
    procs: dict[int, dict] = {}  # pid -> {role, cpu (last seen), rss (peak)}
    peak_tree = peak_pss = polls = 0
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        top = psutil.Process(proc.pid)
        stopped = None
        while proc.poll() is None:
            try:
                tree = [top, *top.children(recursive=True)]
            except psutil.Error:
                tree = []
            total = 0
            for p in tree:
                entry = procs.get(p.pid)
                if entry is None:
                    entry = procs[p.pid] = {"role": role(p, proc.pid, procs), "cpu": 0.0, "rss": 0}
                try:
                    rss = p.memory_info().rss
                except psutil.Error:
                    continue
                total += rss
                entry["rss"] = max(entry["rss"], rss)
                cpu = _proc_cpu(p.pid)
                entry["cpu"] = cpu if cpu is not None else entry["cpu"]
            peak_tree = max(peak_tree, total)
            if polls % 5 == 0:  # smaps is slower to read than the RSS
                peak_pss = max(peak_pss, sum(_pss(p.pid) for p in tree))
            polls += 1
            if time.monotonic() - start > timeout:
                stopped = f"timeout after {timeout:.0f} s"
                for p in tree[::-1]:
                    try:
                        p.kill()
                    except psutil.Error:
                        pass
                break
            time.sleep(0.2)
        proc.wait()
    wall = time.monotonic() - start
    deadline = time.monotonic() + 60  # reap what was orphaned to this subreaper
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            time.sleep(0.05)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_role: dict[str, dict] = {}
    for entry in procs.values():
        r = by_role.setdefault(entry["role"], {"count": 0, "cpu_s": 0.0, "peak_rss_mb": []})
        r["count"] += 1
        r["cpu_s"] = round(r["cpu_s"] + entry["cpu"], 2)
        r["peak_rss_mb"].append(round(entry["rss"] / 2**20))
    for r in by_role.values():
        r["peak_rss_mb"].sort(reverse=True)
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime - before.ru_utime - before.ru_stime, 2),
        "user_s": round(usage.ru_utime - before.ru_utime, 2),
        "sys_s": round(usage.ru_stime - before.ru_stime, 2),
        "largest_process_peak_rss_mb": round(
            max((e["rss"] for e in procs.values()), default=0) / 2**20
        ),  # fmt: skip
        "tree_peak_rss_mb": round(peak_tree / 2**20),
        "tree_peak_pss_mb": round(peak_pss / 2**20),
        "processes": by_role,
        "returncode": proc.returncode,
        "stopped": stopped,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
    }


def outputs(out_dir: str) -> list[str]:
    return sorted(os.path.join(out_dir, f) for f in os.listdir(out_dir)
                  if f.startswith("samples-"))  # fmt: skip


def digest(paths: list[str]) -> str:
    h = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(1 << 24):
                h.update(block)
    return h.hexdigest()


def summary_of(out_dir: str) -> dict:
    path = os.path.join(out_dir, "run_summary.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f)


def stage_cpu(summary: dict) -> dict[str, float]:
    """CPU-s per stage: InMemory's `stages`; a Beam run's `stage_cpu` summed into its phases."""
    if summary.get("stages"):
        return {k: v["cpu_s"] for k, v in summary["stages"].items()}
    stages = (summary.get("resources") or {}).get("stage_cpu") or {}
    out: dict[str, float] = {}
    for label, entry in stages.items():
        out[beam_phase(label)] = out.get(beam_phase(label), 0.0) + entry["runner_s"] + entry[
            "workers_s"]  # fmt: skip
    return {k: round(v, 2) for k, v in out.items()}


def stage_wall(summary: dict) -> dict[str, float]:
    """Wall seconds per stage, as stage_cpu sums them."""
    if summary.get("stages"):
        return {k: v["wall_s"] for k, v in summary["stages"].items()}
    stages = (summary.get("resources") or {}).get("stage_cpu") or {}
    out: dict[str, float] = {}
    for label, entry in stages.items():
        out[beam_phase(label)] = round(out.get(beam_phase(label), 0.0) + entry["wall_s"], 2)
    return out


def beam_phase(label: str) -> str:
    """The phase of a Beam stage label (pipelines.reporting.resources.stage_label): the
    `worker` placement's snapshot is read and built in one step (ReadGraph/Once + Build, counted
    as the build; the code before read its files apart: ReadGraph/Spread + Read); Sample/... samples, encodes and writes the part files; Write/... joins
    the parts into the shards."""
    if label.startswith("ReadGraph-Once"):
        return "build"
    if label.startswith("ReadGraph"):
        return "read"
    if label.startswith(("ReadSeeds", "Seeds")):
        return "seeds"
    if label.startswith(("Sample/", "Sample-")):
        return "sample"
    if label.startswith(("Write/", "Write-")):
        return "write"
    return "other"


def disk_speed(work_dir: str, mb: int) -> dict:
    """MB/s of `dd` writing `mb` MB to work_dir, with and without fdatasync (file removed)."""
    out = {}
    path = os.path.join(work_dir, "dd.bin")
    for name, flags in (("dd_mb_per_s", []), ("dd_fdatasync_mb_per_s", ["conv=fdatasync"])):
        start = time.monotonic()
        subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=8M", f"count={max(mb // 8, 1)}",
                        *flags], check=True, capture_output=True)  # fmt: skip
        out[name] = round(max(mb // 8, 1) * 8 * 2**20 / 1e6 / (time.monotonic() - start), 1)
        os.remove(path)
    out["dd_mb"] = mb
    return out


def run_one(args, name: str, checkout: str, graph: str) -> dict:
    placement = "worker" if name.endswith("worker") else "inmemory"
    if name == "build":
        slices = [seed_file(graph, 10, args.every)]
    elif name.startswith("all"):
        per = -(-args.papers // args.slices)
        slices = [seed_file(graph, min(per, args.papers - i * per), 1, i * per)
                  for i in range(args.slices)] if args.slices > 1 else [None]  # fmt: skip
    else:
        slices = [seed_file(graph, args.seeds, args.every)]
    seeds = args.papers if name.startswith("all") else (10 if name == "build" else args.seeds)
    # a paper's 128-dim features are about 3/4 of its records' bytes
    record_kb = RECORD_KB * (0.25 + 0.75 * args.feature_dim / FEATURE_DIM)
    need = seeds / len(slices) * record_kb * 1e3 * 1.1
    free = shutil.disk_usage(args.work_dir).free
    if free < need:
        raise SystemExit(f"{name}: {free / 1e9:.0f} GB free in {args.work_dir}, a slice needs "
                         f"{need / 1e9:.0f} GB (use --slices)")  # fmt: skip
    record = {"run": name, "checkout": os.path.abspath(checkout), "seeds": seeds,
              "slices": len(slices), "workers": args.workers if placement == "worker" else 0,
              "shards": args.shards, "feature_dim": args.feature_dim,
              "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
              "date": time.strftime("%Y-%m-%d %H:%M:%S")}  # fmt: skip
    parts = []
    for i, seeds_path in enumerate(slices):
        out_dir = os.path.join(args.work_dir, "out", f"{name}-{_short(checkout)}-{i}")
        shutil.rmtree(out_dir, ignore_errors=True)
        os.makedirs(out_dir)
        cmd = command(python_of(checkout), graph, out_dir, seeds_path, placement, args.workers,
                      args.shards)  # fmt: skip
        measured = measure(cmd, checkout, environment(checkout), out_dir + ".log", args.timeout)
        files = outputs(out_dir)
        measured["out_mb"] = round(sum(os.path.getsize(f) for f in files) / 1e6, 1)
        summary = summary_of(out_dir)
        measured["subgraphs"] = summary.get("counters", {}).get("subgraphs", 0)
        measured["stage_cpu"] = stage_cpu(summary)
        measured["stage_wall"] = stage_wall(summary)
        measured["resources"] = summary.get("resources")
        if args.digest:
            measured["digest"] = digest(files)
        if measured["returncode"] or measured["stopped"]:
            with open(out_dir + ".log") as f:
                measured["log_tail"] = f.read()[-2000:]
        if not args.keep:
            shutil.rmtree(out_dir, ignore_errors=True)
        parts.append(measured)
        record["command"] = " ".join(cmd)
    record.update(_add_slices(parts) if len(parts) > 1 else parts[0])
    return record


def _add_slices(parts: list[dict]) -> dict:
    total = {k: round(sum(p[k] for p in parts), 2)
             for k in ("wall_s", "cpu_s", "user_s", "sys_s", "out_mb", "subgraphs")}  # fmt: skip
    for k in ("largest_process_peak_rss_mb", "tree_peak_rss_mb", "tree_peak_pss_mb"):
        total[k] = max(p[k] for p in parts)
    for key in ("stage_cpu", "stage_wall"):
        stages: dict[str, float] = {}
        for p in parts:
            for k, v in p[key].items():
                stages[k] = round(stages.get(k, 0.0) + v, 2)
        total[key] = stages
    total["returncode"] = max(p["returncode"] for p in parts)
    total["stopped"] = next((p["stopped"] for p in parts if p["stopped"]), None)
    total["load_before"], total["load_after"] = parts[0]["load_before"], parts[-1]["load_after"]
    total["slice_runs"] = parts
    if all("digest" in p for p in parts):
        total["digest"] = digest_of_digests([p["digest"] for p in parts])
    return total


def digest_of_digests(digests: list[str]) -> str:
    return hashlib.sha256("".join(digests).encode()).hexdigest()


def _short(path: str) -> str:
    return os.path.basename(path.rstrip("/")) or path


def table(records: list[dict]) -> str:
    head = ["run", "checkout", "seeds", "wall s", "CPU s", "runner CPU", "SDK CPU", *STAGES,
            "largest RSS MB", "tree PSS MB", "out MB", "MB/CPU-s", "subgraphs/s", "load"]  # fmt: skip
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        res = r.get("resources") or {}
        stages = r.get("stage_cpu") or {}
        cells = [r["run"] + (f" ({r['workers']} SDK)" if r.get("workers") else ""),
                 _short(r["checkout"]), f"{r['seeds']:,}", f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}",
                 str(res.get("runner_cpu_seconds", "-")), str(res.get("sdk_workers_cpu_seconds") or "-"),
                 *[f"{stages[s]:.1f}" if s in stages else "-" for s in STAGES],
                 f"{r['largest_process_peak_rss_mb']:,}", f"{r['tree_peak_pss_mb']:,}",
                 f"{r['out_mb']:,.0f}", f"{r['out_mb'] / r['cpu_s']:.0f}" if r["cpu_s"] else "-",
                 f"{r['subgraphs'] / r['wall_s']:.0f}" if r["wall_s"] else "-",
                 f"{r['load_before'][0]:.1f}-{r['load_after'][0]:.1f}"]  # fmt: skip
        if r.get("stopped") or r.get("returncode"):
            cells[3] += f" (failed: {r.get('stopped') or r['returncode']})"
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def derived(records: list[dict]) -> list[str]:
    """The issue's ratios, per checkout: sampling + encoding + writing rate, worker / InMemory."""
    lines = []
    for checkout in dict.fromkeys(r["checkout"] for r in records):
        mine = [r for r in records if r["checkout"] == checkout and not r.get("returncode")]

        def best(name, mine=mine):
            runs = [r for r in mine if r["run"] == name]
            return min(runs, key=lambda r: r["cpu_s"]) if runs else None

        build, im, worker = best("build"), best("inmemory"), best("worker")
        if build and im and im["cpu_s"] > build["cpu_s"]:
            rate = im["out_mb"] / (im["cpu_s"] - build["cpu_s"])
            lines.append(f"{_short(checkout)}: sampling + encoding + writing {rate:.0f} MB of "
                         f"records per CPU-s ({im['seeds']:,} seeds minus the build)")  # fmt: skip
        if im and worker:
            lines.append(f"{_short(checkout)}: worker ({worker['workers']} SDK) / InMemory CPU "
                         f"{worker['cpu_s'] / im['cpu_s']:.2f}x")  # fmt: skip
    digests: dict[tuple, set] = {}
    for r in records:
        if r.get("digest"):
            digests.setdefault((r["run"], r["seeds"]), set()).add(r["digest"])
    for (run, seeds), found in digests.items():
        lines.append(f"records of {run} ({seeds:,} seeds): "
                     + ("the same bytes in every run" if len(found) == 1 else
                        f"{len(found)} different digests"))  # fmt: skip
    return lines


def warm(checkout: str) -> None:
    """Compiles the checkout's kernels once (numba's cache beside its source), not measured."""
    subprocess.run([python_of(checkout), "-m", "sampler.jit_warm"], cwd=checkout,
                   env=environment(checkout), check=True, capture_output=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work_dir", default="/tmp/ogbn")
    parser.add_argument("--runs", default="build,inmemory,worker", help=",".join(RUNS))
    parser.add_argument("--papers", type=int, default=PAPERS, help="the graph's size")
    parser.add_argument("--feature_dim", type=int, default=FEATURE_DIM,
                        help="papers' features (fewer: all seeds' records fit a smaller disk)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=50000)
    parser.add_argument("--every", type=int, default=14, help="seeds: every N-th paper")
    parser.add_argument("--workers", type=int, default=2, help="SDK worker processes")
    parser.add_argument("--slices", type=int, default=1, help="all_*: seeds in this many runs")
    parser.add_argument("--shards", type=int, default=8,
                        help="output shards (>= the 32 buckets: `worker` renames, not copies)")  # fmt: skip
    parser.add_argument("--checkout", action="append", help="a source tree to run (repeatable)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--digest", action="store_true", help="SHA-256 of each run's records")
    parser.add_argument("--keep", action="store_true", help="keep the outputs")
    parser.add_argument("--dd_mb", type=int, default=0, help="measure the disk with dd first")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_ogbn.json"))
    parser.add_argument("--note", default="", help="recorded with each run")
    parser.add_argument("--report", action="store_true", help="print the table of --out and exit")
    args = parser.parse_args()
    records = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            records = json.load(f)
    if args.report:
        print(table(records))
        print("\n".join(derived(records)))
        return
    runs = args.runs.split(",")
    unknown = [r for r in runs if r not in RUNS]
    if unknown:
        raise SystemExit(f"unknown run {unknown[0]!r}: one of {', '.join(RUNS)}")
    checkouts = [os.path.abspath(c) for c in (args.checkout or [ROOT])]
    os.makedirs(args.work_dir, exist_ok=True)
    if (max(args.seeds, 10) - 1) * args.every >= args.papers:
        raise SystemExit(f"{args.seeds} seeds, every {args.every}th paper: past {args.papers}")
    graph = make_graph(args.work_dir, args.papers, args.feature_dim)
    for checkout in checkouts:
        warm(checkout)
    disk = disk_speed(args.work_dir, args.dd_mb) if args.dd_mb else {}
    if disk:
        print(json.dumps(disk), flush=True)
    session = []
    for repeat in range(args.repeat):
        order = checkouts if repeat % 2 == 0 else checkouts[::-1]
        for name in runs:
            for checkout in order:
                print(f"[{time.strftime('%H:%M:%S')}] {name} on {_short(checkout)} "
                      f"(load {os.getloadavg()[0]:.1f}) ...", flush=True)  # fmt: skip
                record = run_one(args, name, checkout, graph)
                record.update(disk, repeat=repeat, note=args.note)
                print(table([record]).splitlines()[-1], flush=True)
                session.append(record)
                records.append(record)
                with open(args.out, "w") as f:
                    json.dump(records, f, indent=1)
    print(table(session))
    print("\n".join(derived(session)))


if __name__ == "__main__":
    main()
