"""DGL's reshuffled id spaces and the files of one partition (numpy only).

New ids, as `dgl.distributed.partition_graph` assigns them: nodes are ordered by
(partition, node type id, original type-wise id) and edges by (owner partition, edge
type id, original type-wise id), where an edge is owned by its target's partition. So
each partition holds one contiguous block, and inside it each type one contiguous block.
`Layout` computes every id from small count tables: counts[type, shard, part] of nodes
(edges) per node shard (per node shard of the source), plus the rank of the row among the
rows of the same part in its shard.

One partition's `graph.dgl` (docs/DGL_FORMAT.md#partition-graph): inner nodes first, in new-id order, then
HALO nodes sorted by new id; inner edges (owned by the partition) in new-id order, then
the other edges sorted by new id: out-edges of inner nodes (hop 1) and, for
--num_hops k > 1, in-edges of the HALO nodes added by the previous hop.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np

from sampler.io.files import write_output
from sampler.partition.compact import reduce_narrowed
from sampler.partition.dgl_format import HomoGraph, write_graph, write_tensors
from sampler.partition.graph import GraphTypes
from sampler.partition.output_format import file_tensor


def rank_within(values: np.ndarray, num_values: int) -> np.ndarray:
    """For each position, how many earlier positions hold the same value."""
    if len(values) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.searchsorted(sorted_values, np.arange(num_values))
    rank = np.empty(len(values), dtype=np.int64)
    rank[order] = np.arange(len(values)) - starts[sorted_values]
    return rank


@dataclasses.dataclass
class Layout:
    """New ids from counts. node_counts[T, S, P] and edge_counts[E, S, P]."""

    node_counts: np.ndarray
    edge_counts: np.ndarray

    def __post_init__(self):
        self.num_parts = self.node_counts.shape[2]
        self.node_per_part = self.node_counts.sum(axis=1).T  # [P, T]
        self.edge_per_part = self.edge_counts.sum(axis=1).T  # [P, E]
        self.node_starts = _partition_major_starts(self.node_per_part)  # [P, T]
        self.edge_starts = _partition_major_starts(self.edge_per_part)
        # Per type: ids of shards before s in part p, and type-wise ids of parts before p.
        self.node_shard_before = _exclusive_cumsum(self.node_counts, axis=1)  # [T, S, P]
        self.edge_shard_before = _exclusive_cumsum(self.edge_counts, axis=1)
        self.node_part_before = _exclusive_cumsum(self.node_per_part, axis=0)  # [P, T]
        self.edge_part_before = _exclusive_cumsum(self.edge_per_part, axis=0)

    def node_ids(self, ntype: int, shard: int, parts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new homogeneous id, new type-wise id) of a node shard's rows (original-id order)."""
        return self._new_ids(
            self.node_starts, self.node_shard_before, self.node_part_before, ntype, shard, parts
        )

    def edge_ids(self, etype: int, shard: int, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(new homogeneous id, new type-wise id) of an edge shard's rows."""
        return self._new_ids(
            self.edge_starts, self.edge_shard_before, self.edge_part_before, etype, shard, owner
        )

    def _new_ids(self, starts, shard_before, part_before, type_, shard, parts):
        """Rows of one type's shard in partition `parts`: ids after every earlier part and type
        (homogeneous) or every earlier part (type-wise), then earlier shards, then their rank."""
        within = shard_before[type_, shard, parts] + rank_within(parts, self.num_parts)
        return starts[parts, type_] + within, part_before[parts, type_] + within

    def node_map(self) -> np.ndarray:
        """[T, P, 2] ranges [start, end) of new homogeneous node ids."""
        return _ranges(self.node_starts, self.node_per_part)

    def edge_map(self) -> np.ndarray:
        return _ranges(self.edge_starts, self.edge_per_part)


def _exclusive_cumsum(a: np.ndarray, axis: int) -> np.ndarray:
    out = np.cumsum(a, axis=axis)
    return out - a


def _partition_major_starts(per_part: np.ndarray) -> np.ndarray:
    flat = per_part.reshape(-1)
    return (np.cumsum(flat) - flat).reshape(per_part.shape)


def _ranges(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    return np.stack([starts.T, (starts + sizes).T], axis=2)


# --------------------------------------------------------------------------- one partition


@dataclasses.dataclass
class InnerNodes:
    """Nodes of one type owned by the partition (any subset, any order)."""

    ntype: int
    new_id: np.ndarray  # int64 homogeneous
    orig_id: np.ndarray  # int64 original type-wise
    features: dict[str, np.ndarray]

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


@dataclasses.dataclass
class PartEdges:
    """Edges of one type sent to a partition: owned by it (inner) or reaching its HALO."""

    etype: int
    inner: bool
    new_id: np.ndarray  # int64 homogeneous
    src: np.ndarray  # int64 new homogeneous id of the source
    dst: np.ndarray
    src_part: np.ndarray  # int64
    dst_part: np.ndarray
    orig_id: np.ndarray | None = None  # inner edges only
    features: dict[str, np.ndarray] | None = None  # inner edges only

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


@dataclasses.dataclass
class PartitionData:
    graph: HomoGraph
    node_feats: dict[str, np.ndarray]
    edge_feats: dict[str, np.ndarray]
    orig_nids: dict[str, np.ndarray]
    orig_eids: dict[str, np.ndarray]


def assemble_partition(
    part: int,
    types: GraphTypes,
    layout: Layout,
    nodes: list[InnerNodes],
    edges: list[PartEdges],
) -> PartitionData:
    """The graph and feature tensors of partition `part`, as DGL 2.1.0 writes them."""
    num_parts = layout.num_parts
    node_map, edge_map = layout.node_map(), layout.edge_map()
    first_node = int(node_map[0, part, 0]) if len(types.ntypes) else 0
    num_inner = int(layout.node_per_part[part].sum())
    node_feats, orig_nids = {}, {}
    inner_type = np.zeros(num_inner, dtype=np.int32)
    for t, ntype in enumerate(types.ntypes):
        got = sorted((n for n in nodes if n.ntype == t), key=lambda n: int(n.new_id[0]))
        new_id = np.concatenate([n.new_id for n in got]) if got else np.zeros(0, np.int64)
        order = np.argsort(new_id, kind="stable")
        start, end = (int(x) for x in node_map[t, part])
        if not np.array_equal(new_id[order], np.arange(start, end)):
            raise AssertionError(f"partition {part}: inner nodes of '{ntype}' are incomplete")
        inner_type[start - first_node : end - first_node] = t
        orig = np.concatenate([n.orig_id for n in got]) if got else np.zeros(0, np.int64)
        orig_nids[ntype] = orig[order].astype(np.int64)
        for name, spec in types.node_features[ntype].items():
            cols = [n.features[name] for n in got]
            values = np.concatenate(cols)[order] if cols else np.zeros((0, spec.width))
            node_feats[f"{ntype}/{name}"] = file_tensor(
                ntype, spec, values, types.layout, types.labels
            )

    inner = [e for e in edges if e.inner]
    outer = [e for e in edges if not e.inner]
    edge_feats, orig_eids = {}, {}
    inner_cols = with_end_types(_concat_edges(inner), types)
    order = np.argsort(inner_cols["new_id"], kind="stable")
    inner_cols = {k: v[order] for k, v in inner_cols.items()}
    for e in range(len(types.etypes)):
        name = types.canonical(e)
        rel = types.etypes[e][1]
        got = [x for x in inner if x.etype == e]
        new_id = np.concatenate([x.new_id for x in got]) if got else np.zeros(0, np.int64)
        order = np.argsort(new_id, kind="stable")
        start, end = (int(x) for x in edge_map[e, part])
        if not np.array_equal(new_id[order], np.arange(start, end)):
            raise AssertionError(f"partition {part}: inner edges of '{name}' are incomplete")
        orig = np.concatenate([x.orig_id for x in got]) if got else np.zeros(0, np.int64)
        orig_eids[name] = orig[order].astype(np.int64)
        for feat, spec in types.edge_features[rel].items():
            cols = [x.features[feat] for x in got]
            values = np.concatenate(cols)[order] if cols else np.zeros((0, spec.width))
            edge_feats[f"{name}/{feat}"] = file_tensor(
                name, spec, values, types.layout, types.labels
            )

    outer_cols = with_end_types(_concat_edges(outer), types)
    if len(outer_cols["new_id"]):
        # An edge can reach a partition twice (out-edge of an inner node and in-edge of a
        # HALO node); keep one copy, and none of the inner ones.
        outer_ids, first = np.unique(outer_cols["new_id"], return_index=True)
        keep = first[~np.isin(outer_ids, inner_cols["new_id"])]
        outer_cols = {k: v[keep] for k, v in outer_cols.items()}
    # HALO nodes: endpoints of these edges owned by other partitions.
    ends = [
        (cols[f"{end}"], cols[f"{end}_part"], cols[f"{end}_type"])
        for cols in (inner_cols, outer_cols)
        for end in ("src", "dst")
    ]
    halo_id = np.concatenate([x[0] for x in ends])
    halo_part = np.concatenate([x[1] for x in ends])
    halo_type = np.concatenate([x[2] for x in ends])
    foreign = halo_part != part
    halo_id, first = np.unique(halo_id[foreign], return_index=True)
    halo_part = halo_part[foreign][first]
    halo_type = halo_type[foreign][first]

    all_src = np.concatenate([inner_cols["src"], outer_cols["src"]])
    all_dst = np.concatenate([inner_cols["dst"], outer_cols["dst"]])

    num_halo = len(halo_id)
    local = _local_ids(first_node, num_inner, halo_id)
    node_ids = np.concatenate([np.arange(first_node, first_node + num_inner), halo_id])
    is_inner = np.concatenate([np.ones(num_inner, np.uint8), np.zeros(num_halo, np.uint8)])
    part_id = np.concatenate([np.full(num_inner, part, np.int64), halo_part])
    ntype_id = np.concatenate([inner_type, halo_type.astype(np.int32)])
    edge_ids = np.concatenate([inner_cols["new_id"], outer_cols["new_id"]]).astype(np.int64)
    inner_edge = np.concatenate(
        [
            np.ones(len(inner_cols["new_id"]), np.uint8),
            np.zeros(len(outer_cols["new_id"]), np.uint8),
        ]
    )
    etype_id = np.concatenate([inner_cols["etype"], outer_cols["etype"]]).astype(np.int32)
    # Field sets and insertion order of DGL 2.1.0 (docs/DGL_FORMAT.md#partition-graph).
    with_types = num_parts == 1 or not types.homogeneous
    if num_parts == 1:
        ndata = {"_ID": node_ids, "_TYPE": ntype_id, "inner_node": is_inner}
        edata = {"_ID": edge_ids, "_TYPE": etype_id, "inner_edge": inner_edge}
    else:
        ndata = {"_ID": node_ids, "inner_node": is_inner, "part_id": part_id}
        edata = {"_ID": edge_ids, "inner_edge": inner_edge}
        if with_types:
            ndata["_TYPE"] = ntype_id
            edata["_TYPE"] = etype_id
    graph = HomoGraph(
        num_nodes=num_inner + num_halo,
        src=local(all_src),
        dst=local(all_dst),
        ndata={k: v.astype(_RESERVED_DTYPES[k]) for k, v in ndata.items()},
        edata={k: v.astype(_RESERVED_DTYPES[k]) for k, v in edata.items()},
    )
    return PartitionData(graph, node_feats, edge_feats, orig_nids, orig_eids)


DENSE_LOCAL_IDS = 8  # the id table of `_local_ids` at most this many times the part's nodes


def _local_ids(first_node: int, num_inner: int, halo_id: np.ndarray):
    """new id -> local id of the partition: inner nodes first, then the sorted HALO ids; one
    gather from a dense table of every id the partition knows (instead of a binary search
    of every end), the binary search's answer where an id is neither."""

    def search(new_ids: np.ndarray) -> np.ndarray:
        mine = (new_ids >= first_node) & (new_ids < first_node + num_inner)
        return np.where(
            mine, new_ids - first_node, num_inner + np.searchsorted(halo_id, new_ids)
        ).astype(np.int64)

    end = first_node + num_inner
    if first_node < 0 or (len(halo_id) and halo_id[0] < 0):
        return search
    size = max(end, int(halo_id[-1]) + 1 if len(halo_id) else 0)
    if size > DENSE_LOCAL_IDS * (num_inner + len(halo_id)) + 1024:
        return search  # new ids are global: a table of them all would outgrow the part
    table = np.full(size, -1, np.int64)
    table[halo_id] = num_inner + np.arange(len(halo_id))
    table[first_node:end] = np.arange(num_inner)  # inner ids first, as in search

    def local(new_ids: np.ndarray) -> np.ndarray:
        if len(new_ids) == 0 or new_ids.min() < 0 or new_ids.max() >= size:
            return search(new_ids)
        got = table[new_ids]
        return search(new_ids) if (got < 0).any() else got

    return local


_RESERVED_DTYPES = {
    "_ID": np.int64,
    "_TYPE": np.int32,
    "inner_node": np.uint8,
    "inner_edge": np.uint8,
    "part_id": np.int64,
}


def _concat_edges(parts: list[PartEdges]) -> dict[str, np.ndarray]:
    """Columns of a list of PartEdges, with each end's node type id (from the edge type)."""
    names = ("new_id", "src", "dst", "src_part", "dst_part")
    cols = {
        name: np.concatenate([getattr(x, name) for x in parts]).astype(np.int64)
        if parts
        else np.zeros(0, np.int64)
        for name in names
    }
    cols["etype"] = (
        np.concatenate([np.full(len(x.new_id), x.etype) for x in parts]).astype(np.int64)
        if parts
        else np.zeros(0, np.int64)
    )
    return cols


def with_end_types(cols: dict[str, np.ndarray], types: GraphTypes) -> dict[str, np.ndarray]:
    src_type = np.array([types.ntype_id(e[0]) for e in types.etypes], dtype=np.int64)
    dst_type = np.array([types.ntype_id(e[2]) for e in types.etypes], dtype=np.int64)
    cols["src_type"] = src_type[cols["etype"]] if len(cols["etype"]) else np.zeros(0, np.int64)
    cols["dst_type"] = dst_type[cols["etype"]] if len(cols["etype"]) else np.zeros(0, np.int64)
    return cols


# --------------------------------------------------------------------------- files


def part_dir(output_dir: str, part: int) -> str:
    return f"{output_dir.rstrip('/')}/part{part}"


def write_partition(output_dir: str, part: int, data: PartitionData) -> None:
    """part<i>/graph.dgl, node_feat.dgl, edge_feat.dgl, orig_nids.dgl, orig_eids.dgl."""
    base = part_dir(output_dir, part)
    with write_output(f"{base}/graph.dgl") as f:
        write_graph(f, data.graph, what=f"{base}/graph.dgl")
    for name, tensors in (
        ("node_feat.dgl", data.node_feats),
        ("edge_feat.dgl", data.edge_feats),
        ("orig_nids.dgl", data.orig_nids),
        ("orig_eids.dgl", data.orig_eids),
    ):
        with write_output(f"{base}/{name}") as f:
            write_tensors(f, tensors, what=f"{base}/{name}")


def dgl_config(
    graph_name: str, types: GraphTypes, layout: Layout, part_method: str, num_hops: int
) -> dict:
    """The `<graph_name>.json` DGL 2.1.0 writes, keys in its order."""
    node_map, edge_map = layout.node_map(), layout.edge_map()
    config = {
        "graph_name": graph_name,
        "num_nodes": int(layout.node_per_part.sum()),
        "num_edges": int(layout.edge_per_part.sum()),
        "part_method": part_method,
        "num_parts": layout.num_parts,
        "halo_hops": num_hops,
        "node_map": {t: node_map[i].tolist() for i, t in enumerate(types.ntypes)},
        "edge_map": {types.canonical(i): edge_map[i].tolist() for i in range(len(types.etypes))},
        "ntypes": {t: i for i, t in enumerate(types.ntypes)},
        "etypes": {types.canonical(i): i for i in range(len(types.etypes))},
    }
    for part in range(layout.num_parts):
        config[f"part-{part}"] = {
            "node_feats": f"part{part}/node_feat.dgl",
            "edge_feats": f"part{part}/edge_feat.dgl",
            "part_graph": f"part{part}/graph.dgl",
        }
    return config


def write_json(path: str, value: dict) -> None:
    with write_output(path) as f:
        f.write(json.dumps(value, indent=4).encode("utf-8"))
