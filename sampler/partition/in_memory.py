"""The partition stage in one process, without Beam: the kernels the Beam jobs call
(sampler/beam/partition/), called here on whole node types.

The Beam stage cuts every node type into --num_shards fingerprint ranges; the kernels make
the files the same bytes for any number of shards (a shard holds a contiguous block of
original ids, and every sum they exchange is of integers). So this driver runs them with one
shard per node type: every join of the Beam stage becomes a lookup by node type, every
global combine a plain loop. Only the node id tables follow --num_shards (one parquet file
per fingerprint range, as the Beam stage writes them). label propagation's rounds are in
in_memory_lp.py. pipelines/partition_in_memory.py is the CLI's runner.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np

from sampler.batches import EdgeBatch, NodeBatch
from sampler.io import graph_tables
from sampler.partition import (
    assign,
    classes,
    halo,
    in_memory_lp,
    layout,
    new_ids,
    numbering,
    random_deal,
    to_parts,
    write_files,
)
from sampler.partition.graph import (
    EdgeShard,
    GraphTypes,
    NodeShard,
    build_node_shard,
    range_shard,
    shard_starts,
)
from sampler.schema import GraphInfo
from sampler.threads import map_threads

SHARD = 0  # the one node shard of every node type


class Counters(dict):
    """The Beam stage's counters by name (namespaces `sampler` and `partition` together, as
    pipelines.reporting.accounting.beam_counters reads them); `inc` creates a counter even by 0, as a
    Beam counter exists once incremented."""

    def inc(self, name: str, count: int) -> None:
        self[name] = self.get(name, 0) + int(count)


@dataclasses.dataclass(frozen=True)
class NodeInfo:
    """What the methods know of a node type (sampler/beam/partition/classes.py's NodeInfo)."""

    ntype: int
    start: int
    classes: np.ndarray
    in_degree: np.ndarray


@dataclasses.dataclass
class Graph:
    """The numbered graph: one NodeShard per node type with nodes, one EdgeShard per edge
    type with edges, the [T, 2] starts table, and the classes."""

    types: GraphTypes
    nodes: dict[int, NodeShard]
    edges: dict[int, EdgeShard]
    starts: np.ndarray
    info: dict[int, NodeInfo] = dataclasses.field(default_factory=dict)
    class_table: list = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------- read


def read_graph(
    graph: GraphInfo, types: GraphTypes, counters: Counters, bad_lines: list[str]
) -> Graph:
    """Reads every table (bad rows to `bad_lines`, as JSON dead letters) and numbers the
    nodes and edges with original ids (sampler/beam/partition/read.py)."""
    files = [  # (node set name or edge type, path, format), in the order of the dead letters
        (name, *f)
        for name in types.ntypes
        if graph.node_sets[name].filename
        for f in graph_tables.set_files(graph.node_sets[name])
    ]
    for etype, (_, name, _) in enumerate(types.etypes):
        files += [(etype, *f) for f in graph_tables.set_files(graph.edge_sets[name])]

    def read(file) -> tuple[list, list]:
        """(pieces, bad rows) of one file: the files are read side by side on threads, and
        their rows and bad rows then taken in file order, as one thread would."""
        key, path, fmt = file
        kind, name = ("node", key) if isinstance(key, str) else ("edge", types.etypes[key][1])
        bad = []
        return list(graph_tables.read_graph_file(graph, kind, name, path, fmt, bad.append)), bad

    batches: dict[str, list[NodeBatch]] = {name: [] for name in types.ntypes}
    edge_batches: dict[int, list[EdgeBatch]] = {etype: [] for etype in range(len(types.etypes))}
    for (key, _, _), (pieces, bad) in zip(files, map_threads(read, files), strict=True):
        name = key if isinstance(key, str) else types.etypes[key][1]
        for row in bad:
            counters.inc(f"bad_records/{name}", 1)
            bad_lines.append(row.to_json(set=name))
        if isinstance(key, str):
            for batch in pieces:
                counters.inc(f"rows_read/{name}", len(batch))
                batches[name].append(batch)
            continue
        ends = graph_tables.latent_ends(graph, graph.edge_sets[name])
        for batch, end_ids in pieces:
            counters.inc(f"rows_read/{name}", len(batch))
            edge_batches[key].append(batch)
            for column, rows in end_ids.items():
                batches[ends[column]].append(rows)
    nodes = {}
    for t, name in enumerate(types.ntypes):
        parts = [b for b in batches.pop(name) if len(b)]
        if not parts:
            continue
        shard = build_node_shard(
            t, SHARD, parts, types.table_features(name), name, types.splits.get(name)
        )
        if graph.node_sets[name].filename:
            counters.inc(f"duplicate_node_ids/{name}", sum(len(b) for b in parts) - len(shard))
        nodes[t] = shard
    starts = shard_starts({(t, SHARD): len(s) for t, s in nodes.items()}, len(types.ntypes), 1)
    for shard in nodes.values():
        shard.start = int(starts[shard.ntype, SHARD])
    edges = {}
    for etype in sorted(edge_batches):
        found = _resolve(types, etype, edge_batches.pop(etype), nodes, counters)
        if found is not None:
            edges[etype] = found
    edge_starts = shard_starts({(e, SHARD): len(s) for e, s in edges.items()}, len(types.etypes), 1)
    for shard in edges.values():
        shard.start = int(edge_starts[shard.etype, SHARD])
    return Graph(types, nodes, edges, starts)


def _resolve(types: GraphTypes, etype: int, pieces, nodes, counters) -> EdgeShard | None:
    """The edges of one type with original ids at both ends (numbering.py), or None."""
    src_name, name, dst_name = types.etypes[etype]
    pieces = [b for b in pieces if len(b)]
    if not pieces:
        return None
    batch = EdgeBatch.concat(pieces, types.edge_features[name])
    del pieces  # the read batches, now copied into one

    def index(ntype_name):
        shard = nodes.get(types.ntype_id(ntype_name))
        return None if shard is None else shard.index()

    dropped, targets = numbering.resolve_targets(index(dst_name), etype, batch, SHARD, 1)
    del batch
    if dropped:
        counters.inc(f"edges_with_missing_endpoint/{name}", dropped)
    if not targets:
        return None
    got = numbering.resolve_sources(index(src_name), types, etype, SHARD, [p for _, p in targets])
    if got.dropped:
        counters.inc(f"edges_with_missing_endpoint/{name}", got.dropped)
    if got.edges is None:
        return None
    counters.inc(f"self_loops/{name}", got.self_loops)
    counters.inc(f"parallel_edges/{name}", got.parallel_edges)
    return got.edges


# --------------------------------------------------------------------------- classes


def classify(g: Graph, feature: str | None) -> None:
    """Sets g.info and g.class_table (sampler/beam/partition/classes.py)."""
    types = g.types
    values = {}
    for t, shard in g.nodes.items():
        specs = types.node_features[types.ntypes[t]]
        values[t] = classes.class_values(
            shard.rows.features, feature if feature in specs else None, len(shard)
        )
    table = set()
    for t, v in values.items():
        table.update(classes.class_keys(t, v))
    g.class_table = sorted(table)
    targets = defaultdict(list)
    for edges in g.edges.values():
        t = types.ntype_id(types.etypes[edges.etype][2])
        targets[t].append(edges.dst - g.starts[t, SHARD])
    for t, shard in g.nodes.items():
        degree = classes.in_degree(targets[t], len(shard))
        indices = classes.class_indices(t, values[t], g.class_table)
        g.info[t] = NodeInfo(t, shard.start, indices, degree)


# --------------------------------------------------------------------------- methods


def random_parts(g: Graph, config) -> dict[int, np.ndarray]:
    """{node type: parts} of --part_method random (sampler/partition/random_deal.py)."""
    groups = {
        t: random_deal.deal_groups(i.classes, i.in_degree, config.balance_edges)
        for t, i in g.info.items()
    }
    counts = {}
    for t, group in groups.items():
        for key, n in random_deal.group_counts(group, t, SHARD).items():
            counts[key] = counts.get(key, 0) + n
    counts = dict(sorted(counts.items()))
    return {
        t: random_deal.deal_parts(
            groups[t], i.classes, t, SHARD, counts, config.seed, config.num_parts
        )
        for t, i in g.info.items()
    }


def metis_parts(g: Graph, config) -> dict[int, np.ndarray]:
    """{node type: parts} of --part_method metis: pymetis on the whole graph (assign.py)."""
    types = g.types
    offsets = _type_offsets(g.starts)
    num_nodes = int(g.starts[:, -1].sum())
    node_classes = np.zeros(num_nodes, dtype=np.int64)
    for t, info in g.info.items():
        first = offsets[t] + info.start
        node_classes[first : first + len(info.classes)] = info.classes
    src, dst = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
    for e in sorted(g.edges):
        edges = g.edges[e]
        src_t, dst_t = (types.ntype_id(types.etypes[e][i]) for i in (0, 2))
        src.append(edges.src + offsets[src_t])
        dst.append(edges.dst + offsets[dst_t])
    parts = assign.metis_parts(
        num_nodes,
        np.concatenate(src),
        np.concatenate(dst),
        node_classes,
        len(g.class_table),
        config.num_parts,
        config.seed,
        config.balance_edges,
        config.metis_max_adjacency,
    )
    out = {}
    for t, info in g.info.items():
        first = offsets[t] + info.start
        out[t] = parts[first : first + len(info.classes)]
    return out


def _type_offsets(starts: np.ndarray) -> np.ndarray:
    totals = starts[:, -1]
    return totals.cumsum() - totals


def method_parts(g: Graph, config, counters: Counters) -> dict[int, np.ndarray]:
    """{node type: parts} of config.part_method (sampler/beam/partition/stage.py)."""
    if config.part_method == "metis":
        return metis_parts(g, config)
    parts = random_parts(g, config)
    if config.part_method == "lp":
        parts = in_memory_lp.label_propagation_parts(g, config, parts, counters)
    return parts


# --------------------------------------------------------------------------- write


def write_partitions(
    g: Graph, config, parts: dict[int, np.ndarray], out: str, settings: dict, counters: Counters
) -> dict:
    """Writes the DGL folder, the node id tables, the JSON and the report (returned), as
    sampler/beam/partition/write.py does. The graph's edges and nodes are dropped from `g` as
    they are routed to their parts (the parts' copies take their place)."""
    types, num_parts = g.types, config.num_parts
    shape_n = (len(types.ntypes), 1, num_parts)
    shape_e = (len(types.etypes), 1, num_parts)
    node_counts = np.zeros(shape_n, np.int64)
    for t, p in parts.items():
        node_counts += new_ids.node_part_counts(t, SHARD, p, shape_n)
    node_layout = {t: new_ids.node_layout(t, SHARD, p, node_counts) for t, p in parts.items()}

    def edge_ends(e: int):
        edges = g.edges[e]
        src_t, dst_t = (types.ntype_id(types.etypes[e][i]) for i in (0, 2))
        rows = np.arange(len(edges))
        target = new_ids.target_ends(
            node_layout[dst_t], g.starts[dst_t, SHARD], e, SHARD, rows, edges.dst
        )
        return new_ids.edge_ends(
            edges, [target], node_layout[src_t], g.starts[src_t, SHARD], shape_e
        )

    # Both ends of every edge twice (counted, then routed), so that one edge type's at a time
    # is held: the new ids of edges need every type's counts first.
    edge_counts = np.zeros(shape_e, np.int64)
    cut = np.zeros(len(types.etypes), np.int64)
    for e in sorted(g.edges):
        _, counts, edge_cut = edge_ends(e)
        edge_counts += counts
        cut += edge_cut
    lay = layout.Layout(node_counts, edge_counts)
    part_edges, in_edges, pairs = defaultdict(list), defaultdict(list), defaultdict(list)
    for e in sorted(g.edges):
        with_ends = edge_ends(e)[0]
        del g.edges[e]
        src_t, dst_t = (types.ntype_id(types.etypes[e][i]) for i in (0, 2))
        new_id, _ = lay.edge_ids(e, SHARD, with_ends.dst_part)
        if config.num_hops > 1:
            for s, piece in to_parts.halo_in_edges(with_ends, new_id, src_t):
                in_edges[(dst_t, s)].append(piece)
            found = to_parts.halo_pairs(with_ends)
            if found is not None:
                pairs[(src_t, SHARD)].append(found)
        for p, piece in to_parts.edges_to_parts(with_ends, new_id):
            part_edges[p].append(piece)
        del with_ends, new_id
    if config.num_hops > 1:
        for p, piece in halo_hops(in_edges, pairs, config.num_hops, num_parts, counters):
            part_edges[p].append(piece)
        in_edges.clear()
    with_nodes = node_counts.sum(axis=(0, 1)) > 0
    write_files.check_parts(
        num_parts, [p for p in range(num_parts) if part_edges.get(p) or with_nodes[p]]
    )
    part_nodes = defaultdict(list)
    for t in sorted(g.nodes):
        shard = g.nodes.pop(t)
        write_node_ids(types, out, shard, node_layout[t], config.num_shards)
        for p, piece in to_parts.nodes_to_parts(shard, node_layout[t]):
            part_nodes[p].append(piece)
        del shard
    for p in range(num_parts):
        write_files.write_part(types, out, p, lay, part_nodes.pop(p, []), part_edges.pop(p, []))
    class_counts = {}
    for t, info in g.info.items():
        for key, n in classes.class_part_counts(info.classes, parts[t]).items():
            class_counts[key] = class_counts.get(key, 0) + n
    return write_files.finish(
        config, types, out, lay, cut, dict(sorted(class_counts.items())), g.class_table, settings
    )


def write_node_ids(types: GraphTypes, out: str, shard: NodeShard, node, num_shards: int) -> None:
    """node_ids/<node set>/<node set>-SSSSS-of-NNNNN.parquet (and, with --layout graphstorm,
    raw_id_mappings/<node set>/part-SSSSS.parquet): the rows of every fingerprint range with
    nodes, as the Beam stage's node shards hold them (a block of the sorted rows)."""
    name = types.ntypes[shard.ntype]
    of_row = range_shard(shard.rows.fp, num_shards)
    bounds = np.searchsorted(of_row, np.arange(num_shards + 1))
    for s in range(num_shards):
        lo, hi = int(bounds[s]), int(bounds[s + 1])
        if lo == hi:
            continue
        rows = np.arange(lo, hi)
        piece = NodeShard(shard.ntype, s, shard.rows.take(rows), shard.start + lo)
        piece_layout = new_ids.NodeLayout(
            node.ntype, s, node.parts[lo:hi], node.new_id[lo:hi], node.new_tid[lo:hi]
        )
        table = to_parts.node_id_table(piece, piece_layout)
        for _ in write_files.write_node_ids(types, out, name, s, num_shards, table):
            pass


def halo_hops(in_edges: dict, pairs: dict, num_hops: int, num_parts: int, counters: Counters):
    """(part, PartEdges) of HALO hops 2..num_hops (sampler/beam/partition/halo.py)."""
    frontier = dict(pairs)
    seen = defaultdict(list)
    for hop in range(1, num_hops):
        following = defaultdict(list)
        for key in sorted(frontier):
            result = halo.expand_hop(
                frontier[key],
                list(seen[key]),
                halo.InEdges.concat(in_edges.get(key, [])),
                num_parts,
            )
            counters.inc(f"halo_hop{hop}_pairs", len(result.expanded.node))
            seen[key].append(result.expanded)
            for shard, found in result.frontier:
                following[shard].append(found)
            for part, edges in result.edges:
                counters.inc(f"halo_hop{hop}_edges", len(edges.new_id))
                yield part, edges
        frontier = following


def run(graph: GraphInfo, config, output_dir: str, bad_lines: list[str]):
    """(report, counters) of partitioning `graph` into `output_dir`; the JSON dead letters of
    bad input rows are appended to `bad_lines` (also when the run fails later).

    `config` is the Beam stage's PartitionConfig (any object with its fields)."""
    counters = Counters()
    types = config.graph_types(graph)  # with the --split masks and the --layout
    settings = write_files.report_settings(config, types)
    g = read_graph(graph, types, counters, bad_lines)
    classify(g, config.balance_ntypes)
    parts = method_parts(g, config, counters)
    report = write_partitions(g, config, parts, output_dir.rstrip("/"), settings, counters)
    return report, counters
