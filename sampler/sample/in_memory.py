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
import pyarrow as pa

from sampler.batches import EdgeBatch, NodeBatch, Seeds
from sampler.io import graph_tables
from sampler.io.file_reads import file_reads
from sampler.io.read_common import BadRecord
from sampler.memory import release_free_memory
from sampler.node_table import NodeTable, build_node_table
from sampler.sample import temporal
from sampler.sample.adjacency import Adjacency, build_adjacency
from sampler.sample.chunk_stream import seed_chunks
from sampler.sample.dense import (  # noqa: F401 - densify: callers use in_memory.densify
    DenseGraph,
    dense_adjacency,
    densify,
    sample_chunk_columns,
)
from sampler.sample.plan import WEIGHT_FEATURE, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import Subgraph, SubgraphChunk
from sampler.schema import GraphInfo
from sampler.threads import map_threads

InMemoryGraph = DenseGraph
CHUNK_SIZE = 512  # node seeds sampled and encoded together
SetOnBad = Callable[[str, BadRecord], None]  # (set name, bad row) of a table read


def load_dense_graph(graph: GraphInfo, plan: SamplingPlan) -> DenseGraph:
    """Reads every table once and builds node tables and dense adjacency lists."""
    return build_dense_graph(graph, plan, read_tables(graph))


def load_tables(
    graph: GraphInfo, plan: SamplingPlan, on_bad: SetOnBad | None = None
) -> tuple[dict, dict[str, Adjacency]]:
    """Every table read once: node tables and fingerprint-keyed adjacency lists (with the
    edges whose endpoint is missing, which `densify` drops). `on_bad`: as in read_tables."""
    return build_tables(graph, plan, read_tables(graph, on_bad))


def read_tables(graph: GraphInfo, on_bad: SetOnBad | None = None) -> list[tuple[str, str, list]]:
    """[(kind, set, pieces)] of every table file (graph_tables.graph_files' order): node pieces
    are NodeBatches, edge pieces (EdgeBatch, {end column: Arrow array of the distinct latent
    ids of the batch}).

    The files are read side by side on the process's cores (Arrow and numpy release the GIL);
    the first bad file in schema order fails the run, as in one thread. A file that several
    edge sets read alike (a set and its reversed view: same file, features and latent ends)
    is read once, and the other sets' batches are its batches with the ends swapped.

    Without `on_bad` the first bad row fails the run; with it, each bad row is passed to
    `on_bad(set name, BadRecord)` in file order (schema order, then rows), once for every set
    that reads the file (as the Beam placements, which read it once per set), and skipped."""
    reads = file_reads(graph)  # a file that several sets read alike: once

    def read(file: tuple[str, str, str, str]) -> tuple[list, list[BadRecord]]:
        kind, name, path, fmt = file
        bad: list[BadRecord] = []
        report = None if on_bad is None else bad.append
        if kind == "node":
            return list(graph_tables.read_node_file(path, fmt, graph.node_sets[name], report)), bad
        info = graph.edge_sets[name]
        latent = tuple(graph_tables.latent_ends(graph, info))
        edges = graph_tables.read_edge_file(path, fmt, info, latent, report, arrow_ends=True)
        return list(edges), bad

    done = map_threads(read, reads.reads)
    for (_, name, _, _), (index, _) in zip(reads.files, reads.source_of, strict=True):
        for row in done[index][1]:
            on_bad(name, row)
    return reads.per_file([got for got, _ in done])


def _by_set(graph: GraphInfo, parts: list) -> tuple[dict[str, list], dict[str, list]]:
    """{node set: pieces}, {edge set: EdgeBatches} of `parts`, which is emptied (each piece is
    then held once, and freed as soon as its set is built)."""
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
    parts.clear()
    return node_parts, edge_parts


def build_tables(graph: GraphInfo, plan: SamplingPlan, parts: list, threads: int | None = None):
    """[(kind, set, pieces)] of every table file (node pieces: NodeBatch; edge pieces:
    (EdgeBatch, {end column: NodeBatch or Arrow array of latent ids})) -> (node tables,
    fp-keyed adjacency). `parts` is emptied.

    The sets are built side by side on `threads` threads (default: this process's cores):
    numpy's sorts and gathers release the GIL, and each set's result depends on its rows only,
    so the tables are the same whatever the number of threads.
    """
    node_parts, edge_parts = _by_set(graph, parts)
    weighted = plan.weighted_edge_sets()

    def edges(name: str) -> Adjacency:
        return _adjacency(graph, name, edge_parts.pop(name), weighted)

    def nodes(name: str):
        return node_table(node_parts.pop(name), graph.node_sets[name].features)

    jobs = [(edges, name) for name in graph.edge_sets] + [(nodes, name) for name in graph.node_sets]
    built = map_threads(lambda job: job[0](job[1]), jobs, threads)
    adjacency = dict(zip(graph.edge_sets, built[: len(graph.edge_sets)], strict=True))
    node_tables = dict(zip(graph.node_sets, built[len(graph.edge_sets) :], strict=True))
    return node_tables, adjacency


