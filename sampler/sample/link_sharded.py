"""Link seeds on the `sharded` placement, numpy only: the pieces that
sampler.beam.sample.sharded_links moves between shards, target ranges and buckets, and the
kernels that make the same examples as `sampler.sample.link` (whose docstring defines them)
without the whole graph in one process.

- Endpoints: a seed's source and target are looked up in their node sets' shards
  (`endpoint_ids`); `positives` joins both answers per bucket of sample keys, counts
  `seeds_not_in_node_set` and names the examples.
- Negatives: the k-th negative's target is the node of global row `draw * n` of the target
  set (`link.negative_draws`), a row being the rank by fingerprint. The fingerprints are
  split into 2**bits ranges by their top bits; each range's row count (`range_counts`,
  summed over shards) says which range holds a row (`negative_requests`), and that range's
  fingerprints, sorted, give the node (`resolve_negatives`).
- No leakage: frontier rows carry their sample's pair (`PairNodes`), so an op drops the
  seed edges it chose (`drop_seed_edges`) and does not expand through them; the assembly
  drops them again (node aggregation's induced edges) before `assemble_link_chunks`.
- Time (a temporal spec): a seed's time is its edge's, found on the source's shard of the
  seed edge set (`seed_times`, `link.pair_times`); the examples, negatives' requests and
  frontier rows carry it (`time`), a negative its positive's.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np

from sampler.batches import NodeBatch, SampledEdges, SampleNodes, Seeds, bytes_array
from sampler.sample import link
from sampler.sample.adjacency import Adjacency
from sampler.sample.assemble import assembled, chunks_of
from sampler.sample.randomness import Randomness


def _take(obj, index):
    values = (getattr(obj, f.name) for f in dataclasses.fields(obj))
    return type(obj)(*(None if v is None else v[index] for v in values))


def _concat(cls, parts: list, empty):
    """The parts' fields concatenated (an optional field that the first part lacks: None)."""
    if not parts:
        return empty

    def cat(name):
        values = [getattr(p, name) for p in parts]
        return None if values[0] is None else np.concatenate(values)

    return cls(*(cat(f.name) for f in dataclasses.fields(cls)))


@dataclasses.dataclass
class PairNodes:
    """Frontier rows (sample, node) with their sample's seed pair (source fp, target fp)."""

    sample: np.ndarray  # uint64
    node: np.ndarray  # uint64
    source: np.ndarray  # uint64
    target: np.ndarray  # uint64
    time: np.ndarray | None = None  # a temporal spec's seed time

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> PairNodes:
        return _take(self, index)

    @classmethod
    def concat(cls, parts: list[PairNodes]) -> PairNodes:
        e = np.zeros(0, np.uint64)
        return _concat(cls, parts, cls(e, e, e, e))

    def unique(self) -> PairNodes:
        """Sorted by (sample, node) without duplicates (a sample has one pair)."""
        return self if len(self) == 0 else self.take(self.nodes().unique_index())

    def nodes(self) -> SampleNodes:
        return SampleNodes(self.sample, self.node)


@dataclasses.dataclass
class LinkExamples:
    """One row per example (positive or negative): its key, pair, label and ids."""

    sample: np.ndarray  # uint64 sample key
    source: np.ndarray  # uint64 source fp
    target: np.ndarray  # uint64 target fp
    label: np.ndarray  # int64: 1 positive, 0 negative
    sample_id: np.ndarray  # object array of bytes
    seed_id: np.ndarray  # object array of bytes
    time: np.ndarray | None = None  # a temporal spec's seed time (a negative: its positive's)

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> LinkExamples:
        return _take(self, index)

    @classmethod
    def concat(cls, parts: list[LinkExamples]) -> LinkExamples:
        e = np.zeros(0, np.uint64)
        b = bytes_array([])
        return _concat(cls, parts, cls(e, e, e, np.zeros(0, np.int64), b, b))

    def seeds(self) -> Seeds:
        return Seeds(self.sample, self.sample_id, self.seed_id, self.source)

    def pair_nodes(self, ends: str) -> PairNodes:
        """The frontier of the endpoint(s) `ends` ('source', 'target')."""
        return PairNodes(self.sample, getattr(self, ends), self.source, self.target, self.time)


@dataclasses.dataclass
class NegativeRequests:
    """Negatives whose target is row `rank` (sorted by fp) of one target range."""

    sample: np.ndarray  # uint64: the negative's sample key
    source: np.ndarray  # uint64
    rank: np.ndarray  # int64 within the range
    index: np.ndarray  # int64: k of the k-th negative of its positive
    parent_id: np.ndarray  # bytes: the positive's sample id
    prefix: np.ndarray  # bytes: `<escaped source id>->`
    time: np.ndarray | None = None  # the positive's seed time

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> NegativeRequests:
        return _take(self, index)

    @classmethod
    def concat(cls, parts: list[NegativeRequests]) -> NegativeRequests:
        return _concat(cls, parts, None)


