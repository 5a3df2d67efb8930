"""Link-prediction sampling: one subgraph per seed edge (and per negative).

A `symmetric_link_seed_op` seeds with edges of one edge set (`--seed_edge_set`). The ops whose
input is the seed op expand from both endpoints, each in its node set; the rest of the spec
runs as for node seeds, with the dense kernels (`sampler.sample.dense`).

Output, in TF-GNN's structured readout convention (as `add_readout` of
tensorflow_gnn/experimental/sampler/link_samplers.py builds it): a node set `_readout` of one
node per example (its `#id` is the sample id, its `label` 1 for a positive, 0 for a negative)
and edge sets `_readout/source` (source endpoint -> readout node) and `_readout/target`
(target endpoint -> readout node), so `tfgnn.structured_readout(graph, "source")` and
`(graph, "target")` return the endpoints' states. The source endpoint is node 0 of its node
set; the target endpoint is node 0 of its node set when that differs from the source's.

No leakage (unless `keep_seed_edges`): the example's pair (source a in set A, target b in set
B) is removed from its own subgraph. An edge u -> v of an edge set X that reads the seed edge
set's table (the same `metadata.filename`, either orientation) is dropped when
(X.source, X.target, u, v) is (A, B, a, b) or (B, A, b, a); with A == B both directions of the
pair go. Ops drop such an edge after choosing (so that frontier row keeps one edge fewer) and
do not expand through it; node aggregation's induced edges are filtered the same way.
Negatives get the same treatment, so a model cannot tell them apart by the missing edge.

Ids: an example's `seed_id` is `<source id>-><target id>`, its sample id the same plus `:<k>`
for the k-th repeat of a pair (k >= 1) and, for its negatives, `#neg<k>`. Node ids are
written there with `%`, `>`, `:` and `#` percent-escaped (`escape_id`; `urllib.parse.unquote`
undoes it), so two different pairs never share a sample id (`a:1->b` and `a->1:b` would).
Ids without those characters appear unchanged; the `#id` features of the nodes are never
escaped.

Seeds: the rows of a `#source`, `#target` table, or every edge of the seed edge set
(`edge_pairs`, edges whose endpoint is not in its node set included). A seed whose endpoint
is missing is counted in `seeds_not_in_node_set` and gives no example, on every placement.

Negatives (`negatives`, K): per positive, K examples with label 0, sample id
`<positive sample id>#neg<k>`, the same source and a target drawn uniformly from the target
node set's rows, the k-th draw of the stream `Randomness.negatives(sample key)`: a pure
function of (--seed, positive sample). Negatives that happen to be edges of the seed edge set
are kept and counted (`negatives_that_are_edges`).
"""

from __future__ import annotations

import collections
import dataclasses
import typing
from collections.abc import Iterator

import numpy as np

from sampler import ids
from sampler.arrays import expand_ranges
from sampler.batches import NodeBatch, bytes_array
from sampler.sample import dense, temporal
from sampler.sample.adjacency import Adjacency
from sampler.sample.chunk_stream import seed_chunks
from sampler.sample.dense import DenseGraph
from sampler.sample.plan import NODE, SamplingPlan
from sampler.sample.randomness import Randomness, draw
from sampler.sample.subgraph import NodeRowsOfChunk, Subgraph, SubgraphChunk
from sampler.schema import GraphInfo

READOUT = "_readout"
READOUT_SOURCE = "_readout/source"
READOUT_TARGET = "_readout/target"
LABEL = "label"
NEG = b"#neg"
ARROW = b"->"


