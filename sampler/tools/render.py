"""PNG plots of samples and partitions, with matplotlib as an optional extra.

matplotlib is imported only when a plot is made; without it, `pyplot()` raises
PlotsUnavailable with the install command. Every figure has a fixed pixel size
(`width` x `height`), so callers and tests know what they get.
"""

from __future__ import annotations

import os
import re

import numpy as np

from sampler.errors import UserError
from sampler.io.no_follow import open_new
from sampler.sample.subgraph import Subgraph

INSTALL_HINT = "pip install 'beam-graph-sampler[plot]' (or: pip install matplotlib==3.11.2)"
DPI = 100


class PlotsUnavailable(UserError):
    """matplotlib is not installed."""


def pyplot():
    """matplotlib.pyplot on the non-interactive Agg backend."""
    try:
        import matplotlib
    except ImportError as e:
        raise PlotsUnavailable(
            f"PNG plots need matplotlib, which is not installed: {INSTALL_HINT}"
        ) from e
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _figure(plt, width: int, height: int, **kwargs):
    return plt.subplots(figsize=(width / DPI, height / DPI), dpi=DPI, **kwargs)


def _save(plt, fig, path: str) -> str:
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    try:  # through a file the project opened: never through a link, never into a FIFO
        with open_new(path) as f:
            fig.savefig(f, dpi=DPI, format="png")
    finally:
        plt.close(fig)
    return path


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


# --------------------------------------------------------------------------- histograms


def histogram_name(key: str) -> str:
    """The file of a set's histogram ('nodes/paper' -> hist_nodes_paper.png)."""
    return f"hist_{safe_name(key.replace('/', '_'))}.png"


def size_histograms(
    sizes: dict[str, np.ndarray], out_dir: str, width: int = 640, height: int = 400
) -> list[str]:
    """One PNG per set ('nodes/paper' -> hist_nodes_paper.png): subgraph sizes."""
    plt = pyplot()
    paths = []
    for key in sorted(sizes):
        values = np.asarray(sizes[key])
        fig, ax = _figure(plt, width, height)
        if len(values):
            top = int(values.max())
            bins = np.arange(top + 2) - 0.5 if top < 60 else 40
            ax.hist(values, bins=bins, color="#4878a8", edgecolor="white", linewidth=0.3)
            ax.axvline(
                values.mean(), color="#c44e52", linestyle="--", label=f"mean {values.mean():.1f}"
            )
            ax.axvline(
                np.percentile(values, 95),
                color="#8172b2",
                linestyle=":",
                label=f"p95 {np.percentile(values, 95):.0f}",
            )
            ax.legend(loc="upper right")
        ax.set_title(f"{key}: size per subgraph ({len(values):,} subgraphs)")
        ax.set_xlabel("nodes" if key.startswith("nodes/") else "edges")
        ax.set_ylabel("subgraphs")
        fig.tight_layout()
        paths.append(_save(plt, fig, os.path.join(out_dir, histogram_name(key))))
    return paths


# --------------------------------------------------------------------------- one subgraph


def spring_layout(num_nodes: int, edges: np.ndarray, iterations: int = 120, seed: int = 0):
    """Fruchterman-Reingold positions in [0, 1]^2 (deterministic); node 0 starts centred."""
    rng = np.random.default_rng(seed)
    pos = rng.random((num_nodes, 2))
    if num_nodes == 0:
        return pos
    pos[0] = 0.5
    k = np.sqrt(1.0 / num_nodes)
    temperature = 0.1
    for _ in range(iterations):
        delta = pos[:, None, :] - pos[None, :, :]
        dist = np.maximum(np.linalg.norm(delta, axis=-1), 1e-3)
        force = (delta / dist[..., None] * (k * k / dist)[..., None]).sum(axis=1)
        if len(edges):
            d = pos[edges[:, 0]] - pos[edges[:, 1]]
            length = np.maximum(np.linalg.norm(d, axis=1), 1e-3)
            pull = d * (length / k)[:, None]
            np.add.at(force, edges[:, 0], -pull)
            np.add.at(force, edges[:, 1], pull)
        norm = np.maximum(np.linalg.norm(force, axis=1), 1e-9)
        pos += force / norm[:, None] * np.minimum(norm, temperature)[:, None]
        temperature *= 0.97
    lo, hi = pos.min(axis=0), pos.max(axis=0)
    return (pos - lo) / np.maximum(hi - lo, 1e-9)