def endpoint_ids(table, requests: SampleNodes) -> tuple[np.ndarray, np.ndarray]:
    """(sample keys, node ids) of the requests whose node is in `table` (a NodeTable shard)."""
    if table is None or len(requests) == 0:
        return np.zeros(0, np.uint64), bytes_array([])
    index, found = table.lookup(requests.node)
    return requests.sample[found], table.rows.ids[index[found]]


def _ids_of(samples: np.ndarray, answers: list[tuple[np.ndarray, np.ndarray]], empty=None):
    """(value, found) per sample key of (sample keys, values) answers; `empty`: the values
    when there is no answer (default: None ids)."""
    keys = np.concatenate([a[0] for a in answers]) if answers else np.zeros(0, np.uint64)
    names = np.concatenate([a[1] for a in answers]) if answers else bytes_array([])
    order = np.argsort(keys, kind="stable")
    keys, names = keys[order], names[order]
    pos = np.minimum(np.searchsorted(keys, samples), max(len(keys) - 1, 0))
    ok = keys[pos] == samples if len(keys) else np.zeros(len(samples), bool)
    if not len(keys):
        return (bytes_array([None] * len(samples)) if empty is None else empty), ok
    return names[pos], ok


def seed_times(adj: Adjacency | None, seeds: link.LinkSeeds, feature: str):
    """(sample keys, times) of the seeds whose pair is an edge of a shard of the seed edge
    set (the shard of their sources): the time of their edge (`link.pair_times`); with a
    seeds table's `seed_time` column (`seeds.time`), every seed's own time, edge or not."""
    if seeds.time is not None:
        return seeds.sample, np.asarray(seeds.time)
    if adj is None or len(seeds) == 0:
        return np.zeros(0, np.uint64), np.zeros(0, np.int64)
    start, degree = adj.lookup(seeds.source)
    times, found = link.pair_times(
        adj.targets, start, start + degree, seeds.target, seeds.occurrence, adj.features[feature]
    )
    return seeds.sample[found], times[found]


def positives(
    seeds: link.LinkSeeds, source_ids: list, target_ids: list, counters, times=None
) -> LinkExamples:
    """The positive examples of `seeds` whose endpoints were both found (`endpoint_ids`
    answers of their source and target sets); the others are counted in seeds_not_in_node_set.
    A temporal spec's `times` (`seed_times` answers): of those found, the seeds without a
    time are counted in seeds_without_time and dropped."""
    a_ids, ok_a = _ids_of(seeds.sample, source_ids)
    b_ids, ok_b = _ids_of(seeds.sample, target_ids)
    found = ok_a & ok_b
    counters["seeds_not_in_node_set"] += int((~found).sum())
    time = None
    if times is not None:
        time, timed = _ids_of(seeds.sample, times, np.zeros(len(seeds), np.int64))
        counters["seeds_without_time"] += int((found & ~timed).sum())
        found &= timed
    keep = np.flatnonzero(found)
    seeds = seeds.take(keep)
    pairs = [
        link.escape_id(a) + link.ARROW + link.escape_id(b)
        for a, b in zip(a_ids[keep].tolist(), b_ids[keep].tolist(), strict=True)
    ]
    sample_ids = [
        pair + (b":" + str(k).encode() if k else b"")
        for pair, k in zip(pairs, seeds.occurrence.tolist(), strict=True)
    ]
    return LinkExamples(
        seeds.sample,
        seeds.source,
        seeds.target,
        np.ones(len(seeds), np.int64),
        bytes_array(sample_ids),
        bytes_array(pairs),
        None if time is None else time[keep],
    )


def range_bits(num_ranges: int) -> int:
    """Top bits of a fingerprint that name its range: at least `num_ranges` ranges."""
    return max(1, int(num_ranges - 1).bit_length())


def range_of(fps: np.ndarray, bits: int) -> np.ndarray:
    return (np.asarray(fps, np.uint64) >> np.uint64(64 - bits)).astype(np.int64)


def range_counts(fps: np.ndarray, bits: int) -> np.ndarray:
    """Rows per range (int64, 2**bits)."""
    return np.bincount(range_of(fps, bits), minlength=1 << bits).astype(np.int64)


def negative_requests(
    examples: LinkExamples, k: int, counts: np.ndarray, randomness: Randomness, counters
) -> list[tuple[int, NegativeRequests]]:
    """k negatives per positive (`link.negative_draws` over the target set's rows, `counts`
    per range summed over shards), as (range, NegativeRequests) for `resolve_negatives`."""
    if k <= 0 or len(examples) == 0:
        return []
    ends = np.cumsum(counts)
    n_targets = int(ends[-1])
    keys, rows, index = link.negative_draws(examples.sample, k, n_targets, randomness)
    counters["negatives"] += len(keys)
    group = np.searchsorted(ends, rows, side="right")
    rank = rows - (ends[group] - counts[group])
    parent = np.repeat(np.arange(len(examples)), k)
    prefix = bytes_array(
        [s.partition(link.ARROW)[0] + link.ARROW for s in examples.seed_id.tolist()]
    )
    requests = NegativeRequests(
        keys,
        examples.source[parent],
        rank,
        index,
        examples.sample_id[parent],
        prefix[parent],
        None if examples.time is None else examples.time[parent],
    )
    order = np.argsort(group, kind="stable")
    bounds = np.searchsorted(group[order], np.arange(len(counts) + 1))
    return [
        (g, requests.take(order[bounds[g] : bounds[g + 1]]))
        for g in range(len(counts))
        if bounds[g + 1] > bounds[g]
    ]


