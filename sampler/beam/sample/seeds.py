"""PTransforms that make the seeds: (shard, Seeds), sharded like the nodes."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from sampler import ids, shards
from sampler.batches import Seeds
from sampler.node_table import NodeTable
from sampler.sample.adjacency import make_seeds

NAMESPACE = "sampler"


@beam.typehints.with_input_types(tuple[int, NodeTable])
@beam.typehints.with_output_types(tuple[int, Seeds])
class SeedsFromNodeTable(beam.PTransform):
    """Every node of the seed set once: (shard, Seeds)."""

    class _Make(beam.DoFn):
        def __init__(self):
            self._seeds_in = Metrics.counter(NAMESPACE, "seeds_in")

        def process(self, shard_table):
            shard, table = shard_table
            self._seeds_in.inc(len(table.rows.ids))
            yield shard, make_seeds(table.rows.ids)

    def expand(self, tables):
        return tables | "MakeSeeds" >> beam.ParDo(self._Make())


@beam.typehints.with_input_types(np.ndarray)
@beam.typehints.with_output_types(tuple[int, Seeds])
class SeedsFromIds(beam.PTransform):
    """Seed id batches (object arrays) -> (shard, Seeds), one seed per occurrence."""

    def __init__(self, num_shards: int):
        super().__init__()
        self._num_shards = num_shards

    class _Split(beam.DoFn):
        def __init__(self, num_shards: int):
            self._num_shards = num_shards

        def process(self, seed_ids: np.ndarray):
            for shard, index in shards.by_shard(
                ids.fingerprint(seed_ids.tolist()), self._num_shards
            ):
                yield shard, seed_ids[index]

    class _Make(beam.DoFn):
        def __init__(self):
            self._seeds_in = Metrics.counter(NAMESPACE, "seeds_in")

        def process(self, shard_parts):
            shard, parts = shard_parts
            seeds = make_seeds(np.concatenate(list(parts)))
            self._seeds_in.inc(len(seeds))
            yield shard, seeds

    def expand(self, seed_ids):
        return (
            seed_ids
            | "ByShard" >> beam.ParDo(self._Split(self._num_shards))
            | "Group" >> beam.GroupByKey()
            | "MakeSeeds" >> beam.ParDo(self._Make())
        )
