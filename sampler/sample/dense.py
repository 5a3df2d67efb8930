"""Sampling with the whole graph in memory, on dense row indices (numpy only).

Node tables are sorted by fingerprint, so a node's row is its rank by
fingerprint; adjacency lists are indexed by source row and point at target
rows. This is the fast path used by the in-memory sampler and by the Beam
pipeline's `worker` placement. It makes exactly the same choices as the
fingerprint-keyed kernels of the `sharded` placement (`sampling.py`,
`assemble.py`): same random streams, same canonical neighbour order, same
output order.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import typing

import numpy as np

from sampler.arrays import expand_ranges
from sampler.batches import Seeds, take_features
from sampler.graph_checks import edge_shape_counts
from sampler.jit_loader import kernels
from sampler.node_table import NodeTable
from sampler.sample.adjacency import Adjacency
from sampler.sample.plan import NODE, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk
from sampler.schema import GraphInfo
from sampler.threads import map_threads


@dataclasses.dataclass
class DenseAdjacency:
    """Out-edges indexed by source row; targets are rows of the target node set."""

    starts: np.ndarray  # int64, one per source row
    degrees: np.ndarray  # int64, one per source row
    targets: np.ndarray  # int64 target rows, canonical order within each source
    edge_keys: np.ndarray  # uint64
    features: dict[str, np.ndarray]
    weights: np.ndarray | None


@dataclasses.dataclass
class DenseGraph:
    nodes: dict[str, NodeTable]
    adjacency: dict[str, DenseAdjacency]
    dropped_edges: dict[str, int]  # edges whose endpoint is not in its node set

    @property
    def node_tables(self) -> dict[str, NodeTable]:
        return self.nodes


def edge_facts(graph: GraphInfo, dense: DenseGraph) -> dict[str, int]:
    """Per edge set: edges dropped for a missing endpoint, self-loops and parallel edges (of the
    edges kept), under the counter names pipelines.reporting.accounting.graph_issues reads."""
    out = {}
    for name, info in graph.edge_sets.items():
        adj = dense.adjacency[name]
        src = np.repeat(np.arange(len(adj.degrees)), adj.degrees)
        dst = adj.targets[expand_ranges(adj.starts, adj.degrees)[1]]
        loops, parallel = edge_shape_counts(src, dst, info.source == info.target)
        out[f"edges_with_missing_endpoint/{name}"] = dense.dropped_edges.get(name, 0)
        out[f"self_loops/{name}"] = loops
        out[f"parallel_edges/{name}"] = parallel
    return out


def densify(
    graph: GraphInfo,
    nodes: dict[str, NodeTable],
    adjacency: dict[str, Adjacency],
    threads: int | None = None,
) -> DenseGraph:
    """Re-indexes fingerprint-keyed adjacency by node rows; drops edges with a missing endpoint.

    The edge sets are re-indexed side by side on `threads` threads (default: this process's
    cores; numpy's lookups and gathers release the GIL); each depends on its own rows only."""
    names = list(graph.edge_sets)

    def one(name: str) -> tuple[DenseAdjacency, int]:
        info = graph.edge_sets[name]
        return dense_adjacency(adjacency[name], nodes[info.source], nodes[info.target])

    done = map_threads(one, names, threads)
    dense = {name: adj for name, (adj, _) in zip(names, done, strict=True)}
    dropped = {name: count for name, (_, count) in zip(names, done, strict=True)}
    return DenseGraph(nodes, dense, dropped)


def dense_adjacency(adj: Adjacency, sources: NodeTable, targets: NodeTable):
    """(DenseAdjacency, edges dropped) of one edge set: `adj` re-indexed by node rows.

    When the out-edges lie in node order (as build_adjacency lays them out) and no endpoint is
    missing, no position is looked up or masked: the targets' rows and the edge keys are
    copied once, features and weights are `adj`'s own (shared, not copied)."""
    src_rows, src_ok = sources.lookup(adj.nodes)
    n_rows = len(sources.rows)
    in_order = _in_node_order(adj)
    if in_order:
        dst_rows, dst_ok = targets.lookup(adj.targets)
        if src_ok.all() and dst_ok.all():
            starts = np.zeros(n_rows, np.int64)
            degrees = np.zeros(n_rows, np.int64)
            starts[src_rows] = adj.starts
            degrees[src_rows] = adj.degrees
            # Copies in numpy's memory, which it asks the kernel to back with huge pages: the
            # compiled lookups return arrays in 4 KB pages, and sampling's random reads of
            # targets and edge keys then cost 10% more CPU (at ogbn-mag's size).
            targets, edge_keys = np.array(dst_rows), np.array(adj.edge_keys)
            dense = DenseAdjacency(starts, degrees, targets, edge_keys, adj.features, adj.weights)
            return dense, 0
        owner = np.repeat(np.arange(len(adj.nodes)), adj.degrees)
        keep = src_ok[owner] & dst_ok
        kept = np.flatnonzero(keep)
    else:
        owner, positions = expand_ranges(adj.starts, adj.degrees)
        dst_rows, dst_ok = targets.lookup(adj.targets[positions])
        keep = src_ok[owner] & dst_ok
        kept = positions[keep]
    new_degrees = np.bincount(owner[keep], minlength=len(adj.nodes)).astype(np.int64)
    new_starts = np.cumsum(new_degrees) - new_degrees
    starts = np.zeros(n_rows, np.int64)
    degrees = np.zeros(n_rows, np.int64)
    starts[src_rows[src_ok]] = new_starts[src_ok]
    degrees[src_rows[src_ok]] = new_degrees[src_ok]
    dense = DenseAdjacency(
        starts,
        degrees,
        dst_rows[keep],
        adj.edge_keys[kept],
        take_features(adj.features, kept),
        adj.weights[kept] if adj.weights is not None else None,
    )
    return dense, int(len(keep) - keep.sum())


_dense_adjacency = dense_adjacency  # its former name (tests/test_tables_jit.py)


def _in_node_order(adj: Adjacency) -> bool:
    """Whether node i's out-edges are positions starts[i] .. starts[i] + degrees[i] and the
    nodes' runs follow one another from 0 to the last edge (a CSR in node order)."""
    degrees = adj.degrees
    if len(degrees) == 0:
        return adj.num_edges == 0
    if adj.starts[0] != 0 or int(degrees.sum()) != adj.num_edges:
        return False
    return bool(np.array_equal(adj.starts[1:], np.cumsum(degrees[:-1])))


def _assemble_jit():
    return kernels("sampler.sample.assemble_jit")  # compiled (sampler/jit.py)


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _unique_pairs(sample, row, n_samples: int, n_rows: int):
    """The distinct (sample, row) pairs sorted by sample then row: (sample, row, bounds)."""
    bounds, rows = _assemble_jit().unique_rows(_int64(sample), _int64(row), n_samples, n_rows)
    return np.repeat(np.arange(n_samples), np.diff(bounds)), rows, bounds


class _Members:
    """The (sample, row) pairs of one node set in a chunk, and their output positions:
    per sample the seed first, then the other rows in row (= fingerprint) order."""

    def __init__(self, sample: np.ndarray, row: np.ndarray, n_rows: int, n_samples: int, seed_row):
        self.n_rows = n_rows
        self.sample, self.row, self.bounds = _unique_pairs(sample, row, n_samples, n_rows)
        has_seed = seed_row is not None
        seed = _int64(seed_row) if has_seed else np.zeros(n_samples, np.int64)
        self.local, self.order = _assemble_jit().member_positions(
            self.bounds, self.row, seed, has_seed
        )

    def find(self, sample: np.ndarray, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Output position of each (sample, row), and whether it is a member."""
        return _assemble_jit().find(
            self.bounds, self.row, self.local, _int64(sample), _int64(row), self.n_rows
        )


def sample_chunk_columns(
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
) -> SubgraphChunk:
    """The subgraphs of a chunk of seeds as one SubgraphChunk (samples in the order of
    `seeds`, less those whose seed is not in the seed node set), by the fused compiled
    kernels (sampler/sample/dense_fused.py)."""
    steps = fused_steps() if FUSED else STEPS
    return sample_chunk_with(steps, graph, plan, dg, seeds, randomness, counters)


@functools.cache
def fused_steps() -> Steps:
    """The fused compiled stages (sampler/sample/dense_fused.py, which does not import this
    module: no import circle) as the Steps of sample_chunk_with."""
    from sampler.sample import dense_fused

    return Steps(
        dense_fused.seed_part,
        dense_fused.sample_op,
        dense_fused.Members,
        dense_fused.induced,
        dense_fused.edge_rows,
    )


FUSED = True  # False: the step-by-step path (STEPS below), the fused kernels' reference twin


class Steps(typing.NamedTuple):
    """The ways of the stages of sample_chunk_with: the seeds' part (the (sample, node row)
    pairs an op produces, in the form these Steps keep them), an op's picks (with
    `.targets(adj)`, its part), a node set's members from its parts, node aggregation's
    candidate edges, an edge set's rows."""

    seed_part: typing.Callable
    sample_op: typing.Callable
    members: typing.Callable
    induced: typing.Callable
    edge_rows: typing.Callable