def build_dense_graph(
    graph: GraphInfo, plan: SamplingPlan, parts: list, threads: int | None = None
) -> DenseGraph:
    """`densify(graph, *build_tables(graph, plan, parts))`, the same DenseGraph, built with less
    memory: the node tables first, then each edge set's adjacency re-indexed by node rows as
    soon as it is built, so that one edge set at a time per thread holds its fingerprint-keyed
    arrays. `parts` is emptied."""
    node_parts, edge_parts = _by_set(graph, parts)
    weighted = plan.weighted_edge_sets()

    def nodes(name: str):
        return node_table(node_parts.pop(name), graph.node_sets[name].features)

    built = map_threads(nodes, list(graph.node_sets), threads)
    tables = dict(zip(graph.node_sets, built, strict=True))
    give_back_free_memory()  # the node files' buffers, freed: the edge sets reuse the pages

    def edges(name: str):
        info = graph.edge_sets[name]
        adjacency = _adjacency(graph, name, edge_parts.pop(name), weighted)
        dense = dense_adjacency(adjacency, tables[info.source], tables[info.target])
        del adjacency
        give_back_free_memory()
        return dense

    names = list(graph.edge_sets)
    done = map_threads(edges, names, threads)
    dense = {name: adj for name, (adj, _) in zip(names, done, strict=True)}
    dropped = {name: count for name, (_, count) in zip(names, done, strict=True)}
    return DenseGraph(tables, dense, dropped)


def give_back_free_memory() -> None:
    """The pages that freed arrays left in Arrow's pool and in glibc's heaps back to the system:
    the batches read are thousands of small arrays, and both allocators keep such pages for
    later by default (at ogbn-mag's size 0.7 GB of the build's 2 GB of RSS was free memory)."""
    pa.default_memory_pool().release_unused()
    release_free_memory()


def _adjacency(graph: GraphInfo, name: str, batches: list, weighted) -> Adjacency:
    batch = EdgeBatch.concat(batches, graph.edge_sets[name].features)
    batches.clear()
    return build_adjacency(batch, WEIGHT_FEATURE if name in weighted else None)


def node_table(pieces: list, specs: dict) -> NodeTable:
    """build_node_table(NodeBatch.concat(pieces, specs)): the same table, built leaner.

    `pieces` (NodeBatches, or Arrow arrays of a latent set's ids) is emptied as it is
    used. Latent ids: Arrow's hash table over the pieces' distinct ids. Rows whose ids are all
    distinct: sorted by fingerprint, every feature gathered once straight from the pieces into
    its sorted place (no concatenated copy, no content hash: the content only breaks ties
    between rows of one id, which go through build_node_table)."""
    if pieces and isinstance(pieces[0], pa.Array):
        rows = sum(len(p) for p in pieces)
        distinct = graph_tables.distinct_id_column(pa.chunked_array(pieces, pa.binary()))
        pieces.clear()
        return NodeTable(distinct.nodes(), rows - len(distinct))
    n = sum(len(p) for p in pieces)
    fp = np.concatenate([p.fp for p in pieces]) if n else np.zeros(0, np.uint64)
    order = np.argsort(fp)
    fp = fp[order]
    if n == 0 or np.any(fp[1:] == fp[:-1]):  # ids that repeat: the content decides
        batch = NodeBatch.concat(pieces, specs)
        pieces.clear()
        return build_node_table(batch)
    node_ids = np.concatenate([p.ids for p in pieces])[order]
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    del order
    features = {}
    for name in specs:
        first = pieces[0].features[name]
        features[name] = np.empty((n, *first.shape[1:]), first.dtype)
    at = 0
    for i, piece in enumerate(pieces):
        where = rank[at : at + len(piece)]
        for name, column in features.items():
            column[where] = piece.features[name]
        at += len(piece)
        pieces[i] = None  # its buffers go now, not once every piece is placed
    pieces.clear()
    return NodeTable(NodeBatch(fp, node_ids, features), 0)


class NodeSeedSampling:
    """Node seeds, as the `worker` and `topology` placements sample them (the pipeline's
    counterpart is `sampler.sample.link.LinkSampling`): `sample_in_memory` on one bucket."""

    seeds_type = Seeds

    def output_schema(self, schema, plan: SamplingPlan):
        return temporal.output_schema(schema, plan.seed_time)

    def sample(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        return sample_in_memory(graph, plan, dense, seeds, randomness, counters, chunk_size)

    def sample_chunks(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        """`sample` as SubgraphChunks (for sampler.sample.encode_chunk)."""
        return sample_chunks(graph, plan, dense, seeds, randomness, counters, chunk_size)

    def seed_chunks(self, seeds, chunk_size: int):
        """The chunks of seeds `sample_chunks` samples one by one, in its order (for
        sampler.sample.chunk_stream)."""
        return seed_chunks(seeds, seed_order(seeds), chunk_size)

    def sample_chunk(self, graph, plan, dense, chunk, randomness, counters) -> SubgraphChunk:
        """One chunk of `seed_chunks` as a SubgraphChunk."""
        return sample_chunk_columns(graph, plan, dense, chunk, randomness, counters)


def sample_in_memory(
    graph: GraphInfo,
    plan: SamplingPlan,
    mem: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
    chunk_size: int = CHUNK_SIZE,
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
    chunk_size: int = CHUNK_SIZE,
) -> Iterator[SubgraphChunk]:
    """`sample_in_memory` as SubgraphChunks (the same subgraphs in the same order)."""
    for chunk in seed_chunks(seeds, seed_order(seeds), chunk_size):
        yield sample_chunk_columns(graph, plan, mem, chunk, randomness, counters)


def seed_order(seeds: Seeds) -> np.ndarray:
    """The order in which the seeds are sampled and written: by sample id."""
    ids_ = seeds.sample_id.tolist()
    return np.array(sorted(range(len(ids_)), key=ids_.__getitem__), dtype=np.int64)
