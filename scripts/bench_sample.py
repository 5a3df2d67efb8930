"""Benchmark: this project's sampler side by side with TF-GNN's two Beam samplers.

Runs every system on the same generated MAG-shaped graph (every node set with a
feature, because TF-GNN's older sampler crashes on latent node sets), with MAG's
SamplingSpec and the same local runner, one after another, and measures wall
time, peak RSS of the whole process tree, subgraphs/s and output bytes.

  python scripts/bench_sample.py --sizes 1000,10000 --out docs/bench_sample.json
      [--systems ours,ours_node,inmemory,tfgnn_v1_edge,tfgnn_v1_node,tfgnn_v2_edge]
      [--hub_fraction 0.2] [--timeout 1800] [--max_rss_gb 20] [--input_seeds N]

A system that runs out of time or memory is killed and recorded with the limit
that stopped it. Results are appended to the JSON file (one record per run), and
scripts/bench_plots.py draws them beside it as a PNG (docs/bench_sample.png).

Placements at scale: `--workers N` runs our systems with
`--direct_running_mode=multi_processing --direct_num_workers=N` and records the peak RSS
of the runner process and of each SDK worker process separately (the local runner holds
every shuffle in the runner process; Dataflow does not), plus run_summary.json's
`resources` (shuffle bytes, side-input bytes, output bytes):

  python scripts/bench_sample.py --sizes 10000,100000 --workers 2 --feature_dim 128 \
      --latent --input_seeds 20000 --systems ours,ours_topology,ours_sharded \
      [--worker_memory_mb 2048] --out docs/bench_placement.json
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_plots  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable

SYSTEMS = {
    # name: (aggregation, command builder)
    "ours": "edge",
    "ours_node": "node",
    "ours_sharded": "edge",
    "ours_topology": "edge",
    "inmemory": "edge",
    "tfgnn_v1_edge": "edge",
    "tfgnn_v1_node": "node",
    "tfgnn_v2_edge": "edge",
}


def command(
    system: str, graph_dir: str, out_dir: str, seeds: str | None, ours_flags: list[str] = ()
) -> list[str]:
    schema = os.path.join(graph_dir, "graph_schema.pbtxt")
    spec = os.path.join(graph_dir, "sampling_spec.pbtxt")
    seed_flags = ["--input_seeds", seeds] if seeds else []
    common = ["--graph_schema", schema, "--sampling_spec", spec, *seed_flags]
    if system in ("ours", "ours_node", "ours_sharded", "ours_topology", "inmemory"):
        extra = {
            "ours": [],
            "ours_node": ["--edge_aggregation_method", "node"],
            "ours_sharded": ["--graph_placement", "sharded"],
            "ours_topology": ["--graph_placement", "topology"],
            "inmemory": ["--runner", "InMemory"],
        }[system]
        out = os.path.join(out_dir, "samples@4")
        if system == "inmemory":
            ours_flags = [f for f in ours_flags if not f.startswith("--direct_")]
        return [PY, "-m", "pipelines.sample", *common, "--output_samples", out, *extra,
                "--progress_interval", "0", *ours_flags]  # fmt: skip
    out = os.path.join(out_dir, "samples.tfrecord")
    if system.startswith("tfgnn_v1"):
        agg = "node" if system.endswith("node") else "edge"
        return [PY, "-m", "tensorflow_gnn.sampler.unsupported.graph_sampler", *common,
                "--output_samples", out, "--edge_aggregation_method", agg]  # fmt: skip
    if system == "tfgnn_v2_edge":
        return [PY, "-m", "tensorflow_gnn.experimental.sampler.beam.sampler", *common,
                "--output_samples", out, "--data_path", graph_dir]  # fmt: skip
    raise ValueError(system)


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def tree_pss(proc: psutil.Process) -> int:
    """The proportional set size of the tree: pages shared by several processes (a graph
    snapshot every SDK worker maps) count once in all, not once per process as in RSS."""
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:")) * 1024
        except (OSError, StopIteration):
            pass
    return total


def is_sdk_worker(proc: psutil.Process) -> bool:
    try:
        if "sdk_worker_main" in " ".join(proc.cmdline()):
            return True
        parent = proc.parent()  # forked by pipelines.runtime.sdk_fork_server
        if parent is None:
            return False
        server = parent.parent()  # a fork of the CLI: the CLI's command line
        return "sdk_fork_server" in " ".join(parent.cmdline()) or (
            server is not None and parent.cmdline() == server.cmdline()
        )
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def process_peaks(proc: psutil.Process, peaks: dict[int, int]) -> None:
    """Updates {pid: peak RSS} of the runner (proc) and of each SDK worker process."""
    for p in [proc, *proc.children(recursive=True)]:
        if p.pid == proc.pid or is_sdk_worker(p):
            try:
                peaks[p.pid] = max(peaks.get(p.pid, 0), p.memory_info().rss)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass


def run_measured(cmd: list[str], timeout: float, max_rss: float, log_path: str) -> dict:
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="3")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_before = before.ru_utime + before.ru_stime
    start = time.time()
    peaks: dict[int, int] = {}
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        ps = psutil.Process(proc.pid)
        peak, peak_pss, stopped, polls = 0, 0, None, 0
        while proc.poll() is None:
            try:
                peak = max(peak, tree_rss(ps))
                if polls % 5 == 0:  # smaps is slower to read than the RSS
                    peak_pss = max(peak_pss, tree_pss(ps))
                polls += 1
                process_peaks(ps, peaks)
            except psutil.NoSuchProcess:
                break
            elapsed = time.time() - start
            if elapsed > timeout:
                stopped = f"timeout after {timeout:.0f} s"
            elif peak > max_rss:
                stopped = f"killed at {peak / 2**30:.1f} GB RSS (limit {max_rss / 2**30:.0f} GB)"
            if stopped:
                for child in ps.children(recursive=True):
                    child.kill()
                proc.kill()
                break
            time.sleep(0.2)
        proc.wait()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # this run's tree: each run reaped
    workers = sorted((rss for pid, rss in peaks.items() if pid != proc.pid), reverse=True)
    return {
        "seconds": round(time.time() - start, 2),
        "tree_cpu_seconds": round(usage.ru_utime + usage.ru_stime - cpu_before, 2),
        "peak_rss_bytes": peak,
        "peak_pss_bytes": peak_pss,
        "runner_peak_rss_bytes": peaks.get(proc.pid, 0),
        "sdk_worker_peak_rss_bytes": workers,
        "returncode": proc.returncode,
        "stopped": stopped,
    }


def run_resources(out_dir: str) -> dict:
    """run_summary.json's `resources` of one of our runs (pipelines.reporting.resources), if any."""
    path = os.path.join(out_dir, "run_summary.json")
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        return json.load(f).get("resources") or {}


