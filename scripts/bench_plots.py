"""PNG plots of the benchmark records (docs/bench_*.json), shown in docs/BENCHMARKS.md.

    python scripts/bench_plots.py            # every docs/bench_*.json that has a plot
    python scripts/bench_plots.py docs/bench_sample.json [--png out.png]

bench_sample.py and bench_partition.py call `plot_file` after writing their JSON, so a
benchmark run redraws its plot. matplotlib is a dev-only dependency (requirements-dev.txt).
A plot shows, per record kind, the latest record of each (system, size): the JSON files keep
every run, old and new.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = ("tfgnn_v1_edge", "tfgnn_v2_edge", "tfgnn_v1_node")
LABELS = {
    "ours": "ours (worker)",
    "ours_node": "ours, node aggregation",
    "ours_sharded": "ours (sharded)",
    "ours_topology": "ours (topology)",
    "inmemory": "ours in memory (--runner InMemory)",
    "tfgnn_v1_edge": "TF-GNN older sampler",
    "tfgnn_v1_node": "TF-GNN older sampler, node agg.",
    "tfgnn_v2_edge": "TF-GNN newer sampler",
}


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _latest(records: list[dict], key) -> dict:
    """The last record of each key (the JSON files are in run order)."""
    out = {}
    for r in records:
        out[key(r)] = r
    return out


def plot_sample(records: list[dict], png: str) -> None:
    """Wall time and peak RSS against graph size, one line per system; a killed run is an x
    at the time and memory it had used when it was stopped (a lower bound)."""
    plt = _pyplot()
    runs = [r for r in records if not r.get("hub_fraction") and not r.get("workers")]
    latest = _latest(runs, lambda r: (r["system"], r["papers"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for system in [s for s in LABELS if any(k[0] == s for k in latest)]:
        points = sorted(
            (r for (s, _), r in latest.items() if s == system), key=lambda r: r["papers"]
        )
        style = "--" if system in PEERS else "-"
        for ax, value in zip(
            axes, (lambda r: r["seconds"], lambda r: r["peak_rss_bytes"] / 2**30), strict=True
        ):
            done = [r for r in points if not r["stopped"]]
            (line,) = ax.plot([r["papers"] for r in done], [value(r) for r in done], style, marker="o",
                              label=LABELS[system])  # fmt: skip
            killed = [r for r in points if r["stopped"]]
            ax.plot([r["papers"] for r in killed], [value(r) for r in killed], "x",
                    color=line.get_color(), markersize=10, mew=2)  # fmt: skip
    for ax, name in zip(
        axes, ("wall seconds (process start to exit)", "peak RSS, GB"), strict=True
    ):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("papers (seeds: every paper; 1M: 100k seeds)")
        ax.set_ylabel(name)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Sampling, MAG spec, one local process (x: killed at the 18 GB limit)")
    _save(fig, png)


def plot_placement(records: list[dict], png: str) -> None:
    """Per graph size: wall time and the largest SDK worker process of each placement, from
    the latest completed multi-process run of each (placement, size); only sizes where every
    placement completed."""
    plt = _pyplot()
    runs = [r for r in records if r.get("workers") and not r["stopped"]]
    latest = _latest(runs, lambda r: (r["system"], r["papers"]))
    systems = [
        s for s in ("ours", "ours_topology", "ours_sharded") if any(k[0] == s for k in latest)
    ]
    sizes = sorted({p for _, p in latest if all((s, p) in latest for s in systems)})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(systems)

    def worker_mb(r):
        used = (r.get("resources") or {}).get("largest_sdk_worker_peak_rss_mb") or 0
        return max(max(r.get("sdk_worker_peak_rss_bytes") or [0]) / 2**20, used)

    for i, system in enumerate(systems):
        xs = [j + i * width for j, p in enumerate(sizes) if (system, p) in latest]
        rows = [latest[(system, p)] for p in sizes if (system, p) in latest]
        label = {"ours": "worker", "ours_topology": "topology", "ours_sharded": "sharded"}[system]
        axes[0].bar(xs, [r["seconds"] for r in rows], width, label=label)
        axes[1].bar(xs, [worker_mb(r) for r in rows], width, label=label)
    for ax, name in zip(axes, ("wall seconds", "largest SDK worker process, MB"), strict=True):
        ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(sizes))])
        ax.set_xticklabels(
            [f"{p:,} papers\n{latest[(systems[0], p)]['seeds']:,} seeds" for p in sizes]
        )
        ax.set_ylabel(name)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend()
    fig.suptitle("Placements: 128-dim paper features, two SDK worker processes, same records")
    _save(fig, png)


def plot_partition(records: list[dict], png: str) -> None:
    """Per (papers, parts): wall time and edge cut of each (tool, method), the median run."""
    plt = _pyplot()
    groups: dict[tuple, dict[str, list[dict]]] = {}
    for r in records:
        if r.get("num_hops", 1) != 1:
            continue
        label = f"{'ours' if r['tool'] == 'ours' else 'DGL'} {r['method']}"
        groups.setdefault((r["papers"], r["parts"]), {}).setdefault(label, []).append(r)
    keys = sorted(groups)
    labels = sorted({lab for g in groups.values() for lab in g}, key=lambda s: (s[:3] != "our", s))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs, secs, cuts = [], [], []
        for j, key in enumerate(keys):
            runs = sorted(groups[key].get(label, []), key=lambda r: r["seconds"])
            if runs:
                median = runs[len(runs) // 2]
                xs.append(j + i * width)
                secs.append(median["seconds"])
                cuts.append(median["edge_cut"])
        axes[0].bar(xs, secs, width, label=label, hatch="" if label.startswith("ours") else "//")
        axes[1].bar(xs, cuts, width, label=label, hatch="" if label.startswith("ours") else "//")
    for ax, name in zip(
        axes, ("wall seconds (median run)", "edge cut (fraction of edges)"), strict=True
    ):
        ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(keys))])
        ax.set_xticklabels([f"{p:,} papers, {k} parts" for p, k in keys])
        ax.set_ylabel(name)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.suptitle("Partition stage (one local process) against DGL 2.1.0's partition_graph")
    _save(fig, png)


def _save(fig, png: str) -> None:
    fig.tight_layout()
    # No timestamps in the file: the same records draw the same bytes.
    fig.savefig(png, dpi=90, metadata={"Software": None})
    _pyplot().close(fig)
    # stderr: `bench_sample.py --report` prints only its table on stdout.
    print(f"plot: {os.path.relpath(png, ROOT) if png.startswith(ROOT) else png}", file=sys.stderr)


PLOTTED = ("bench_sample.json", "bench_placement.json", "bench_partition.json")


def plot_for(records: list[dict]):
    """The plot of a record file, by what its records are: partition runs (bench_partition.py)
    have a `tool`; multi-process sampling runs (bench_sample.py --workers) `workers`."""
    if not records:
        return None
    if all("tool" in r for r in records):
        return plot_partition
    if any(r.get("workers") for r in records):
        return plot_placement
    if all("system" in r for r in records):
        return plot_sample
    return None


def plot_file(json_path: str, png: str | None = None) -> str | None:
    """Draws the plot of one benchmark JSON beside it (same name, .png); None when matplotlib
    is missing (the benchmark's JSON is written anyway) or the records have no plot."""
    with open(json_path) as f:
        records = json.load(f)
    draw = plot_for(records)
    if draw is None:
        return None
    try:
        _pyplot()
    except ImportError:
        print(
            "plot skipped: matplotlib is missing (pip install -r requirements-dev.txt)",
            file=sys.stderr,
        )
        return None
    png = png or os.path.splitext(json_path)[0] + ".png"
    draw(records, png)
    return png


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json", nargs="*", help="benchmark records (default: docs/bench_*.json)")
    parser.add_argument("--png", help="output file (one JSON only; default: beside it)")
    args = parser.parse_args()
    paths = args.json or [os.path.join(ROOT, "docs", name) for name in PLOTTED]
    if args.png and len(paths) != 1:
        parser.error("--png takes one JSON file")
    for path in paths:
        if os.path.exists(path):
            plot_file(path, args.png)


if __name__ == "__main__":
    sys.exit(main())