@dataclasses.dataclass
class LinkSeeds:
    """Seed edge occurrences: one row per positive example."""

    sample: np.ndarray  # uint64 key: combine(source fp, target fp, occurrence)
    source: np.ndarray  # uint64 fingerprint of the source id
    target: np.ndarray  # uint64 fingerprint of the target id
    occurrence: np.ndarray  # int64: k for the k-th repeat of the pair
    time: np.ndarray | None = None  # each seed's time, from the seeds table's time column

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> LinkSeeds:
        time = None if self.time is None else self.time[index]
        return LinkSeeds(
            self.sample[index], self.source[index], self.target[index], self.occurrence[index], time
        )

    @classmethod
    def concat(cls, parts: list[LinkSeeds]) -> LinkSeeds:
        if not parts:
            return make_link_seeds(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        timed = [p.time is not None for p in parts]
        if any(timed) and not all(timed):
            raise ValueError("LinkSeeds with and without times")
        time = np.concatenate([p.time for p in parts]) if all(timed) else None
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in _FIELDS), time)


_FIELDS = ("sample", "source", "target", "occurrence")


def pair_keys(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """One uint64 per (source fp, target fp): the key seeds are sharded by."""
    return ids.combine(source, target)


def make_link_seeds(source: np.ndarray, target: np.ndarray, time=None) -> LinkSeeds:
    """Seeds from (source fp, target fp) pairs, all occurrences of a pair together; with
    `time` (the seeds table's), the repeats of a pair numbered in the order of their times."""
    source = np.asarray(source, np.uint64)
    target = np.asarray(target, np.uint64)
    if time is None:
        order = np.lexsort((target, source))
    else:
        time = np.asarray(time)
        time = time + time.dtype.type(0)  # -0.0 becomes 0.0: one order of the two
        order = np.lexsort((time, target, source))
        time = time[order]
    source, target = source[order], target[order]
    n = len(source)
    first = np.ones(n, dtype=bool)
    first[1:] = (source[1:] != source[:-1]) | (target[1:] != target[:-1])
    start = np.maximum.accumulate(np.where(first, np.arange(n), 0)) if n else np.zeros(0, int)
    occurrence = (np.arange(n) - start).astype(np.int64)
    sample = ids.combine(source, target, occurrence.astype(np.uint64))
    return LinkSeeds(sample, source, target, occurrence, time)


def edge_pairs(adj: Adjacency) -> tuple[np.ndarray, np.ndarray]:
    """(source fps, target fps) of every edge of a fingerprint-keyed adjacency (a shard, or a
    whole edge set), edges with an endpoint missing from its node set included: the default
    seeds of every placement and of the in-memory sampler, which reject those alike."""
    owner, positions = expand_ranges(adj.starts, adj.degrees)
    return adj.nodes[owner], adj.targets[positions]


def seeds_from_adjacency(dg: DenseGraph, plan: SamplingPlan) -> LinkSeeds:
    """Every edge of the seed edge set kept in `dg` (parallel edges are repeats of their
    pair); edges with a missing endpoint are not in `dg` (see `edge_pairs`)."""
    link = plan.link
    adj = dg.adjacency[link.edge_set]
    src_rows = np.repeat(np.arange(len(adj.degrees)), adj.degrees)
    dst_rows = adj.targets[expand_ranges(adj.starts, adj.degrees)[1]]
    return make_link_seeds(
        dg.nodes[link.source].rows.fp[src_rows], dg.nodes[link.target].rows.fp[dst_rows]
    )


def link_output_schema(schema, plan: SamplingPlan):
    """The input schema plus `_readout` (feature `label`) and `_readout/source|target`."""
    from sampler.protos import tensor_pb2

    out = type(schema)()
    out.CopyFrom(schema)
    out.node_sets[READOUT].features[LABEL].dtype = tensor_pb2.DT_INT64
    for name, end in ((READOUT_SOURCE, plan.link.source), (READOUT_TARGET, plan.link.target)):
        out.edge_sets[name].source = end
        out.edge_sets[name].target = READOUT
    return out


def has_edge(adj, src_rows: np.ndarray, dst_rows: np.ndarray) -> np.ndarray:
    """Whether each (source row, target row) is an edge: binary search in the source's
    adjacency list (targets are in canonical, i.e. ascending fingerprint = row, order)."""
    lo = adj.starts[src_rows].copy()
    return in_sorted_ranges(adj.targets, lo, lo + adj.degrees[src_rows], dst_rows)


def in_sorted_ranges(targets, lo: np.ndarray, end: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether values[i] is in targets[lo[i]:end[i]], each range sorted ascending."""
    lo = lower_bounds(targets, lo, end, values)
    ok = lo < end
    out = np.zeros(len(values), bool)
    out[ok] = targets[lo[ok]] == values[ok]
    return out


def lower_bounds(targets, lo: np.ndarray, end: np.ndarray, values: np.ndarray, above=False):
    """The first position of targets[lo[i]:end[i]] (sorted ascending) not below values[i]
    (`above`: above values[i])."""
    lo = lo.copy()
    hi = end.copy()
    while True:
        active = lo < hi
        if not active.any():
            break
        mid = (lo + hi) // 2
        at = targets[np.minimum(mid, len(targets) - 1)]
        right = active & ((at <= values) if above else (at < values))
        lo = np.where(right, mid + 1, lo)
        hi = np.where(active & ~right, mid, hi)
    return lo


def link_seed_times(dg, plan, src_rows, dst_rows, occurrence) -> tuple[np.ndarray, np.ndarray]:
    """(time, found) of each link seed: the time of its edge, the occurrence-th of the
    parallel edges source -> target in canonical order (the last when the seeds repeat a pair
    more often than it has edges); not found when the pair is no edge of the seed edge set."""
    adj = dg.adjacency[plan.link.edge_set]
    lo = adj.starts[src_rows]
    times = adj.features[plan.seed_time.feature]
    return pair_times(adj.targets, lo, lo + adj.degrees[src_rows], dst_rows, occurrence, times)


def pair_times(targets, lo, end, dst, occurrence, times) -> tuple[np.ndarray, np.ndarray]:
    """`link_seed_times` on any adjacency: pair i's edges are those of targets[lo[i]:end[i]]
    (sorted ascending, parallel edges in canonical order) equal to dst[i]; `times` per edge."""
    first = lower_bounds(targets, lo, end, dst)
    found = first < end
    found[found] = targets[first[found]] == dst[found]
    last = lower_bounds(targets, first, end, dst, above=True) - 1
    pos = np.minimum(first + occurrence, last)[found]
    times = np.asarray(times)
    out = np.zeros(len(dst), times.dtype)
    out[found] = times[pos]
    return out, found


def seed_edge_orientations(graph: GraphInfo, plan: SamplingPlan) -> dict[str, tuple[bool, bool]]:
    """The edge sets that read the seed edge set's table, each with (drops a -> b, drops
    b -> a): the (A, B) and (B, A) orientations of the docstring's No leakage (both with A == B)."""
    link = plan.link
    table = graph.edge_sets[link.edge_set].filename
    out = {}
    for name, info in graph.edge_sets.items():
        if info.filename != table:
            continue
        forward = (info.source, info.target) == (link.source, link.target)
        backward = (info.source, info.target) == (link.target, link.source)
        if forward or backward:
            out[name] = (forward, backward)
    return out


class _Exclusions:
    """Per edge set, the (source row, target row) pairs of each sample that must not appear."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, src_rows, dst_rows, enabled: bool):
        self.pairs: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
        if not enabled:
            return
        for name, (forward, backward) in seed_edge_orientations(graph, plan).items():
            self.pairs[name] = [(src_rows, dst_rows)] * forward + [(dst_rows, src_rows)] * backward

    def mask(self, edge_set: str, sample, u, v) -> np.ndarray:
        """True for the edges (sample, u -> v) of `edge_set` to drop."""
        out = np.zeros(len(sample), bool)
        for a, b in self.pairs.get(edge_set, []):
            out |= (a[sample] == u) & (b[sample] == v)
        return out


def _negatives(plan, dg, seeds: LinkSeeds, src_rows, dst_rows, k, randomness, counters):
    """Appends k negatives per positive; returns (sample keys, source rows, target rows,
    labels, negative index or -1)."""
    n = len(seeds)
    index = np.full(n, -1, np.int64)
    if k <= 0 or n == 0:
        return seeds.sample, src_rows, dst_rows, np.ones(n, np.int64), index
    n_targets = len(dg.nodes[plan.link.target].rows)
    neg_keys, neg_dst, neg_index = negative_draws(seeds.sample, k, n_targets, randomness)
    neg_src = np.repeat(src_rows, k)
    counters["negatives"] += len(neg_dst)
    is_edge = has_edge(dg.adjacency[plan.link.edge_set], neg_src, neg_dst)
    counters["negatives_that_are_edges"] += int(is_edge.sum())
    return (
        np.concatenate([seeds.sample, neg_keys]),
        np.concatenate([src_rows, neg_src]),
        np.concatenate([dst_rows, neg_dst]),
        np.concatenate([np.ones(n, np.int64), np.zeros(len(neg_dst), np.int64)]),
        np.concatenate([index, neg_index]),
    )


def negative_draws(sample: np.ndarray, k: int, n_targets: int, randomness: Randomness):
    """k negatives per positive sample key, positive-major: (sample keys, target rows, i.e.
    ranks by fingerprint in the target node set, negative index): the j-th draw of the
    stream `Randomness.negatives(sample)` times the target set's rows."""
    stream = randomness.negatives(sample)
    rows = [
        np.minimum((draw(stream, j) * n_targets).astype(np.int64), n_targets - 1) for j in range(k)
    ]
    dst = np.stack(rows, axis=1).ravel() if k else np.zeros(0, np.int64)
    index = np.tile(np.arange(k, dtype=np.int64), len(sample))
    keys = ids.combine(np.repeat(sample, k), np.uint64(0x6E6567), index)
    return keys, dst, index


def _without_seed_edges(picks: dense.Picks, exclusions, edge_set: str) -> dense.Picks:
    """`picks` less the edges that are a seed edge of their own sample (see _Exclusions)."""
    if edge_set not in exclusions.pairs:
        return picks
    return picks.without(exclusions.mask(edge_set, *picks.ends()))


def sample_link_chunk_columns(
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: LinkSeeds,
    randomness: Randomness,
    counters: collections.Counter,
    negatives: int = 0,
    keep_seed_edges: bool = False,
) -> SubgraphChunk:
    """The examples of a chunk of seed edges as one SubgraphChunk: positives, then negatives."""
    link = plan.link
    src_rows, ok_s = dg.nodes[link.source].lookup(seeds.source)
    dst_rows, ok_t = dg.nodes[link.target].lookup(seeds.target)
    found = ok_s & ok_t
    counters["seeds_not_in_node_set"] += int((~found).sum())
    keep = np.flatnonzero(found)
    seeds, src_rows, dst_rows = seeds.take(keep), src_rows[keep], dst_rows[keep]
    seed_time = None
    if plan.seed_time is not None and seeds.time is not None:  # the seeds table's times
        seed_time = np.asarray(seeds.time)
    elif plan.seed_time is not None:  # only seeds that are edges have a time
        seed_time, timed = link_seed_times(dg, plan, src_rows, dst_rows, seeds.occurrence)
        counters["seeds_without_time"] += int((~timed).sum())
        keep = np.flatnonzero(timed)
        seeds, src_rows, dst_rows = seeds.take(keep), src_rows[keep], dst_rows[keep]
        seed_time = seed_time[keep]
    positive_ids = [
        pair + (b":" + str(k).encode() if k else b"")
        for pair, k in zip(
            _pair_ids(dg, plan, src_rows, dst_rows), seeds.occurrence.tolist(), strict=True
        )
    ]
    keys, src_rows, dst_rows, labels, neg_index = _negatives(
        plan, dg, seeds, src_rows, dst_rows, negatives, randomness, counters
    )
    n = len(keys)
    times = None
    if seed_time is not None:  # a negative's seed time is its positive's
        seed_time = np.concatenate([seed_time, np.repeat(seed_time, max(negatives, 0))])
        times = (seed_time, plan.seed_time.kind)
    repeats = np.repeat(np.arange(len(positive_ids)), max(negatives, 0)).tolist()
    sample_ids = bytes_array(
        positive_ids
        + [
            positive_ids[i] + NEG + str(j).encode()
            for i, j in zip(repeats, neg_index[len(positive_ids) :].tolist(), strict=True)
        ]
    )
    seed_ids = bytes_array(_pair_ids(dg, plan, src_rows, dst_rows))
    exclusions = _Exclusions(graph, plan, src_rows, dst_rows, not keep_seed_edges)
    seed_parts = {link.source: [dense.seed_part(n, src_rows)]}
    seed_parts.setdefault(link.target, []).append(dense.seed_part(n, dst_rows))
    produced: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    picked = collections.defaultdict(list)
    for op in plan.ops:
        parts = []
        for name in op.inputs:
            parts.extend(seed_parts[op.source] if name == plan.seed_op else [produced[name]])
        step = dense.sample_op(dg, op, parts, keys, randomness, times)
        step = _without_seed_edges(step, exclusions, op.edge_set)
        picked[op.edge_set].append(step)
        produced[op.name] = step.targets()
    members = {}
    for name, table in dg.nodes.items():
        parts = [produced[op.name] for op in plan.ops if op.target == name]
        parts += seed_parts.get(name, [])
        seed_row = src_rows if name == link.source else dst_rows if name == link.target else None
        members[name] = dense.Members(parts, len(table.rows), n, seed_row)
    if plan.aggregation == NODE:
        picked = dense.induced(graph, members)
    edge_rows = {}
    for name, info in graph.edge_sets.items():
        adj = dg.adjacency[name]
        parts = picked.get(name, [])
        if name in exclusions.pairs and parts and isinstance(parts[0], dense.Induced):
            parts = [part.picks(adj) for part in parts]
        parts = [_without_seed_edges(p, exclusions, name) for p in parts]
        edge_rows[name] = dense.edge_rows(adj, parts, members[info.source], members[info.target])
    one_each = np.arange(n + 1)
    for name, end, rows in (
        (READOUT_SOURCE, link.source, src_rows),
        (READOUT_TARGET, link.target, dst_rows),
    ):
        local = members[end].find(np.arange(n), rows)
        edge_rows[name] = (np.stack([local, np.zeros(n, np.int64)]), {}, one_each)
    node_rows = dense.node_rows(dg, members)
    node_rows[READOUT] = NodeRowsOfChunk(
        NodeBatch(keys, sample_ids, {LABEL: labels}), None, one_each
    )
    chunk = SubgraphChunk(sample_ids, seed_ids, node_rows, edge_rows, seed_time)
    return temporal.filter_induced(chunk, plan) if plan.aggregation == NODE else chunk


def escape_id(node_id: bytes) -> bytes:
    """A node id as it appears in link seed and sample ids: `%`, `>`, `:` and `#` are
    percent-escaped (`urllib.parse.unquote` undoes it), so that `->`, `:<k>` and `#neg<k>`
    can only be separators; other ids appear unchanged."""
    for char, code in _ESCAPES:
        if char in node_id:
            node_id = node_id.replace(char, code)
    return node_id


_ESCAPES = ((b"%", b"%25"), (b">", b"%3E"), (b":", b"%3A"), (b"#", b"%23"))


def _pair_ids(dg, plan, src_rows, dst_rows) -> list[bytes]:
    """`<source id>-><target id>` per (source row, target row), ids escaped (escape_id)."""
    src = dg.nodes[plan.link.source].rows.ids[src_rows].tolist()
    dst = dg.nodes[plan.link.target].rows.ids[dst_rows].tolist()
    return [escape_id(a) + ARROW + escape_id(b) for a, b in zip(src, dst, strict=True)]


# Seed edges per chunk, on every runner and placement. A chunk's records are its positives,
# then their negatives, so the order of the records in a file depends on where the chunks
# start: one size for all keeps the files the same bytes (tests/test_same_files.py).
LINK_CHUNK = 128


@dataclasses.dataclass(frozen=True)
class LinkSampling:
    """Link seeds, as the `worker` and `topology` placements sample them (the counterpart of
    `sampler.sample.in_memory.NodeSeedSampling`): `sample_links_in_memory` on one bucket."""

    negatives: int = 0
    keep_seed_edges: bool = False
    seeds_type: typing.ClassVar = LinkSeeds

    def output_schema(self, schema, plan: SamplingPlan):
        return temporal.output_schema(link_output_schema(schema, plan), plan.seed_time)

    def sample_chunks(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        """`sample` as SubgraphChunks (for sampler.sample.encode_chunk), LINK_CHUNK seed edges
        at a time whatever the placement's `chunk_size`: see LINK_CHUNK."""
        return sample_link_chunks(
            graph,
            plan,
            dense,
            seeds,
            randomness,
            counters,
            self.negatives,
            self.keep_seed_edges,
            LINK_CHUNK,
        )

    def seed_chunks(self, seeds, chunk_size: int):
        """The chunks of seed edges `sample_chunks` samples one by one, in its order:
        LINK_CHUNK whatever `chunk_size` (for sampler.sample.chunk_stream)."""
        return seed_chunks(seeds, seed_order(seeds), LINK_CHUNK)

    def sample_chunk(self, graph, plan, dense, chunk, randomness, counters) -> SubgraphChunk:
        """One chunk of `seed_chunks` as a SubgraphChunk."""
        return sample_link_chunk_columns(
            graph, plan, dense, chunk, randomness, counters, self.negatives, self.keep_seed_edges
        )

    def sample(self, graph, plan, dense, seeds, randomness, counters, chunk_size: int):
        return sample_links_in_memory(
            graph,
            plan,
            dense,
            seeds,
            randomness,
            counters,
            self.negatives,
            self.keep_seed_edges,
            LINK_CHUNK,
        )


def sample_links_in_memory(
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: LinkSeeds,
    randomness: Randomness,
    counters: collections.Counter,
    negatives: int = 0,
    keep_seed_edges: bool = False,
    chunk_size: int = LINK_CHUNK,
) -> Iterator[Subgraph]:
    """Samples every seed edge, `chunk_size` at a time, in sample-key order."""
    for chunk in sample_link_chunks(
        graph, plan, dg, seeds, randomness, counters, negatives, keep_seed_edges, chunk_size
    ):
        yield from chunk.subgraphs(counters)


def sample_link_chunks(
    graph: GraphInfo,
    plan: SamplingPlan,
    dg: DenseGraph,
    seeds: LinkSeeds,
    randomness: Randomness,
    counters: collections.Counter,
    negatives: int = 0,
    keep_seed_edges: bool = False,
    chunk_size: int = LINK_CHUNK,
) -> Iterator[SubgraphChunk]:
    """`sample_links_in_memory` as SubgraphChunks (the same examples in the same order)."""
    for chunk in seed_chunks(seeds, seed_order(seeds), chunk_size):
        yield sample_link_chunk_columns(
            graph, plan, dg, chunk, randomness, counters, negatives, keep_seed_edges
        )


def seed_order(seeds: LinkSeeds) -> np.ndarray:
    """The order in which link seeds are sampled and written: by sample key."""
    return np.argsort(seeds.sample, kind="stable")
