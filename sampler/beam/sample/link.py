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
from apache_beam.metrics import Metrics

from sampler import ids, shards
from sampler.beam.read import BAD_RECORDS, _ReadTable, read_files
from sampler.beam.sample.sharded import NAMESPACE
from sampler.io import graph_tables, readers
from sampler.sample import link
from sampler.sample.plan import SamplingPlan

Pairs = tuple[np.ndarray, np.ndarray]  # (source fps, target fps)


class ReadPairs(typing.NamedTuple):
    pairs: beam.PCollection
    bad_records: beam.PCollection


class ReadSeedPairs(beam.PTransform):
    """A link seed table's `#source`, `#target` columns as (source fps, target fps) batches."""

    def __init__(self, pattern: str, max_bad_records: int = 0):
        super().__init__()
        self._files = graph_tables.table_files(pattern)
        self._max_bad = max_bad_records

    class _ReadFile(_ReadTable):
        def process(self, path_fmt):
            columns = ("#source", "#target")
            for table in readers.read_table(*path_fmt, columns, {}, on_bad=self._report):
                self._rows_read.inc(table.num_rows)
                yield tuple(ids.fingerprint(table.column(c).combine_chunks()) for c in columns)
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        read = read_files(pbegin, self._files, self._ReadFile("seeds", self._max_bad), main="pairs")
        return ReadPairs(read.pairs, read[BAD_RECORDS])


def _edge_pairs(shard_adjacency) -> typing.Iterator[Pairs]:
    yield link.edge_pairs(shard_adjacency[1])


class LinkSeedsFromPairs(beam.PTransform):
    """(source fps, target fps) batches -> (shard, LinkSeeds), sharded by pair; counts seeds_in."""

    def __init__(self, num_shards: int):
        super().__init__()
        self._num_shards = num_shards

    class _Split(beam.DoFn):
        def __init__(self, num_shards: int):
            self._num_shards = num_shards

        def process(self, pairs: Pairs):
            source, target = pairs
            for shard, index in shards.by_shard(link.pair_keys(source, target), self._num_shards):
                yield shard, (source[index], target[index])

    class _Make(beam.DoFn):
        def __init__(self):
            self._seeds_in = Metrics.counter(NAMESPACE, "seeds_in")

        def process(self, shard_parts):
            shard, parts = shard_parts
            parts = list(parts)
            seeds = link.make_link_seeds(
                np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            )
            self._seeds_in.inc(len(seeds))
            yield shard, seeds

    def expand(self, pairs):
        return (
            pairs
            | "ByShard" >> beam.ParDo(self._Split(self._num_shards))
            | "Group" >> beam.GroupByKey()
            | "MakeSeeds" >> beam.ParDo(self._Make())
        )


def seed_pairs(read_adjacency: dict, plan: SamplingPlan):
    """Every edge of the seed edge set, from its adjacency shards."""
    return read_adjacency[plan.link.edge_set] | "SeedEdges" >> beam.FlatMap(_edge_pairs)
