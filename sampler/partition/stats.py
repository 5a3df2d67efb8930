"""Per-partition counts, edge cut and HALO fraction of a DGL partition folder (numpy only).

Reads what `dgl.distributed.partition_graph` (and the project's partition stage) writes:
`<graph_name>.json` with `node_map` / `edge_map` / `ntypes` / `etypes` / `part-<i>`, and
each `part<i>/graph.dgl` through `sampler.partition.dgl_read.load_graph_file`
(docs/DGL_FORMAT.md#partition-graph). A part whose graph file is not here (a DistDGL machine
holds its own part only) is listed in `missing_parts`; the counts are those of the parts
present. In partition p's graph, `inner_node` marks the nodes p
owns (the rest are HALO copies) and `inner_edge` the edges p owns (an edge belongs to its target's partition).
An owned edge is cut when its source is a HALO node. Node and edge types come from
`_TYPE` (absent for a homogeneous graph: one type).
"""

from __future__ import annotations

import json
import os

import numpy as np

from sampler.errors import UserError
from sampler.partition import dgl_read

REQUIRED = ("num_parts", "node_map", "edge_map")


def find_config(path: str) -> str:
    """The partition JSON: `path` itself, or the one *.json in the folder with a node_map."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise UserError(f"--partition {path}: no such file or directory")
    found = []
    for name in sorted(os.listdir(path)):
        if not name.endswith(".json") or not os.path.isfile(os.path.join(path, name)):
            continue  # (a FIFO named *.json is no config, and is not opened: it would wait)
        try:
            with open(os.path.join(path, name), encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and all(key in data for key in REQUIRED):
            found.append(os.path.join(path, name))
    if len(found) != 1:
        what = "no" if not found else f"{len(found)}"
        raise UserError(
            f"--partition {path}: {what} DGL partition configs (*.json with num_parts,"
            " node_map, edge_map) found; name the file"
        )
    return found[0]


def _names_by_id(mapping: dict, what: str, config: str) -> list[str]:
    if not isinstance(mapping, dict) or not mapping:
        raise UserError(f"{config}: '{what}' must be a non-empty {{name: id}} map")
    names = [None] * len(mapping)
    for name, type_id in mapping.items():
        if not isinstance(type_id, int) or not 0 <= type_id < len(mapping) or names[type_id]:
            raise UserError(f"{config}: '{what}' ids must be 0..{len(mapping) - 1}, once each")
        names[type_id] = name
    return names


def _range_size(ranges, part: int) -> int:
    start, end = ranges[part]
    return int(end) - int(start)


def partition_stats(path: str) -> dict:
    """The report of one partition folder (see the module docstring)."""
    config = find_config(path)
    try:
        with open(config, encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise UserError(f"{config}: not a readable JSON file ({e})") from e
    for key in REQUIRED:
        if key not in meta:
            raise UserError(f"{config}: missing key '{key}'")
    num_parts = int(meta["num_parts"])
    ntypes = _names_by_id(meta.get("ntypes", {"_N": 0}), "ntypes", config)
    etypes = _names_by_id(meta.get("etypes", {"_N:_E:_N": 0}), "etypes", config)
    base = os.path.dirname(config)
    parts = []
    totals = {"inner": 0, "halo": 0, "edges": 0, "cut": 0}
    consistent = True
    cut_by_type = np.zeros(len(etypes), np.int64)
    edges_by_type = np.zeros(len(etypes), np.int64)
    missing = []
    for p in range(num_parts):
        entry = meta.get(f"part-{p}")
        if not isinstance(entry, dict) or "part_graph" not in entry:
            raise UserError(f"{config}: missing 'part-{p}' with a 'part_graph' file")
        graph = _load_part(os.path.join(base, entry["part_graph"]))
        if graph is None:
            missing.append(p)
            continue
        for field in ("inner_node",):
            if field not in graph.ndata:
                raise UserError(f"{entry['part_graph']}: node data has no '{field}'")
        if "inner_edge" not in graph.edata:
            raise UserError(f"{entry['part_graph']}: edge data has no 'inner_edge'")
        inner = graph.ndata["inner_node"].astype(bool)
        ntype = graph.ndata.get("_TYPE", np.zeros(graph.num_nodes, np.int64)).astype(np.int64)
        owned = graph.edata["inner_edge"].astype(bool)
        etype = graph.edata.get("_TYPE", np.zeros(graph.num_edges, np.int64)).astype(np.int64)
        inner_counts = np.bincount(ntype[inner], minlength=len(ntypes))
        halo_counts = np.bincount(ntype[~inner], minlength=len(ntypes))
        edge_counts = np.bincount(etype[owned], minlength=len(etypes))
        cut = owned & ~inner[graph.src]
        cut_counts = np.bincount(etype[cut], minlength=len(etypes))
        for t, name in enumerate(ntypes):
            ranges = meta["node_map"].get(name)
            if ranges is not None and _range_size(ranges, p) != int(inner_counts[t]):
                consistent = False
        for t, name in enumerate(etypes):
            ranges = meta["edge_map"].get(name)
            if ranges is not None and _range_size(ranges, p) != int(edge_counts[t]):
                consistent = False
        local = int(inner.sum() + (~inner).sum())
        parts.append(
            {
                "partition": p,
                "inner_nodes": {n: int(c) for n, c in zip(ntypes, inner_counts, strict=True)},
                "halo_nodes": {n: int(c) for n, c in zip(ntypes, halo_counts, strict=True)},
                "inner_nodes_total": int(inner.sum()),
                "halo_nodes_total": int((~inner).sum()),
                "halo_fraction": round(float((~inner).sum() / local), 6) if local else 0.0,
                "edges": {n: int(c) for n, c in zip(etypes, edge_counts, strict=True)},
                "edges_total": int(owned.sum()),
                "local_edges_total": int(graph.num_edges),
                "cut_edges": {n: int(c) for n, c in zip(etypes, cut_counts, strict=True)},
                "cut_edges_total": int(cut.sum()),
            }
        )
        totals["inner"] += int(inner.sum())
        totals["halo"] += int((~inner).sum())
        totals["edges"] += int(owned.sum())
        totals["cut"] += int(cut.sum())
        cut_by_type += cut_counts
        edges_by_type += edge_counts
    if num_parts and len(missing) == num_parts:
        first = meta["part-0"]["part_graph"]
        raise UserError(
            f"--partition {path}: none of the {num_parts} parts is here ({first} and the"
            " others are missing)"
        )
    nodes = totals["inner"]
    node_counts = [p["inner_nodes_total"] for p in parts]
    mean = nodes / len(parts) if parts else 0.0
    return {
        "config": config,
        "graph_name": meta.get("graph_name"),
        "num_parts": num_parts,
        "ntypes": ntypes,
        "etypes": etypes,
        "num_nodes": nodes,
        "num_edges": totals["edges"],
        "edge_cut": round(totals["cut"] / totals["edges"], 6) if totals["edges"] else 0.0,
        "cut_edges": totals["cut"],
        "edge_cut_per_etype": {
            name: round(float(c / e), 6) if e else 0.0
            for name, c, e in zip(etypes, cut_by_type, edges_by_type, strict=True)
        },
        "halo_nodes": totals["halo"],
        "halo_fraction": (
            round(totals["halo"] / (totals["inner"] + totals["halo"]), 6) if nodes else 0.0
        ),
        "node_balance_max_over_mean": round(max(node_counts) / mean, 6) if mean else 1.0,
        "matches_json_maps": consistent,
        "partitions": parts,
        # part<i>/ folders not here (a DistDGL machine holds its own part only): the totals
        # above are those of the parts present
        "missing_parts": missing,
        "missing_files": [meta[f"part-{p}"]["part_graph"] for p in missing],
    }


def _load_part(path: str):
    """A part's graph; None when its file is not here; UserError when it cannot be read."""
    try:
        return dgl_read.load_graph_file(path)
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a DGL graph file") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e.strerror or e})") from None