def _step_members(parts: list, n_rows: int, n_samples: int, seed_row) -> _Members:
    s = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    r = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return _Members(s, r, n_rows, n_samples, seed_row)


def _step_edge_rows(adj: DenseAdjacency, parts: list, sources: _Members, targets: _Members):
    s, src, pos = _picked_edges(parts, sources)
    dst, ok = targets.find(s, adj.targets[pos])
    s, src, dst, pos = s[ok], src[ok], dst[ok], pos[ok]
    return chunk_edges(adj, s, src, dst, pos, sources)


def sample_chunk_with(
    steps: Steps,
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
) -> SubgraphChunk:
    """sample_chunk_columns with the given Steps (the same records either way)."""
    seed_table = dg.nodes[plan.seed_set]
    seed_rows, found = seed_table.lookup(seeds.node)
    counters["seeds_not_in_node_set"] += int((~found).sum())
    seeds = seeds.take(np.flatnonzero(found))
    seed_rows = seed_rows[found]
    n = len(seeds)
    produced = {plan.seed_op: steps.seed_part(n, seed_rows)}
    picked = collections.defaultdict(list)
    for op in plan.ops:
        parts = [produced[name] for name in op.inputs]
        step = steps.sample_op(dg, op, parts, seeds.sample, randomness)
        picked[op.edge_set].append(step)
        produced[op.name] = step.targets(dg.adjacency[op.edge_set])
    members = {}
    for name, table in dg.nodes.items():
        parts = [produced[op] for op in produced if plan.output_set(op) == name]
        seed_row = seed_rows if name == plan.seed_set else None
        members[name] = steps.members(parts, len(table.rows), n, seed_row)
    if plan.aggregation == NODE:
        picked = steps.induced(graph, dg, members)
    edge_rows = {}
    for name, info in graph.edge_sets.items():
        parts = picked.get(name, [])
        edge_rows[name] = steps.edge_rows(
            dg.adjacency[name], parts, members[info.source], members[info.target]
        )
    node_rows = {
        name: NodeRowsOfChunk(dg.nodes[name].rows, m.row[m.order], m.bounds)
        for name, m in members.items()
    }
    return SubgraphChunk(seeds.sample_id, seeds.seed_id, node_rows, edge_rows)