def count_records(out_dir: str) -> tuple[int, int]:
    summary = os.path.join(out_dir, "run_summary.json")
    files = [f for f in glob.glob(os.path.join(out_dir, "samples*")) if not f.endswith(".pbtxt")]
    if os.path.exists(summary):  # ours: its counters (tests check them against the records)
        with open(summary) as f:
            count = json.load(f)["counters"].get("subgraphs", 0)
        return count, sum(os.path.getsize(f) for f in files)
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf  # noqa: PLC0415 (only needed after the runs)

    count = sum(1 for f in files for _ in tf.data.TFRecordDataset(f))
    return count, sum(os.path.getsize(f) for f in files)


def make_graph(
    size: int, root: str, hub_fraction: float, fmt: str, feature_dim: int = 0, latent=False
) -> str:
    """The generated graph's folder; `latent`: only papers have features (as in ogbn-mag),
    which TF-GNN's older sampler cannot read."""
    name = f"mag{size}" + (f"_hub{hub_fraction}" if hub_fraction else "") + f"_{fmt}"
    name += (f"_d{feature_dim}" if feature_dim else "") + ("_latent" if latent else "")
    graph_dir = os.path.join(root, name)
    flags = [] if latent else ["--all_node_features"]
    flags += ["--feature_dim", str(feature_dim)] if feature_dim else []
    if not os.path.exists(os.path.join(graph_dir, "sampling_spec.pbtxt")):
        subprocess.run(
            [PY, "-m", "pipelines.generate", "--num_papers", str(size), "--output_dir", graph_dir,
             "--write_spec", "--hub_fraction", str(hub_fraction), "--format", fmt, *flags],
            cwd=ROOT, check=True, env=dict(os.environ, TF_USE_LEGACY_KERAS="1"),
        )  # fmt: skip
    return graph_dir


