"""The `worker` placement for a symmetric_link_seed_op: seed edges in, link examples out.

Seeds come from a `#source`, `#target` table (--input_seeds; bad rows are dead letters of the
set `seeds`) or from every edge of the seed edge set. They are sharded by pair, so all
occurrences of a pair meet (`make_link_seeds` numbers repeats), then sampled by buckets with
the whole graph on every worker, like `SampleOnWorkers`, by `sampler.sample.link`.
"""

from __future__ import annotations

import collections
import typing
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from sampler import ids, shards
from sampler.arrays import expand_ranges
from sampler.beam.read import BAD_RECORDS, _ReadTable, read_files
from sampler.beam.sample.on_workers import SampleOnWorkers, sample_buckets
from sampler.beam.sample.sharded import NAMESPACE, SamplingInputs, encoded_batches
from sampler.io import graph_tables, readers
from sampler.sample import link
from sampler.sample.encode import encode_specs
from sampler.sample.plan import SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.schema import GraphInfo

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
            for table in readers.read_table(*path_fmt, columns, {}, on_bad=self._pending.append):
                self._rows_read.inc(table.num_rows)
                yield tuple(ids.fingerprint(table.column(c).combine_chunks()) for c in columns)
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        read = read_files(pbegin, self._files, self._ReadFile("seeds", self._max_bad), main="pairs")
        return ReadPairs(read.pairs, read[BAD_RECORDS])


def _edge_pairs(shard_adjacency) -> typing.Iterator[Pairs]:
    _, adj = shard_adjacency
    owner, positions = expand_ranges(adj.starts, adj.degrees)
    yield adj.nodes[owner], adj.targets[positions]


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


class SampleLinksOnWorkers(SampleOnWorkers):
    """(shard, LinkSeeds) + tables + adjacency -> (bucket, chunk, [serialized tf.Example])."""

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        *,
        randomness: Randomness,
        num_buckets: int,
        negatives: int = 0,
        keep_seed_edges: bool = False,
        chunk_size: int = 512,
    ):
        super().__init__(
            graph, plan, randomness=randomness, num_buckets=num_buckets, chunk_size=chunk_size
        )
        self._negatives = negatives
        self._keep_seed_edges = keep_seed_edges

    class _SampleLinks(SampleOnWorkers._SampleBucket):
        def __init__(self, *args, negatives: int, keep_seed_edges: bool):
            super().__init__(*args)
            self._negatives = negatives
            self._keep_seed_edges = keep_seed_edges

        def setup(self):
            self._specs = encode_specs(link.link_output_schema(self._graph.schema, self._plan))

        def process(self, bucket_parts, *side):
            bucket, parts = bucket_parts
            loaded = self.graph_on_worker(side)
            seeds = self.received_seeds(link.LinkSeeds, parts)
            counters = collections.Counter()
            subgraphs = link.sample_links_in_memory(
                self._graph,
                self._plan,
                loaded.memory,
                seeds,
                self._randomness,
                counters,
                self._negatives,
                self._keep_seed_edges,
                self._chunk_size,
            )
            yield from encoded_batches(bucket, subgraphs, self._specs, self._sizes)
            self._sizes.flush(counters)

    def expand(self, inputs: SamplingInputs):
        handle, tag = shared.Shared(), uuid.uuid4().hex
        fn = self._SampleLinks(
            self._graph,
            self._plan,
            self._randomness,
            self._chunk_size,
            handle,
            tag,
            negatives=self._negatives,
            keep_seed_edges=self._keep_seed_edges,
        )
        return sample_buckets(self._graph, inputs, fn, self._num_buckets, handle, tag)
