"""The in-memory sampler: the whole graph on one machine, without Beam.

It reads every table, builds node tables and adjacency lists, and samples with
the dense kernels of `sampler.sample.dense`. It gives the same records as the Beam
pipeline for the same Randomness (--seed); the pipeline's tests use it as their oracle,
and it is the floor in the benchmarks.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterator

import numpy as np

from sampler.batches import EdgeBatch, NodeBatch, Seeds
from sampler.io import graph_tables
from sampler.io.read_common import BadRecord
from sampler.jit_loader import kernels
from sampler.node_table import build_node_table
from sampler.sample.adjacency import Adjacency, build_adjacency
from sampler.sample.dense import DenseGraph, densify, sample_chunk_columns
from sampler.sample.plan import WEIGHT_FEATURE, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import Subgraph, SubgraphChunk
from sampler.schema import GraphInfo
from sampler.threads import map_threads

InMemoryGraph = DenseGraph
SetOnBad = Callable[[str, BadRecord], None]  # (set name, bad row) of a table read


def load_dense_graph(graph: GraphInfo, plan: SamplingPlan) -> DenseGraph:
    """Reads every table once and builds node tables and dense adjacency lists."""
    return densify(graph, *load_tables(graph, plan))


def load_tables(
    graph: GraphInfo, plan: SamplingPlan, on_bad: SetOnBad | None = None
) -> tuple[dict, dict[str, Adjacency]]:
    """Every table read once: node tables and fingerprint-keyed adjacency lists (with the
    edges whose endpoint is missing, which `densify` drops). The files are read side by side
    on the process's cores (Arrow and numpy release the GIL); the first bad file in schema
    order fails the run, as in one thread.

    Without `on_bad` the first bad row fails the run; with it, each bad row is passed to
    `on_bad(set name, BadRecord)` in file order (schema order, then rows), and skipped."""

    # Sampling loads the compiled kernels anyway: loaded first, they fingerprint the ids of
    # every batch (sampler.ids.fingerprint), not only those after the first million.
    kernels("sampler.ids_jit")

    def read(file: tuple[str, str, str, str]) -> tuple[str, str, list, list]:
        kind, name, _, _ = file
        bad: list[BadRecord] = []
        report = None if on_bad is None else bad.append
        return kind, name, list(graph_tables.read_graph_file(graph, *file, report)), bad

    parts = []
    for kind, name, pieces, bad in map_threads(read, graph_tables.graph_files(graph)):
        for row in bad:
            on_bad(name, row)
        parts.append((kind, name, pieces))
    return build_tables(graph, plan, parts)


def build_tables(graph: GraphInfo, plan: SamplingPlan, parts: list, threads: int | None = None):
    """[(kind, set, pieces)] of every table file (node pieces: NodeBatch; edge pieces:
    (EdgeBatch, {end column: NodeBatch of latent ids})) -> (node tables, fp-keyed adjacency).

    The sets are built side by side on `threads` threads (default: this process's cores):
    numpy's sorts and gathers release the GIL, and each set's result depends on its rows only,
    so the tables are the same whatever the number of threads.
    """
    node_parts = {name: [] for name in graph.node_sets}
    edge_parts = {name: [] for name in graph.edge_sets}
    for kind, name, pieces in parts:
        if kind == "node":
            node_parts[name].extend(pieces)
            continue
        ends = graph_tables.latent_ends(graph, graph.edge_sets[name])
        for batch, end_ids in pieces:
            edge_parts[name].append(batch)
            for column, rows in end_ids.items():
                node_parts[ends[column]].append(rows)
    weighted = plan.weighted_edge_sets()

    def edges(name: str) -> Adjacency:
        info = graph.edge_sets[name]
        batch = EdgeBatch.concat(edge_parts.pop(name), info.features)
        return build_adjacency(batch, WEIGHT_FEATURE if name in weighted else None)

    def nodes(name: str):
        info = graph.node_sets[name]
        return build_node_table(NodeBatch.concat(node_parts.pop(name), info.features))

    jobs = [(edges, name) for name in graph.edge_sets] + [(nodes, name) for name in graph.node_sets]
    built = map_threads(lambda job: job[0](job[1]), jobs, threads)
    adjacency = dict(zip(graph.edge_sets, built[: len(graph.edge_sets)], strict=True))
    node_tables = dict(zip(graph.node_sets, built[len(graph.edge_sets) :], strict=True))
    return node_tables, adjacency


class NodeSeedSampling:
    """Node seeds, as the `worker` and `topology` placements sample them (the pipeline's
    counterpart is `sampler.sample.link.LinkSampling`): `sample_in_memory` on one bucket."""

    seeds_type = Seeds

    def output_schema(self, schema, plan: SamplingPlan):
        return schema

    def sample(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        return sample_in_memory(graph, plan, dense, seeds, randomness, counters, chunk_size)

    def sample_chunks(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        """`sample` as SubgraphChunks (for sampler.sample.encode_chunk)."""
        return sample_chunks(graph, plan, dense, seeds, randomness, counters, chunk_size)


def sample_in_memory(
    graph: GraphInfo,
    plan: SamplingPlan,
    mem: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
    chunk_size: int = 512,
) -> Iterator[Subgraph]:
    """Samples every seed, `chunk_size` seeds at a time, in sample-id order."""
    for chunk in sample_chunks(graph, plan, mem, seeds, randomness, counters, chunk_size):
        yield from chunk.subgraphs(counters)


def sample_chunks(
    graph: GraphInfo,
    plan: SamplingPlan,
    mem: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
    chunk_size: int = 512,
) -> Iterator[SubgraphChunk]:
    """`sample_in_memory` as SubgraphChunks (the same subgraphs in the same order)."""
    ids_ = seeds.sample_id.tolist()
    order = np.array(sorted(range(len(ids_)), key=ids_.__getitem__), dtype=np.int64)
    for lo in range(0, len(order), chunk_size):
        chunk = seeds.take(order[lo : lo + chunk_size])
        yield sample_chunk_columns(graph, plan, mem, chunk, randomness, counters)
