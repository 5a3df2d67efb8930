"""Loads partition folders with the real DGL 2.1.0, for tests/test_partition_dgl.py.

Run with the side venv's interpreter (scripts/setup_dgl_oracle.sh builds it):

    DGL_DIST_DEBUG=1 $DGL_VENV/bin/python tests/oracle/dgl_partition_oracle.py JOBS.json

JOBS.json is a list of {"config": ".../<graph_name>.json", "out": "facts.npz",
"meta": "facts.json"}. For every partition i the job runs
`dgl.distributed.load_partition(config, i)` (which, with DGL_DIST_DEBUG=1, also runs DGL's
own `_verify_dgl_partition`), `load_partition_book(config, i)` and
`dgl.data.utils.load_tensors` of part<i>/orig_nids.dgl and orig_eids.dgl, and saves what
it got: the graph's edges (local ids, edge-id order), its ndata/edata, the feature dicts,
the orig-id dicts, partition-book answers for the inner `_ID`s (homogeneous and type-wise),
and `agg`: for every local node the sum over its in-edges of x[source] with
x = the source's `_ID` as float64 (DGL message passing), for the HALO completeness check.
Arrays travel as .npz with index keys (names in the meta JSON); no pickle. Imports only
numpy, torch and dgl.
"""

from __future__ import annotations

import json
import os

import dgl
import dgl.function as fn
import numpy as np
import torch
from dgl.data.utils import load_tensors
from jobs import run_jobs  # tests/oracle/jobs.py, beside this script


def np_(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)


def run(job: dict, base: str) -> None:
    config_path = os.path.join(base, job["config"])
    with open(config_path) as f:
        config = json.load(f)
    folder = os.path.dirname(config_path)
    arrays: dict[str, np.ndarray] = {}
    meta: dict = {"parts": []}

    def put(name: str, value) -> str:
        key = f"a{len(arrays)}"
        arrays[key] = np_(value)
        return key

    for i in range(config["num_parts"]):
        g, node_feats, edge_feats, gpb, name, ntypes, etypes = dgl.distributed.load_partition(
            config_path, i
        )
        gpb2, name2, ntypes2, etypes2 = dgl.distributed.load_partition_book(config_path, i)
        src, dst = g.edges(order="eid")
        part = {
            "graph_name": name,
            "ntypes": list(ntypes),
            "etypes": [list(e) if isinstance(e, tuple) else e for e in etypes],
            "book_ntypes": list(gpb2.ntypes),
            "book_etypes": [list(e) for e in gpb2.canonical_etypes],
            "book_partid": gpb2.partid,
            "book_num_partitions": gpb2.num_partitions(),
            "book_graph_name": name2,
            "num_nodes": g.num_nodes(),
            "num_edges": g.num_edges(),
            "idtype": str(g.idtype),
            "src": put("src", src),
            "dst": put("dst", dst),
            "ndata": {k: put(k, v) for k, v in g.ndata.items()},
            "edata": {k: put(k, v) for k, v in g.edata.items()},
            "ndata_dtypes": {k: str(v.dtype) for k, v in g.ndata.items()},
            "edata_dtypes": {k: str(v.dtype) for k, v in g.edata.items()},
            "node_feats": {k: put(k, v) for k, v in node_feats.items()},
            "edge_feats": {k: put(k, v) for k, v in edge_feats.items()},
            "feat_dtypes": {
                k: str(v.dtype) for k, v in list(node_feats.items()) + list(edge_feats.items())
            },
        }
        inner = g.ndata["inner_node"].bool()
        inner_nids = g.ndata[dgl.NID][inner]
        part["book_nid2partid"] = put("nid2partid", gpb2.nid2partid(inner_nids))
        ntype_ids, per_type = gpb2.map_to_per_ntype(inner_nids)
        part["book_ntype_ids"] = put("ntype_ids", ntype_ids)
        part["book_per_type_nids"] = put("per_type_nids", per_type)
        inner_e = g.edata["inner_edge"].bool()
        inner_eids = g.edata[dgl.EID][inner_e]
        part["book_eid2partid"] = put("eid2partid", gpb2.eid2partid(inner_eids))
        etype_ids, per_type_e = gpb2.map_to_per_etype(inner_eids)
        part["book_etype_ids"] = put("etype_ids", etype_ids)
        part["book_per_type_eids"] = put("per_type_eids", per_type_e)
        # Type-wise partition lookups, as DistGraph does them.
        part["book_typed_partid"] = {}
        for t, ntype in enumerate(gpb2.ntypes):
            ids = per_type[ntype_ids == t]
            part["book_typed_partid"][ntype] = put("typed", gpb2.nid2partid(ids, ntype))
        part["book_local_nids"] = put("local_nids", gpb2.partid2nids(i))
        # HALO completeness: sum of x[source] over in-edges, computed by DGL on the partition.
        g.ndata["x"] = g.ndata[dgl.NID].to(torch.float64)
        g.update_all(fn.copy_u("x", "m"), fn.sum("m", "h"))
        part["agg"] = put("agg", g.ndata["h"])
        for kind in ("orig_nids", "orig_eids"):
            path = os.path.join(folder, f"part{i}", f"{kind}.dgl")
            part[kind] = {k: put(k, v) for k, v in load_tensors(path).items()}
        meta["parts"].append(part)
    reference_halo(config, meta, arrays, put)
    np.savez(os.path.join(base, job["out"]), **arrays)
    with open(os.path.join(base, job["meta"]), "w") as f:
        json.dump(meta, f)


def reference_halo(config: dict, meta: dict, arrays: dict, put) -> None:
    """DGL's own partition_graph_with_halo on the whole graph, in the new-id space.

    The whole graph is rebuilt from the inner edges of every loaded partition (edge i is
    the edge with new id i), with the partitions' node assignment; DGL then cuts it with
    config["halo_hops"] hops. Per partition it saves the nodes and edges DGL keeps, as
    new ids, with their inner flags and the edges' endpoints.
    """
    num_nodes, num_edges = config["num_nodes"], config["num_edges"]
    src = np.zeros(num_edges, np.int64)
    dst = np.zeros(num_edges, np.int64)
    node_part = np.zeros(num_nodes, np.int64)
    for p, part in enumerate(meta["parts"]):
        nid = arrays[part["ndata"]["_ID"]]
        inner = arrays[part["edata"]["inner_edge"]].astype(bool)
        eid = arrays[part["edata"]["_ID"]][inner]
        src[eid] = nid[arrays[part["src"]][inner]]
        dst[eid] = nid[arrays[part["dst"]][inner]]
        node_part[nid[arrays[part["ndata"]["inner_node"]].astype(bool)]] = p
    g = dgl.graph((torch.from_numpy(src), torch.from_numpy(dst)), num_nodes=num_nodes)
    subgs, _, _ = dgl.partition_graph_with_halo(
        g, torch.from_numpy(node_part), config["halo_hops"], reshuffle=False
    )
    for p, part in enumerate(meta["parts"]):
        sub = subgs[p]
        s, d = sub.edges(order="eid")
        nid = sub.ndata[dgl.NID]
        part["ref_nids"] = put("ref_nids", nid)
        part["ref_inner_node"] = put("ref_inner_node", sub.ndata["inner_node"])
        part["ref_eids"] = put("ref_eids", sub.edata[dgl.EID])
        part["ref_inner_edge"] = put("ref_inner_edge", sub.edata["inner_edge"])
        part["ref_src"] = put("ref_src", nid[s])
        part["ref_dst"] = put("ref_dst", nid[d])


def main() -> None:
    run_jobs(run, {"dgl": dgl.__version__})


if __name__ == "__main__":
    main()
