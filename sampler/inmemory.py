"""The in-memory sampler: the same kernels as the Beam pipeline, on one machine.

It gives the same records as the pipeline for the same --seed (the pipeline's
tests use it as their oracle) and is the floor in the benchmarks.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import numpy as np

from sampler import graph_io
from sampler.adjacency import Adjacency, NodeTable, build_adjacency, build_node_table
from sampler.assemble import assemble, lookup_rows
from sampler.batches import EdgeBatch, NodeBatch, SampledEdges, SampleNodes, Seeds
from sampler.plan import WEIGHT_FEATURE, SamplingPlan
from sampler.sampling import all_out_edges, sample_frontier
from sampler.schema import GraphInfo
from sampler.types import Subgraph


@dataclasses.dataclass
class InMemoryGraph:
    node_tables: dict[str, NodeTable]
    adjacency: dict[str, Adjacency]


def load_graph(graph: GraphInfo, plan: SamplingPlan) -> InMemoryGraph:
    """Reads every table once and builds node tables and adjacency lists."""
    node_parts: dict[str, list[NodeBatch]] = collections.defaultdict(list)
    for name, info in graph.node_sets.items():
        if info.filename:
            for path, fmt in graph_io.table_files(info.filename):
                node_parts[name].extend(graph_io.read_node_file(path, fmt, info))
    weighted = plan.weighted_edge_sets()
    adjacency = {}
    for name, info in graph.edge_sets.items():
        ends = graph_io.latent_ends(graph, info)
        parts = []
        for path, fmt in graph_io.table_files(info.filename):
            for batch, end_ids in graph_io.read_edge_file(path, fmt, info, tuple(ends)):
                parts.append(batch)
                for column, rows in end_ids.items():
                    node_parts[ends[column]].append(rows)
        weight = WEIGHT_FEATURE if name in weighted else None
        adjacency[name] = build_adjacency(EdgeBatch.concat(parts, info.features), weight)
    node_tables = {
        name: build_node_table(NodeBatch.concat(node_parts[name], info.features))
        for name, info in graph.node_sets.items()
    }
    return InMemoryGraph(node_tables, adjacency)


def sample_chunk(
    graph: GraphInfo, plan: SamplingPlan, mem: InMemoryGraph, seeds: Seeds, seed: int, counters
) -> Iterator[Subgraph]:
    """Samples the subgraphs of a chunk of seeds."""
    produced = {plan.seed_op: SampleNodes(seeds.sample, seeds.node)}
    edges: dict[str, list[SampledEdges]] = collections.defaultdict(list)
    for op in plan.ops:
        frontier = SampleNodes.concat([produced[name] for name in op.inputs]).unique()
        sampled = sample_frontier(
            mem.adjacency[op.edge_set],
            frontier,
            sample_size=op.sample_size,
            strategy=op.strategy,
            op_key=op.key,
            seed=seed,
        )
        edges[op.edge_set].append(sampled)
        produced[op.name] = SampleNodes(sampled.sample, sampled.dst)
    requests: dict[str, list[SampleNodes]] = collections.defaultdict(list)
    for op_name, found in produced.items():
        requests[plan.output_set(op_name)].append(found)
    nodes = {}
    for name in graph.node_sets:
        rows, missing = lookup_rows(mem.node_tables[name], SampleNodes.concat(requests[name]))
        counters["nodes_not_in_node_set"] += missing
        nodes[name] = [rows]
    if plan.aggregation == "node":
        edges = {}
        for name, info in graph.edge_sets.items():
            present = nodes[info.source][0]
            frontier = SampleNodes(present.sample, present.rows.fp)
            edges[name] = [all_out_edges(mem.adjacency[name], frontier)]
    yield from assemble(graph, plan, seeds, nodes, edges, counters)


def sample_in_memory(
    graph: GraphInfo,
    plan: SamplingPlan,
    mem: InMemoryGraph,
    seeds: Seeds,
    seed: int,
    counters: collections.Counter,
    chunk_size: int = 4096,
) -> Iterator[Subgraph]:
    """Samples every seed, `chunk_size` seeds at a time, in sample-id order."""
    ids_ = seeds.sample_id.tolist()
    order = np.array(sorted(range(len(ids_)), key=ids_.__getitem__), dtype=np.int64)
    for lo in range(0, len(order), chunk_size):
        chunk = seeds.take(order[lo : lo + chunk_size])
        yield from sample_chunk(graph, plan, mem, chunk, seed, counters)
