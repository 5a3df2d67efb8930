"""Sampling with the whole graph in memory, on dense row indices: the in-memory sampler's and
the `worker` and `topology` placements' (node and link seeds).

Node tables are sorted by fingerprint, so a node's row is its rank by fingerprint; adjacency
lists are indexed by source row and point at target rows; the graph's arrays go to the
kernels read-only (built here or mapped from a snapshot: one compiled signature). It makes exactly the same choices
as the fingerprint-keyed kernels of the `sharded` placement (`sampling.py`, `assemble.py`):
same random streams, same canonical neighbour order, same output order.

A chunk of seeds is sampled by the compiled kernels of sampler/sample/sample_jit.py: per op,
one kernel goes from the frontier (the op's distinct (sample, row) inputs with out-edges) to
its picks and their targets; per edge set, one goes from the picks to the ordered,
deduplicated (source, target) output positions and adjacency positions, sample by sample.
tests/test_sampling_compiled.py checks them against the numpy step-by-step sampler they
replaced (tests/kernel_oracles.py).
"""

from __future__ import annotations

import collections
import dataclasses
import typing

import numpy as np

from sampler.arrays import expand_ranges, read_only
from sampler.batches import Seeds, take_features
from sampler.jit_loader import kernels
from sampler.node_table import NodeTable
from sampler.sample import temporal, temporal_dense
from sampler.sample.adjacency import Adjacency
from sampler.sample.plan import NODE, RANDOM_UNIFORM, SamplingPlan
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
    jit = kernels("sampler.sample.adjacency_jit")
    for name, info in graph.edge_sets.items():
        adj = dense.adjacency[name]
        csr = (read_only(_int64(a)) for a in (adj.starts, adj.degrees, adj.targets))
        loops, parallel = (int(x) for x in jit.shape_counts(*csr, info.source == info.target))
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
            # Not copied: both are in numpy's memory (NodeTable.lookup, build_adjacency), which
            # it asks the kernel to back with huge pages; sampling's random reads of targets
            # and edge keys cost 10% more CPU in 4 KB pages (at ogbn-mag's size).
            targets, edge_keys = dst_rows, adj.edge_keys
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


def _jit():
    return kernels("sampler.sample.sample_jit")


def _in_node_order(adj: Adjacency) -> bool:
    """Whether node i's out-edges are positions starts[i] .. starts[i] + degrees[i] and the
    nodes' runs follow one another from 0 to the last edge (a CSR in node order)."""
    degrees = adj.degrees
    if len(degrees) == 0:
        return adj.num_edges == 0
    if adj.starts[0] != 0 or int(degrees.sum()) != adj.num_edges:
        return False
    return bool(np.array_equal(adj.starts[1:], np.cumsum(degrees[:-1])))


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