def table_bytes(graph_dir: str) -> int:
    return sum(
        os.path.getsize(os.path.join(graph_dir, f))
        for f in os.listdir(graph_dir)
        if not f.endswith((".pbtxt", ".csv"))
    )


def make_seeds(graph_dir: str, count: int) -> str:
    """The first `count` paper ids as a CSV seed table."""
    path = os.path.join(graph_dir, f"seeds{count}.csv")
    if not os.path.exists(path):
        with open(path, "w") as f:
            f.write("#id\n")
            f.writelines(f"p{i}\n" for i in range(count))
    return path


def machine() -> dict:
    return {
        "cores": os.cpu_count(),
        "ram_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d"),
    }


def _cell(record: dict, ours: dict | None) -> list[str]:
    secs, rss = record["seconds"], record["peak_rss_bytes"] / 2**30
    if record["stopped"]:
        bound = ""
        if ours and not ours["stopped"]:
            bound = f"> {secs / ours['seconds']:.0f}x time when stopped"
        return [f"{secs:.0f} ({record['stopped']})", f"{rss:.2f}", "-", "-", bound]
    rate = record["subgraphs"] / secs if secs else 0
    ratio = ""
    if ours and ours is not record and not ours["stopped"]:
        ratio = (
            f"{secs / ours['seconds']:.1f}x time, {rss / (ours['peak_rss_bytes'] / 2**30):.1f}x RSS"
        )
    return [
        f"{secs:.1f}",
        f"{rss:.2f}",
        f"{rate:.0f}",
        f"{record['output_bytes'] / 2**20:.0f}",
        ratio,
    ]