def draw_subgraph(
    subgraph: Subgraph,
    edge_ends: dict[str, tuple[str, str]],
    seed_set: str | None,
    path: str,
    width: int = 900,
    height: int = 700,
    max_nodes: int = 1500,
) -> str:
    """Draws one subgraph: nodes coloured by node set, the seed as a large red star."""
    plt = pyplot()
    offsets, labels, total = {}, [], 0
    for name, rows in subgraph.node_sets.items():
        offsets[name] = total
        labels.extend([name] * len(rows.ids))
        total += len(rows.ids)
    shown = min(total, max_nodes)
    pairs, kinds = [], []
    for name, rows in subgraph.edge_sets.items():
        source, target = edge_ends[name]
        if not len(rows.source):
            continue
        e = np.stack([rows.source + offsets[source], rows.target + offsets[target]], axis=1)
        keep = (e < shown).all(axis=1)
        pairs.append(e[keep])
        kinds.extend([name] * int(keep.sum()))
    edges = np.concatenate(pairs) if pairs else np.zeros((0, 2), np.int64)
    pos = spring_layout(shown, edges)
    fig, ax = _figure(plt, width, height)
    cmap = plt.get_cmap("tab10")
    if len(edges):
        from matplotlib.collections import LineCollection

        segments = np.stack([pos[edges[:, 0]], pos[edges[:, 1]]], axis=1)
        ax.add_collection(LineCollection(segments, colors="#999999", linewidths=0.4, alpha=0.5))
    for i, name in enumerate(subgraph.node_sets):
        lo = offsets[name]
        hi = min(lo + len(subgraph.node_sets[name].ids), shown)
        if hi > lo:
            ax.scatter(
                pos[lo:hi, 0],
                pos[lo:hi, 1],
                s=14,
                color=cmap(i % 10),
                label=f"{name} ({hi - lo})",
                zorder=2,
            )
    if seed_set in offsets and offsets[seed_set] < shown and len(subgraph.node_sets[seed_set].ids):
        seed = pos[offsets[seed_set]]
        ax.scatter(
            [seed[0]],
            [seed[1]],
            s=260,
            marker="*",
            color="#d62728",
            edgecolors="black",
            zorder=3,
            label="seed",
        )
    seed_text = subgraph.seed_id.decode(errors="replace")
    more = f", first {shown} of {total} nodes drawn" if shown < total else ""
    ax.set_title(
        f"subgraph of seed {seed_text}: {total} nodes, {sum(len(r.source) for r in subgraph.edge_sets.values())} edges{more}"
    )
    ax.set_xlim(-0.03, 1.03)
    ax.set_ylim(-0.03, 1.03)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    return _save(plt, fig, path)


# --------------------------------------------------------------------------- partitions


def partition_chart(report: dict, path: str, width: int = 1000, height: int = 450) -> str:
    """Bar chart per partition: inner nodes per type and HALO nodes; edges per type."""
    plt = pyplot()
    parts = report["partitions"]
    x = np.arange(len(parts))
    fig, (left, right) = _figure(plt, width, height, ncols=2)
    cmap = plt.get_cmap("tab10")
    bottom = np.zeros(len(parts))
    for i, ntype in enumerate(report["ntypes"]):
        values = np.array([p["inner_nodes"].get(ntype, 0) for p in parts], dtype=float)
        left.bar(x, values, bottom=bottom, color=cmap(i % 10), label=ntype)
        bottom += values
    halo = np.array([p["halo_nodes_total"] for p in parts], dtype=float)
    left.bar(x, halo, bottom=bottom, color="white", edgecolor="black", hatch="//", label="HALO")
    left.set_title(f"nodes per partition (HALO fraction {report['halo_fraction']:.1%})")
    left.set_xlabel("partition")
    left.set_xticks(x, [str(p["partition"]) for p in parts])
    left.legend(fontsize=8)
    bottom = np.zeros(len(parts))
    for i, etype in enumerate(report["etypes"]):
        values = np.array([p["edges"].get(etype, 0) for p in parts], dtype=float)
        right.bar(
            x,
            values,
            width=0.6,
            bottom=bottom,
            color=cmap(i % 10),
            label=etype.split(":")[1] if ":" in etype else etype,
        )
        bottom += values
    cut = np.array([p["cut_edges_total"] for p in parts], dtype=float)
    right.bar(x + 0.4, cut, width=0.15, color="black", label="cut edges")
    right.set_title(f"edges per partition (edge cut {report['edge_cut']:.1%})")
    right.set_xlabel("partition")
    right.set_xticks(x, [str(p["partition"]) for p in parts])
    right.legend(fontsize=8)
    fig.tight_layout()
    return _save(plt, fig, path)