def _stacked(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """Parts (bounds per sample, rows) as unique_parts' (P, n + 1) bounds and their rows."""
    offsets = np.cumsum([0] + [len(p[1]) for p in parts[:-1]])
    bounds = np.stack([p[0] + o for p, o in zip(parts, offsets, strict=True)])
    return _int64(bounds), _int64(np.concatenate([p[1] for p in parts]))


def seed_part(n_samples: int, seed_rows: np.ndarray):
    """A part: (bounds per sample, node rows); sample s produced rows[bounds[s]:bounds[s+1]]."""
    return np.arange(n_samples + 1, dtype=np.int64), _int64(seed_rows)


class Picks(typing.NamedTuple):
    """An op's picks per frontier row: row f (sample fs[f], node row fr[f]) picked the
    adjacency positions pos[bounds[f] : bounds[f + 1]], whose targets are the node rows
    tr[bounds[f] : bounds[f + 1]]; fbounds: the frontier rows of each sample."""

    fs: np.ndarray
    fr: np.ndarray
    fbounds: np.ndarray
    bounds: np.ndarray
    pos: np.ndarray
    tr: np.ndarray

    def targets(self) -> tuple[np.ndarray, np.ndarray]:
        """The op's part: (bounds per sample, target rows)."""
        return self.bounds[self.fbounds], self.tr

    def ends(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(sample, source row, target row) of every pick."""
        owner = np.repeat(np.arange(len(self.fs)), np.diff(self.bounds))
        return self.fs[owner], self.fr[owner], self.tr

    def without(self, drop: np.ndarray) -> Picks:
        """The same picks less those where `drop` (one flag per pick) is set."""
        owner = np.repeat(np.arange(len(self.fs)), np.diff(self.bounds))[~drop]
        bounds = np.zeros(len(self.fs) + 1, np.int64)
        np.cumsum(np.bincount(owner, minlength=len(self.fs)), out=bounds[1:])
        return self._replace(bounds=bounds, pos=self.pos[~drop], tr=self.tr[~drop])


def sample_op(dg: DenseGraph, op, parts, sample_keys: np.ndarray, randomness, times=None) -> Picks:
    """One sampling op over the parts its inputs produced: the frontier is their distinct
    (sample, row) pairs with out-edges, in (sample, row) order; each row draws from its own
    stream (sampler.sample.randomness). A temporal op needs `times`: (seed time per sample,
    time kind); its picks are made by sampler.sample.temporal_dense."""
    jit = _jit()
    n_rows = len(dg.nodes[op.source].rows)
    adj = dg.adjacency[op.edge_set]
    bounds, rows = jit.unique_parts(*_stacked(parts), n_rows)
    starts, degrees, targets, fp = (
        read_only(a) for a in (adj.starts, adj.degrees, adj.targets, dg.nodes[op.source].rows.fp)
    )
    fs, fr, fbounds = jit.live_frontier(bounds, rows, degrees)
    if op.temporal is not None:
        out = temporal_dense.sample_op(dg, op, (fs, fr), sample_keys, randomness, *times)
        return Picks(fs, fr, fbounds, *out)
    prefix = randomness.stream_prefix(op.key)
    keys = np.ascontiguousarray(sample_keys, dtype=np.uint64)
    if op.strategy == RANDOM_UNIFORM:
        out = jit.pick_uniform(
            fs, fr, starts, degrees, targets, keys, fp, prefix, int(op.sample_size)
        )
        return Picks(fs, fr, fbounds, *out)
    stream = jit.streams(fs, fr, keys, fp, prefix)
    rows, pos = kernels("sampler.sample.choose_jit").choose(
        adj.starts[fr],
        adj.degrees[fr],
        stream,
        sample_size=op.sample_size,
        strategy=op.strategy,
        weights=adj.weights,
    )
    out = jit.picks_by_row(_int64(rows), _int64(pos), len(fs), targets)
    return Picks(fs, fr, fbounds, *out)


class Members:
    """A node set's distinct (sample, row) pairs in a chunk, from the parts that produced
    them, and their output positions: per sample the seed first, then by row (= fingerprint)."""

    def __init__(self, parts: list, n_rows: int, n_samples: int, seed_row):
        self.n_rows = n_rows
        if parts:
            self.bounds, self.row = _jit().unique_parts(*_stacked(parts), n_rows)
        else:
            self.bounds, self.row = np.zeros(n_samples + 1, np.int64), np.zeros(0, np.int64)
        has_seed = seed_row is not None
        seed = _int64(seed_row) if has_seed else np.zeros(n_samples, np.int64)
        self.local, self.order = kernels("sampler.sample.assemble_jit").member_positions(
            self.bounds, self.row, seed, has_seed
        )

    @property
    def sample(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.bounds) - 1), np.diff(self.bounds))

    def find(self, sample: np.ndarray, row: np.ndarray) -> np.ndarray:
        """The output position of each (sample, row), all members."""
        keys = self.sample * self.n_rows + self.row  # ascending: by sample, then row
        return self.local[np.searchsorted(keys, sample * self.n_rows + row)]


class Induced(typing.NamedTuple):
    """Node aggregation's candidates: every out-edge of every member (sample, row)."""

    fs: np.ndarray
    fr: np.ndarray

    def picks(self, adj: DenseAdjacency) -> Picks:
        """The same edges as Picks (to filter them)."""
        degrees = adj.degrees[self.fr]
        bounds = np.concatenate([[0], np.cumsum(degrees)]).astype(np.int64)
        pos = expand_ranges(adj.starts[self.fr], degrees)[1]
        return Picks(self.fs, self.fr, None, bounds, _int64(pos), adj.targets[pos])


def induced(graph: GraphInfo, members: dict[str, Members]) -> dict:
    return {
        name: [Induced(_int64(members[info.source].sample), members[info.source].row)]
        for name, info in graph.edge_sets.items()
    }


def edge_rows(adj: DenseAdjacency, parts: list, sources: Members, targets: Members):
    """An edge set's rows of a chunk from its picks (or node aggregation's candidates):
    ordered by (sample, source, target, edge key), each (sample, edge key) once, as
    ((2, m) output positions, features, bounds per sample), in one kernel."""
    empty = np.zeros(0, np.int64)
    if parts and isinstance(parts[0], Induced):
        (part,) = parts
        fs, fr = part.fs, part.fr
        lo = adj.starts[fr]
        hi = lo + adj.degrees[fr]
        picks, picked, identity = empty, empty, True
    elif parts:
        offsets = np.cumsum([0] + [len(p.pos) for p in parts])
        fs = np.concatenate([p.fs for p in parts])
        fr = np.concatenate([p.fr for p in parts])
        lo = np.concatenate([p.bounds[:-1] + o for p, o in zip(parts, offsets, strict=False)])
        hi = np.concatenate([p.bounds[1:] + o for p, o in zip(parts, offsets, strict=False)])
        picks, identity = np.concatenate([p.pos for p in parts]), False
        picked = _int64(np.concatenate([p.tr for p in parts]))
    else:
        fs = fr = lo = hi = picks = picked = empty
        identity = False
    part_bounds = np.cumsum([0] + [len(p.fs) for p in parts]).astype(np.int64)
    edges, pos, bounds = _jit().chunk_edges(
        *(fs, fr, lo, hi, picks, picked, identity, part_bounds, len(sources.bounds) - 1),
        *(sources.bounds, sources.row, sources.local, sources.n_rows),
        *(targets.bounds, targets.row, targets.local, targets.n_rows),
        *(read_only(adj.targets), read_only(adj.edge_keys)),
    )
    return edges, take_features(adj.features, pos), bounds


def sample_chunk_columns(
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: Seeds,
    randomness: Randomness,
    counters: collections.Counter,
) -> SubgraphChunk:
    """The subgraphs of a chunk of seeds as one SubgraphChunk: samples in the order of
    `seeds`, less those whose seed is not in the seed node set."""
    seed_rows, found = dg.nodes[plan.seed_set].lookup(seeds.node)
    counters["seeds_not_in_node_set"] += int((~found).sum())
    seeds = seeds.take(np.flatnonzero(found))
    seed_rows = seed_rows[found]
    n = len(seeds)
    seed_times = temporal_dense.seed_times(dg, plan, seed_rows, seeds)
    times = None if seed_times is None else (seed_times, plan.seed_time.kind)
    produced = {plan.seed_op: seed_part(n, seed_rows)}
    picked = collections.defaultdict(list)
    for op in plan.ops:
        inputs = [produced[name] for name in op.inputs]
        step = sample_op(dg, op, inputs, seeds.sample, randomness, times)
        picked[op.edge_set].append(step)
        produced[op.name] = step.targets()
    members = {}
    for name, table in dg.nodes.items():
        parts = [produced[op] for op in produced if plan.output_set(op) == name]
        seed_row = seed_rows if name == plan.seed_set else None
        members[name] = Members(parts, len(table.rows), n, seed_row)
    if plan.aggregation == NODE:
        picked = induced(graph, members)
    edges = {
        name: edge_rows(
            dg.adjacency[name], picked.get(name, []), members[info.source], members[info.target]
        )
        for name, info in graph.edge_sets.items()
    }
    nodes = node_rows(dg, members)
    chunk = SubgraphChunk(seeds.sample_id, seeds.seed_id, nodes, edges, seed_times)
    return temporal.filter_induced(chunk, plan) if plan.aggregation == NODE else chunk


def node_rows(dg: DenseGraph, members: dict[str, Members]) -> dict[str, NodeRowsOfChunk]:
    """Each node set's rows of a chunk, in output order."""
    return {
        name: NodeRowsOfChunk(dg.nodes[name].rows, m.row[m.order], m.bounds)
        for name, m in members.items()
    }
