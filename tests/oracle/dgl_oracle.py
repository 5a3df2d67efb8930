"""Runs the real DGL 2.1.0 for tests/test_dgl_format.py. Not part of the project.

Run with the side venv's interpreter (scripts/setup_dgl_oracle.sh builds it):

    $DGL_VENV/bin/python tests/oracle/dgl_oracle.py JOBS.json

JOBS.json is a list of jobs; every path in it is relative to the JSON's folder:

    {"op": "save_tensors", "tensors": "in.npz", "out": "x.dgl"}
        dgl.data.utils.save_tensors of the dict in in.npz.
    {"op": "load_tensors", "path": "x.dgl", "out": "out.npz", "meta": "out.json"}
        dgl.data.utils.load_tensors; meta holds the names in order and torch dtypes.
    {"op": "save_graph", "graph": "g.npz", "out": "g.dgl", "formats": null | [...]}
        dgl.save_graphs of one int64 homogeneous graph built by dgl.graph().
    {"op": "load_graph", "path": "g.dgl", "out": "g_out.npz", "meta": "g_out.json"}
        dgl.load_graphs; writes the graph back (edges in edge-id order) plus facts DGL
        computes from it (degrees, formats, types, dtypes, load_graphs(path, [0])).

A dict travels as an .npz with `names` (str array, in order) and `t0`, `t1`, ...;
a graph as an .npz with `num_nodes`, `src`, `dst`, `ndata_names`, `ndata_0`, ...,
`edata_names`, `edata_0`, .... No pickle anywhere. This file only imports numpy, torch
and dgl, so it runs in the side venv without the project installed.
"""

from __future__ import annotations

import json
import os

import dgl
import numpy as np
import torch
from dgl.data.utils import load_tensors, save_tensors
from jobs import run_jobs  # tests/oracle/jobs.py, beside this script


def read_dict(npz, prefix: str = "") -> dict[str, np.ndarray]:
    names = [str(n) for n in npz[f"{prefix}names"]]
    return {name: npz[f"{prefix}{i}" if prefix else f"t{i}"] for i, name in enumerate(names)}


def dict_arrays(d: dict[str, np.ndarray], prefix: str = "") -> dict[str, np.ndarray]:
    out = {f"{prefix}names": np.array(list(d), dtype=str)}
    for i, arr in enumerate(d.values()):
        out[f"{prefix}{i}" if prefix else f"t{i}"] = arr
    return out


def to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def run(job: dict, base: str) -> None:
    def p(key: str) -> str:
        return os.path.join(base, job[key])

    op = job["op"]
    if op == "save_tensors":
        with np.load(p("tensors"), allow_pickle=False) as npz:
            tensors = {k: torch.from_numpy(np.array(v)) for k, v in read_dict(npz).items()}
        save_tensors(p("out"), tensors)
    elif op == "load_tensors":
        loaded = load_tensors(p("path"))
        np.savez(p("out"), **dict_arrays({k: to_numpy(v) for k, v in loaded.items()}))
        meta = {"names": list(loaded), "dtypes": [str(v.dtype) for v in loaded.values()]}
        with open(p("meta"), "w") as f:
            json.dump(meta, f)
    elif op == "save_graph":
        with np.load(p("graph"), allow_pickle=False) as npz:
            g = dgl.graph(
                (torch.from_numpy(npz["src"]), torch.from_numpy(npz["dst"])),
                num_nodes=int(npz["num_nodes"][0]),
                idtype=torch.int64,
            )
            for name, arr in read_dict(npz, "ndata_").items():
                g.ndata[name] = torch.from_numpy(np.array(arr))
            for name, arr in read_dict(npz, "edata_").items():
                g.edata[name] = torch.from_numpy(np.array(arr))
        dgl.save_graphs(p("out"), [g], formats=job.get("formats"))
    elif op == "load_graph":
        graphs, labels = dgl.load_graphs(p("path"))
        by_index, _ = dgl.load_graphs(p("path"), [0])
        (g,) = graphs
        src, dst = g.edges(order="eid")
        s1, d1 = by_index[0].edges(order="eid")
        csc_indptr, csc_indices, csc_eids = g.adj_tensors("csc")
        arrays = {
            "num_nodes": np.array([g.num_nodes()], dtype=np.int64),
            "src": to_numpy(src),
            "dst": to_numpy(dst),
            "in_degrees": to_numpy(g.in_degrees()),
            "out_degrees": to_numpy(g.out_degrees()),
            "csc_indptr": to_numpy(csc_indptr),
            "csc_indices": to_numpy(csc_indices),
            "csc_eids": to_numpy(csc_eids),
            **dict_arrays({k: to_numpy(v) for k, v in g.ndata.items()}, "ndata_"),
            **dict_arrays({k: to_numpy(v) for k, v in g.edata.items()}, "edata_"),
        }
        np.savez(p("out"), **arrays)
        meta = {
            "num_graphs": len(graphs),
            "labels": list(labels),
            "ntypes": g.ntypes,
            "etypes": g.etypes,
            "canonical_etypes": [list(c) for c in g.canonical_etypes],
            "idtype": str(g.idtype),
            "formats": g.formats(),
            "ndata_dtypes": {k: str(v.dtype) for k, v in g.ndata.items()},
            "edata_dtypes": {k: str(v.dtype) for k, v in g.edata.items()},
            "by_index_same_edges": bool(torch.equal(src, s1) and torch.equal(dst, d1)),
        }
        with open(p("meta"), "w") as f:
            json.dump(meta, f)
    else:
        raise SystemExit(f"dgl_oracle: unknown op {op!r}")


def main() -> None:
    run_jobs(run, {"dgl": dgl.__version__, "torch": torch.__version__})


if __name__ == "__main__":
    main()