def resolve_negatives(requests: NegativeRequests, fps: np.ndarray, ids: np.ndarray) -> LinkExamples:
    """The negatives of one range, given that range's target fingerprints and ids (any order)."""
    order = np.argsort(fps)
    target, names = fps[order][requests.rank], ids[order][requests.rank]
    escaped = [link.escape_id(n) for n in names.tolist()]
    return LinkExamples(
        requests.sample,
        requests.source,
        target,
        np.zeros(len(requests), np.int64),
        bytes_array(
            [
                p + link.NEG + str(k).encode()
                for p, k in zip(requests.parent_id.tolist(), requests.index.tolist(), strict=True)
            ]
        ),
        bytes_array([p + e for p, e in zip(requests.prefix.tolist(), escaped, strict=True)]),
        requests.time,
    )


def has_edges(adj: Adjacency, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Whether each source -> target is an edge of a fingerprint-keyed adjacency shard (the
    sources'; targets are sorted by fingerprint within a source)."""
    start, degree = adj.lookup(source)
    return link.in_sorted_ranges(adj.targets, start, start + degree, target)


class SeedPairs:
    """Sample key -> its seed pair, for the samples of one shard or bucket."""

    def __init__(self, sample: np.ndarray, source: np.ndarray, target: np.ndarray):
        order = np.argsort(sample, kind="stable")
        self.sample, self.source, self.target = sample[order], source[order], target[order]

    def of(self, sample: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(source, target, found) per sample key."""
        if len(self.sample) == 0:
            z = np.zeros(len(sample), np.uint64)
            return z, z, np.zeros(len(sample), bool)
        pos = np.minimum(np.searchsorted(self.sample, sample), len(self.sample) - 1)
        return self.source[pos], self.target[pos], self.sample[pos] == sample


def drop_seed_edges(edges: SampledEdges, orientation: tuple[bool, bool], pairs: SeedPairs):
    """`edges` of one edge set less each sample's own seed edge (`link.seed_edge_orientations`:
    a -> b when the first flag is set, b -> a when the second is)."""
    a, b, ok = pairs.of(edges.sample)
    drop = np.zeros(len(edges), bool)
    if orientation[0]:
        drop |= ok & (edges.src == a) & (edges.dst == b)
    if orientation[1]:
        drop |= ok & (edges.src == b) & (edges.dst == a)
    return edges.take(np.flatnonzero(~drop)) if drop.any() else edges


def assemble_link_chunks(
    graph,
    plan,
    examples: LinkExamples,
    nodes: dict,
    edges: dict,
    counters: collections.Counter,
    keep_seed_edges: bool,
    chunk_size: int = 512,
):
    """One bucket's examples as SubgraphChunks (the records of sample_link_chunk_columns):
    sampler.sample.assemble's assembly with both endpoints first in their node sets, the seed
    edges dropped (unless `keep_seed_edges`), and the readout node set and edge sets."""
    if not keep_seed_edges:
        pairs = SeedPairs(examples.sample, examples.source, examples.target)
        for name, orientation in link.seed_edge_orientations(graph, plan).items():
            edges[name] = [drop_seed_edges(e, orientation, pairs) for e in edges.get(name, [])]
    ends = {plan.link.source: examples.source}
    ends.setdefault(plan.link.target, examples.target)
    out = assembled(graph, plan, examples.seeds(), nodes, edges, counters, ends)
    examples = examples.take(out.order)
    n = len(examples)
    all_samples = np.arange(n)
    one_each = np.arange(n + 1)
    node_rows, edge_rows = dict(out.node_rows), dict(out.edge_rows)
    for name, end, fps in (
        (link.READOUT_SOURCE, plan.link.source, examples.source),
        (link.READOUT_TARGET, plan.link.target, examples.target),
    ):
        local, _ = out.index[end].find(all_samples, fps)
        edge_rows[name] = (np.stack([local, np.zeros(n, np.int64)]), {}, one_each)
    node_rows[link.READOUT] = (
        NodeBatch(examples.sample, examples.sample_id, {link.LABEL: examples.label}),
        all_samples,
        one_each,
    )
    kept = np.flatnonzero(out.has_seed)
    yield from chunks_of(out.seeds, node_rows, edge_rows, kept, chunk_size, examples.time)
