"""Runs DGL 2.1.0's own `partition_graph` on an exported graph, for scripts/bench_partition.py.

Run with the side venv's interpreter (scripts/setup_dgl_oracle.sh builds it):

    $DGL_VENV/bin/python tests/oracle/dgl_partition_bench.py GRAPH.npz OUT_DIR NUM_PARTS METHOD [HOPS]

GRAPH.npz holds `ntypes` and `etypes` (str arrays; etypes as "src:rel:dst"), `num_nodes`
(int64, one per ntype), `src_<i>`/`dst_<i>` (int64 per-type ids of etype i) and node
features `feat_<ntype>_<name>`. Prints one JSON line: seconds spent in partition_graph,
peak RSS of this process, and `parts_<ntype>`, the partition of every original node,
written to OUT_DIR/assignment.npz so the caller computes the edge cut with its own code.
Imports only numpy, torch and dgl.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

import dgl
import numpy as np
import torch


def main() -> None:
    graph_path, out_dir, num_parts, method = sys.argv[1:5]
    num_parts = int(num_parts)
    num_hops = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    with np.load(graph_path, allow_pickle=False) as npz:
        ntypes = [str(t) for t in npz["ntypes"]]
        etypes = [tuple(str(e).split(":")) for e in npz["etypes"]]
        num_nodes = {t: int(n) for t, n in zip(ntypes, npz["num_nodes"], strict=True)}
        data = {
            etype: (torch.from_numpy(npz[f"src_{i}"]), torch.from_numpy(npz[f"dst_{i}"]))
            for i, etype in enumerate(etypes)
        }
        feats = {k: npz[k] for k in npz.files if k.startswith("feat_")}
    g = dgl.heterograph(data, num_nodes_dict=num_nodes, idtype=torch.int64)
    for key, value in feats.items():
        _, ntype, name = key.split("_", 2)
        g.nodes[ntype].data[name] = torch.from_numpy(value)
    start = time.time()
    orig_nids, _ = dgl.distributed.partition_graph(
        g,
        "bench",
        num_parts,
        out_dir,
        part_method=method,
        num_hops=num_hops,
        return_mapping=True,
    )
    seconds = time.time() - start
    with open(os.path.join(out_dir, "bench.json")) as f:
        config = json.load(f)
    parts = {}
    for ntype in ntypes:
        ranges = config["node_map"][ntype]
        sizes = [end - start for start, end in ranges]
        new_part = np.repeat(np.arange(num_parts), sizes)
        orig = orig_nids[ntype].numpy() if isinstance(orig_nids, dict) else orig_nids.numpy()
        part = np.empty(num_nodes[ntype], dtype=np.int64)
        part[orig] = new_part
        parts[f"parts_{ntype}"] = part
    np.savez(os.path.join(out_dir, "assignment.npz"), **parts)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"seconds": seconds, "peak_rss_mb": peak_kb / 1024, "dgl": dgl.__version__}))


if __name__ == "__main__":
    main()
