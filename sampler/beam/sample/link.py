"""The seeds of a symmetric_link_seed_op: seed edges as (shard, LinkSeeds).

Seeds come from a `#source`, `#target` table (--input_seeds; bad rows are dead letters of the
set `seeds`) or from every edge of the seed edge set (`seed_pairs`; edges with a missing
endpoint included, rejected when sampled, as the in-memory sampler does). They are sharded by
pair, so all occurrences of a pair meet (`make_link_seeds` numbers repeats), and counted in
`seeds_in`. The `worker` and `topology` placements sample them (`SampleOnWorkers` and
`SampleTopologyOnWorkers` with `sampler.sample.link.LinkSampling`), `sharded` with
`sampler.beam.sample.sharded_links.SampleLinkSubgraphs`.
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np

from sampler import shards
from sampler.beam.read import BAD_RECORDS, _ReadTable, read_files
from sampler.beam.sample.seeds import SeedsByShard
from sampler.io import graph_tables
from sampler.sample import link
from sampler.sample.plan import SamplingPlan

Pairs = tuple[np.ndarray, np.ndarray]  # (source fps, target fps)


class ReadPairs(typing.NamedTuple):
    pairs: beam.PCollection
    bad_records: beam.PCollection


class ReadSeedPairs(beam.PTransform):
    """A link seed table's `#source`, `#target` columns as (source fps, target fps, times)
    batches: with `time_kind` (resolved by the caller: the table has the time column), each
    row's time, else None; with `edge_keys` (a PCollection of one sorted array, the seed edge
    set's `graph_tables.seed_edge_keys`), a pair that is no edge is a bad row."""

    def __init__(
        self,
        pattern: str,
        max_bad_records: int = 0,
        time_kind: str | None = None,
        edge_keys: beam.PCollection | None = None,
    ):
        super().__init__()
        self._files = graph_tables.table_files(pattern)
        self._max_bad = max_bad_records
        self._kind = time_kind
        self._edge_keys = edge_keys

    class _ReadFile(_ReadTable):
        def __init__(self, name: str, max_bad_records: int, kind: str | None):
            super().__init__(name, max_bad_records)
            self._kind = kind

        def process(self, path_fmt, edge_keys=None):
            for part in graph_tables.read_seed_pair_file(
                *path_fmt, self._kind, self._report, edge_keys
            ):
                self._rows_read.inc(len(part[0]))
                yield part
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        side = () if self._edge_keys is None else (beam.pvalue.AsSingleton(self._edge_keys),)
        read_fn = self._ReadFile("seeds", self._max_bad, self._kind)
        read = read_files(pbegin, self._files, read_fn, main="pairs", side=side)
        return ReadPairs(read.pairs, read[BAD_RECORDS])


class SeedEdgeKeys(beam.PTransform):
    """(source fps, target fps) batches of the seed edge set -> one sorted array of their
    pair keys (graph_tables.seed_edge_keys): 8 bytes an edge, on every worker that reads
    the seed table (the placements that sample link seeds by time hold the graph anyway)."""

    def expand(self, pairs):
        return (
            pairs
            | "Keys" >> beam.Map(lambda p: link.pair_keys(p[0], p[1]))
            | "Sorted" >> beam.CombineGlobally(_sorted_keys)
        )


def _sorted_keys(parts) -> np.ndarray:
    parts = list(parts)
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)


def _edge_pairs(shard_adjacency) -> typing.Iterator[Pairs]:
    yield link.edge_pairs(shard_adjacency[1])


def _split_pairs(pairs, num_shards: int):
    source, target, time = (*pairs, None)[:3]
    for shard, index in shards.by_shard(link.pair_keys(source, target), num_shards):
        yield shard, (source[index], target[index], None if time is None else time[index])


def _link_seeds(parts) -> link.LinkSeeds:
    source, target, time = zip(*parts, strict=True)
    time = None if time[0] is None else np.concatenate(time)
    return link.make_link_seeds(np.concatenate(source), np.concatenate(target), time)


class LinkSeedsFromPairs(SeedsByShard):
    """(source fps, target fps) batches -> (shard, LinkSeeds), sharded by pair; counts seeds_in."""

    def __init__(self, num_shards: int):
        super().__init__(_split_pairs, _link_seeds, num_shards)


def seed_pairs(read_adjacency: dict, plan: SamplingPlan):
    """Every edge of the seed edge set, from its adjacency shards."""
    return read_adjacency[plan.link.edge_set] | "SeedEdges" >> beam.FlatMap(_edge_pairs)
