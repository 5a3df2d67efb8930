"""PTransforms that make the seeds: (shard, Seeds), sharded like the nodes."""

from __future__ import annotations

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from sampler import ids, shards
from sampler.batches import SeedRows, Seeds
from sampler.node_table import NodeTable
from sampler.sample.adjacency import make_seeds
from sampler.sample.rejected import rejected_seed_lines

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


class SeedsByShard(beam.PTransform):
    """Batches of seed rows -> (shard, seeds): `split(batch, num_shards)` gives each part of a
    batch its shard, where `make(parts)` makes the parts one batch (counted in seeds_in)."""

    def __init__(self, split, make, num_shards: int):
        super().__init__()
        self._split = split
        self._make = make
        self._num_shards = num_shards

    class _Make(beam.DoFn):
        def __init__(self, make):
            self._make = make
            self._seeds_in = Metrics.counter(NAMESPACE, "seeds_in")

        def process(self, shard_parts):
            shard, parts = shard_parts
            seeds = self._make(list(parts))
            self._seeds_in.inc(len(seeds))
            yield shard, seeds

    def expand(self, batches):
        return (
            batches
            | "ByShard" >> beam.FlatMap(self._split, self._num_shards)
            | "Group" >> beam.GroupByKey()
            | "MakeSeeds" >> beam.ParDo(self._Make(self._make))
        )


def _split_ids(rows: SeedRows, num_shards: int):
    for shard, index in shards.by_shard(ids.fingerprint(rows.ids.tolist()), num_shards):
        yield shard, rows.take(index)


def _seeds_of_rows(parts: list[SeedRows]) -> Seeds:
    rows = SeedRows.concat(parts)
    return make_seeds(rows.ids, rows.time)


@beam.typehints.with_input_types(SeedRows)
@beam.typehints.with_output_types(tuple[int, Seeds])
class SeedsFromIds(SeedsByShard):
    """Seed table rows (SeedRows) -> (shard, Seeds), one seed per occurrence."""

    def __init__(self, num_shards: int):
        super().__init__(_split_ids, _seeds_of_rows, num_shards)


class RejectedSeeds(beam.PTransform):
    """(shard, Seeds) and the seed set's (shard, NodeTable) -> dead-letter JSON lines of the
    seeds not in the seed node set (sampler.sample.rejected), whatever the placement: a join
    by shard of the seeds with the table's fingerprints only (8 bytes a node)."""

    def __init__(self, seed_set: str):
        super().__init__()
        self._seed_set = seed_set

    def expand(self, seeds_and_tables):
        seeds, tables = seeds_and_tables
        fps = tables | "Fingerprints" >> beam.MapTuple(lambda shard, t: (shard, t.rows.fp))
        seed_set = self._seed_set

        def lines(shard_groups):
            _, groups = shard_groups
            node_fps = [f for f in groups["nodes"]]
            node_fps = np.sort(np.concatenate(node_fps)) if node_fps else np.zeros(0, np.uint64)
            for part in groups["seeds"]:
                yield from rejected_seed_lines(part, node_fps, seed_set)

        return (
            {"seeds": seeds, "nodes": fps}
            | "Join" >> beam.CoGroupByKey()
            | "Lines" >> beam.FlatMap(lines)
        )