def chunk_edges(adj: DenseAdjacency, s, src, dst, pos, sources: _Members):
    """An edge set's rows of a chunk from its edges (sample, source and target output
    positions, adjacency position): ordered by (sample, source, target, edge key), each
    (sample, edge key) once, as ((2, m) indices, features, bounds)."""
    chosen, bounds = _assemble_jit().unique_edges(
        _int64(s), _int64(src), _int64(dst), adj.edge_keys[pos], sources.bounds
    )
    src, dst, pos = src[chosen], dst[chosen], pos[chosen]
    return np.stack([src, dst]), take_features(adj.features, pos), bounds


def _induced(graph: GraphInfo, dg: DenseGraph, members: dict[str, _Members]) -> dict:
    """Node aggregation: every out-edge of every member node (filtered by target later)."""
    picked = {}
    for name, info in graph.edge_sets.items():
        adj = dg.adjacency[name]
        m = members[info.source]
        rows, positions = expand_ranges(adj.starts[m.row], adj.degrees[m.row])
        picked[name] = [_Picked(m.sample, m.row, rows, positions)]
    return picked


class _Picked(typing.NamedTuple):
    """Edges picked from a frontier: edge i leaves frontier row `rows[i]` at `positions[i]`."""

    frontier_sample: np.ndarray  # sample index of each frontier row
    frontier_row: np.ndarray  # node row of each frontier row
    rows: np.ndarray
    positions: np.ndarray  # positions in the edge set's adjacency

    def targets(self, adj: DenseAdjacency) -> tuple[np.ndarray, np.ndarray]:
        """(sample index, target row) of every picked edge: the op's output nodes."""
        return self.frontier_sample[self.rows], adj.targets[self.positions]

    def without(self, drop: np.ndarray) -> _Picked:
        """The same edges less those where `drop` (one flag per picked edge) is set."""
        return self._replace(rows=self.rows[~drop], positions=self.positions[~drop])


def sample_op(
    dg: DenseGraph,
    op,
    parts: list[tuple[np.ndarray, np.ndarray]],
    sample_keys: np.ndarray,
    randomness: Randomness,
) -> _Picked:
    """One sampling op over the (sample index, node row) pairs its inputs produced.

    The frontier is their union without duplicates, in (sample, row) order; rows without
    out-edges drop out; each remaining row draws from its own stream (sampler.sample.randomness).
    """
    s, r, _ = _unique_pairs(
        np.concatenate([p[0] for p in parts]),
        np.concatenate([p[1] for p in parts]),
        len(sample_keys),
        len(dg.nodes[op.source].rows),
    )
    adj = dg.adjacency[op.edge_set]
    degree = adj.degrees[r]
    live = np.flatnonzero(degree > 0)
    s, r = s[live], r[live]
    stream = randomness.stream(op.key, sample_keys[s], dg.nodes[op.source].rows.fp[r])
    rows, positions = kernels("sampler.sample.choose_jit").choose(
        adj.starts[r],
        degree[live],
        stream,
        sample_size=op.sample_size,
        strategy=op.strategy,
        weights=adj.weights,
    )
    return _Picked(s, r, rows, positions)


def _picked_edges(parts: list[_Picked], sources: _Members):
    """(sample, output position of the source node, adjacency position) of every picked edge.

    A source's position is looked up once per frontier row, not once per edge (a frontier
    row has up to sample_size edges, or its whole degree under node aggregation)."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64)
    s, src = [], []
    for p in parts:
        local, _ = sources.find(p.frontier_sample, p.frontier_row)
        s.append(p.frontier_sample[p.rows])
        src.append(local[p.rows])
    return np.concatenate(s), np.concatenate(src), np.concatenate([p.positions for p in parts])


def _step_seed_part(n_samples: int, seed_rows: np.ndarray):
    return np.arange(n_samples), seed_rows


STEPS = Steps(_step_seed_part, sample_op, _step_members, _induced, _step_edge_rows)
