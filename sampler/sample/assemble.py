"""The `sharded` placement's assembly: a bucket's per-sample node rows and edges into chunks of
subgraphs.

Deterministic: subgraphs come out sorted by sample id; within a node set the
seed is node 0 and the other nodes follow in fingerprint order; edges follow
(source index, target index, edge key) order and are never duplicated.
"""

from __future__ import annotations

import collections
import dataclasses
import typing
from collections.abc import Iterator

import numpy as np

from sampler.arrays import expand_ranges
from sampler.batches import NodeBatch, SampledEdges, Seeds, SharedNodeRows
from sampler.jit_loader import kernels
from sampler.sample.plan import EDGE, SamplingPlan
from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk
from sampler.schema import GraphInfo


@dataclasses.dataclass
class _LocalIndex:
    """Maps (sample index, node fp) to the node's position in its subgraph."""

    fps: np.ndarray  # each sample's node fps, sorted, sample s's in [bounds[s], bounds[s + 1])
    bounds: np.ndarray  # int64, one more than the samples
    local: np.ndarray  # the position in its subgraph of each of `fps`

    directory: tuple | None = None  # assemble_jit.member_directory's, made at the first find

    def find(self, sample: np.ndarray, fp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        jit = kernels("sampler.sample.assemble_jit")
        if self.directory is None:
            self.directory = jit.member_directory(self.fps, self.bounds)
        return jit.find_in_directory(
            self.fps,
            self.local,
            *self.directory,
            np.ascontiguousarray(sample, np.int64),
            np.ascontiguousarray(fp, np.uint64),
        )


def assemble_chunks(
    graph: GraphInfo,
    plan: SamplingPlan,
    seeds: Seeds,
    nodes: dict[str, list[SharedNodeRows]],
    edges: dict[str, list[SampledEdges]],
    counters: collections.Counter,
    chunk_size: int = 512,
) -> Iterator[SubgraphChunk]:
    """One bucket's subgraphs (one per seed whose node was found) as SubgraphChunks of up to
    `chunk_size` samples, in sample id order, for the chunk encoder; the `subgraphs` counter
    is left to the encoder's caller."""
    out = assembled(graph, plan, seeds, nodes, edges, counters)
    kept = np.flatnonzero(out.has_seed)
    yield from chunks_of(out.seeds, out.node_rows, out.edge_rows, kept, chunk_size)


def chunks_of(seeds: Seeds, node_rows, edge_rows, kept: np.ndarray, chunk_size: int, times=None):
    """The samples `kept` of an assembled bucket (see `assembled`) as SubgraphChunks; `times`:
    a temporal spec's seed time per sample (the chunks' seed_times), when known here (default:
    the seeds' own times, a seeds table's `seed_time` column)."""
    times = seeds.time if times is None else times
    for start in range(0, len(kept), chunk_size):
        part = kept[start : start + chunk_size]
        chunk_nodes = {}
        for name, (table, row, bounds) in node_rows.items():
            index, part_bounds = _sample_ranges(bounds, part)
            chunk_nodes[name] = NodeRowsOfChunk(table, row[index], part_bounds)
        chunk_edges = {}
        for name, (adj, features, bounds) in edge_rows.items():
            index, part_bounds = _sample_ranges(bounds, part)
            chunk_edges[name] = (
                adj[:, index],
                {f: col[index] for f, col in features.items()},
                part_bounds,
            )
        chunk_times = None if times is None else times[part]
        yield SubgraphChunk(
            seeds.sample_id[part], seeds.seed_id[part], chunk_nodes, chunk_edges, chunk_times
        )


def _sample_ranges(bounds: np.ndarray, samples: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(row positions, bounds from 0) of the rows of `samples`, sample i owning rows
    [bounds[i], bounds[i + 1])."""
    lengths = (bounds[samples + 1] - bounds[samples]).astype(np.int64)
    _, positions = expand_ranges(bounds[samples].astype(np.int64), lengths)
    return positions, np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


class Assembled(typing.NamedTuple):
    """One assembled bucket (see `assembled`)."""

    order: np.ndarray  # the input seeds' positions, in sample id order
    seeds: Seeds  # in sample id order
    node_rows: dict  # node set -> (NodeBatch, row index into it, bounds)
    edge_rows: dict  # edge set -> ((2, n) local indices, features, bounds)
    has_seed: np.ndarray  # bool per sample
    index: dict  # node set -> _LocalIndex: (sample, fp) -> position in the sample's node set


def _rows_table(parts: list, features) -> tuple[NodeBatch, np.ndarray]:
    """The node rows of a bucket's pieces as (table, row): row i of the pieces, in order, is
    table[row[i]]. A piece with an `inverse` (sampler.batches.SharedNodeRows)
    holds each node's row once; the rows are gathered only when a chunk is encoded."""
    table = NodeBatch.concat([p.rows for p in parts], features)
    rows, start = [], 0
    for p in parts:
        inverse = getattr(p, "inverse", None)
        rows.append(np.arange(len(p.rows)) + start if inverse is None else inverse + start)
        start += len(p.rows)
    return table, np.concatenate(rows).astype(np.int64) if rows else np.zeros(0, np.int64)


def assembled(
    graph, plan, seeds: Seeds, nodes, edges, counters, seed_nodes: dict | None = None
) -> Assembled:
    """One bucket's rows grouped by sample (sampler.sample.subgraph.slice_subgraphs), samples in
    sample id order. `seed_nodes` (node set -> one fp per seed, default the seed node set's
    `seeds.node`): the node first in its set; a sample is kept when its first set's is present."""
    if seed_nodes is None:
        seed_nodes = {plan.seed_set: seeds.node}
    ids_ = seeds.sample_id.tolist()
    by_id = np.array(sorted(range(len(ids_)), key=ids_.__getitem__), dtype=np.int64)
    seeds = seeds.take(by_id)
    seed_nodes = {name: fps[by_id] for name, fps in seed_nodes.items()}
    first_set = next(iter(seed_nodes))
    key_order = np.argsort(seeds.sample)
    sorted_keys = seeds.sample[key_order]
    if len(sorted_keys) > 1 and np.any(sorted_keys[1:] == sorted_keys[:-1]):
        raise ValueError("two sample ids share a 64-bit fingerprint")

    def sample_index(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if len(sorted_keys) == 0:  # (no seeds: rows of no sample, none kept)
            return key_order[np.zeros(len(keys), np.int64)], np.zeros(len(keys), bool)
        return kernels("sampler.sample.assemble_jit").sample_positions(
            np.ascontiguousarray(sorted_keys, np.uint64),
            np.ascontiguousarray(key_order, np.int64),
            np.ascontiguousarray(keys, np.uint64),
        )

    n_samples = len(seeds)
    node_rows: dict[str, tuple[NodeBatch, np.ndarray]] = {}
    index: dict[str, _LocalIndex] = {}
    has_seed = np.zeros(n_samples, dtype=bool)
    for name, info in graph.node_sets.items():
        parts = nodes.get(name, [])
        table, row = _rows_table(parts, info.features)  # row i of the pieces: table[row[i]]
        s, ok = sample_index(
            np.concatenate([p.sample for p in parts]) if parts else np.zeros(0, np.uint64)
        )
        row, s = row[ok], s[ok]
        fp = table.fp[row]
        is_seed = np.zeros(len(s), dtype=bool)
        if name in seed_nodes:
            is_seed = fp == seed_nodes[name][s]
            if name == first_set:
                has_seed[s[is_seed]] = True
        # (sample, fp) order, and (sample, the seed first, fp) order
        by_sample, order, bounds = kernels("sampler.sample.assemble_jit").member_orders(
            np.ascontiguousarray(s, np.int64),
            np.ascontiguousarray(fp, np.uint64),
            is_seed,
            n_samples,
        )
        position = np.empty(len(order), np.int64)  # of each row in `order`
        position[order] = np.arange(len(order))
        local = position[by_sample] - bounds[s[by_sample]]
        row = row[order]
        index[name] = _LocalIndex(np.ascontiguousarray(fp[by_sample], np.uint64), bounds, local)
        node_rows[name] = (table, row, bounds)
    counters["seeds_not_in_node_set"] += int((~has_seed).sum())

    edge_rows: dict[str, tuple[np.ndarray, dict, np.ndarray]] = {}
    for name, info in graph.edge_sets.items():
        batch = SampledEdges.concat(edges.get(name, []), info.features)
        s, ok = sample_index(batch.sample)
        src, ok_src = index[info.source].find(s, batch.src)
        dst, ok_dst = index[info.target].find(s, batch.dst)
        if plan.aggregation == EDGE:  # node aggregation filters candidates here by design
            counters["edges_with_missing_endpoint"] += int((ok & ~(ok_src & ok_dst)).sum())
        keep = np.flatnonzero(ok & ok_src & ok_dst)
        s, src, dst = (np.ascontiguousarray(a[keep], np.int64) for a in (s, src, dst))
        # by (sample, source, target, edge key), each (sample, edge key) once
        chosen, bounds = kernels("sampler.sample.assemble_jit").unique_edges(
            s, src, dst, np.ascontiguousarray(batch.edge_key[keep]), node_rows[info.source][2]
        )
        src, dst, keep = src[chosen], dst[chosen], keep[chosen]
        features = {f: col[keep] for f, col in batch.features.items()}
        edge_rows[name] = (np.stack([src, dst]), features, bounds)

    return Assembled(by_id, seeds, node_rows, edge_rows, has_seed, index)