def report(results: list[dict]) -> str:
    """A markdown table: one row per run, ratios against `ours` (same graph, same aggregation)."""
    head = ("| papers | hub | seeds | system | agg | wall s | peak RSS GB | subgraphs/s | output MB"
            " | vs ours |\n|---|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    rows = [head]
    for r in results:
        key = (r["papers"], r["hub_fraction"], r["seeds"])
        same = [o for o in results if (o["papers"], o["hub_fraction"], o["seeds"]) == key]
        ours_name = "ours_node" if r["aggregation"] == "node" else "ours"
        ours = next((o for o in same if o["system"] == ours_name), None)
        hub = f"{r['hub_fraction']:g}" if r["hub_fraction"] else "-"
        cells = [
            str(r["papers"]),
            hub,
            str(r["seeds"]),
            r["system"],
            r["aggregation"],
            *_cell(r, ours),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _mb(n: float) -> str:
    return f"{n / 2**20:,.0f}"


def placement_report(results: list[dict]) -> str:
    """A markdown table of the multi-process runs: memory by process role, bytes moved."""
    head = ("| papers | dim | seeds | system | workers | budget MB | wall s | vs worker | runner peak MB"
            " | largest SDK worker MB | tables MB | output MB | shuffle MB | shuffle / output"
            " | side inputs MB |\n" + "|---" * 15 + "|")  # fmt: skip
    rows = [head]
    for r in results:
        if not r.get("workers"):
            continue
        used = r.get("resources") or {}
        key = (r["papers"], r.get("feature_dim"), r["seeds"], r["workers"])
        # the `worker` run of the same batch (records appended later carry another "note")
        base = next((o for o in results if o["system"] == "ours" and not o["stopped"]
                     and (o["papers"], o.get("feature_dim"), o["seeds"], o.get("workers")) == key
                     and o.get("note") == r.get("note")),
                    None)  # fmt: skip
        vs = f"{r['seconds'] / base['seconds']:.2f}x" if base and not r["stopped"] else "-"
        # the peak seen by polling, or the exact one (getrusage of the reaped workers)
        polled = max(r.get("sdk_worker_peak_rss_bytes") or [0])
        worker = max(polled, (used.get("largest_sdk_worker_peak_rss_mb") or 0) * 2**20)
        out = r["output_bytes"]
        shuffle = used.get("shuffle_bytes", 0)
        wall = f"{r['seconds']:.0f}" + (f" ({r['stopped']})" if r["stopped"] else "")
        cells = [str(r["papers"]), str(r.get("feature_dim") or "-"), str(r["seeds"]), r["system"],
                 str(r["workers"]), str(r.get("worker_memory_mb") or "-"), wall, vs,
                 _mb(r.get("runner_peak_rss_bytes", 0)), _mb(worker), _mb(r.get("table_bytes", 0)),
                 _mb(out), _mb(shuffle), f"{shuffle / out:.2f}" if out else "-",
                 _mb(used.get("side_input_bytes", 0))]  # fmt: skip
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000")
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--hub_fraction", type=float, default=0.0)
    parser.add_argument("--input_seeds", type=int, default=0, help="sample only this many seeds")
    parser.add_argument("--format", default="tfrecord", choices=["tfrecord", "csv", "parquet"])
    parser.add_argument("--report", action="store_true", help="print the table of --out and exit")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--max_rss_gb", type=float, default=20)
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="run ours with this many SDK worker processes (multi_processing)",
    )
    parser.add_argument("--worker_memory_mb", type=int, default=0, help="passed to ours")
    parser.add_argument("--feature_dim", type=int, default=0, help="paper.feat width")
    parser.add_argument("--latent", action="store_true", help="only papers have features")
    parser.add_argument("--work_dir", default="/tmp/bench_sample")
    parser.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_sample.json"))
    args = parser.parse_args()
    results = []
    if os.path.exists(args.out):
        with open(args.out) as f:
            results = json.load(f)
    if args.report:
        print(placement_report(results) if args.workers else report(results))
        bench_plots.plot_file(args.out)
        return
    for size in [int(s) for s in args.sizes.split(",")]:
        graph_dir = make_graph(
            size, args.work_dir, args.hub_fraction, args.format, args.feature_dim, args.latent
        )
        seeds = make_seeds(graph_dir, args.input_seeds) if args.input_seeds else None
        ours_flags = []
        if args.workers:
            ours_flags += ["--direct_running_mode=multi_processing",
                           f"--direct_num_workers={args.workers}"]  # fmt: skip
        if args.worker_memory_mb:
            ours_flags += ["--worker_memory_mb", str(args.worker_memory_mb)]
        for system in args.systems.split(","):
            out_dir = os.path.join(args.work_dir, "out", f"{system}_{os.path.basename(graph_dir)}")
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            cmd = command(system, graph_dir, out_dir, seeds, ours_flags)
            print(f"[{time.strftime('%H:%M:%S')}] {system} at {size} papers ...", flush=True)
            measured = run_measured(cmd, args.timeout, args.max_rss_gb * 2**30, out_dir + ".log")
            ok = measured["returncode"] == 0 and not measured["stopped"]
            count, size_bytes = count_records(out_dir) if ok else (0, 0)
            if not ok and not measured["stopped"]:
                with open(out_dir + ".log") as f:
                    tail = f.read().strip().splitlines()[-3:]
                measured["stopped"] = "failed: " + " | ".join(tail)[-300:]
            record = {
                "system": system,
                "aggregation": SYSTEMS[system],
                "papers": size,
                "hub_fraction": args.hub_fraction,
                "format": args.format,
                "seeds": args.input_seeds or size,
                "subgraphs": count,
                "output_bytes": size_bytes,
                "table_bytes": table_bytes(graph_dir),
                "feature_dim": args.feature_dim,
                "latent": args.latent,
                "workers": args.workers,
                "worker_memory_mb": args.worker_memory_mb,
                **measured,
                "resources": run_resources(out_dir),
                "command": " ".join(
                    os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd
                ),
                "machine": machine(),
            }
            print(json.dumps({k: record[k] for k in ("system", "papers", "seconds", "peak_rss_bytes",
                                                     "subgraphs", "stopped")}), flush=True)  # fmt: skip
            results.append(record)
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    bench_plots.plot_file(args.out)  # beside the JSON: docs/bench_sample.png


if __name__ == "__main__":
    main()
