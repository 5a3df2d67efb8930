"""The `sharded` placement's memory bound as flags: --num_shards and --num_buckets chosen from
--worker_memory_mb, so that the largest SDK process does not grow with the graph or the seeds.

What a `sharded` SDK process holds at its peak (measured with the local runner, 2 SDK
worker processes, MAG-shaped graphs with 128-dim paper features; docs/BENCHMARKS.md, "Sharded:
memory bound and cost"):

- a fixed part, SHARDED_BASE_GB: Python, Beam, numpy and pyarrow, the data plane's buffers
  (bounded by `pipelines.runtime.worker_buffers`), the reading of one table file's batches;
- one node shard's adjacency or rows at a time: RSS_PER_TABLE_BYTE x the tables / --num_shards;
- one bucket's pieces in the assembly (read, unpacked, assembled, gathered, encoded): about
  BUCKET_BYTES_PER_RECORD_BYTE x the records of a bucket, seeds x record bytes / --num_buckets.

Link seeds (sampler.beam.sample.sharded_links) use the same terms with seeds x (1 +
--negatives_per_seed) records (`count_seeds`); a negative's target is found in a range of the
target set's fingerprints and ids (2**ceil(log2 shards) ranges), about a shard's share of that
set. Not modelled, for node and link seeds alike: a shard's frontier rows and node requests,
which grow with the seeds and the nodes per subgraph (a link example has both endpoints'
frontiers, whose rows carry the pair: 32 bytes, not 16). Measured: link runs up to 1.2x above
the model at 32 shards (docs/BENCHMARKS.md, "Link seeds").

The budget left above the fixed part is split in halves between the two; each flag is raised
(never lowered) until its half holds. A flag changes no record: --num_shards changes nothing in
the output, --num_buckets which output file holds a record (a `worker` run with the same
--num_buckets writes the same bytes).
"""

from __future__ import annotations

import dataclasses
import math

from sampler.errors import UserError
from sampler.tools.placement_cost import GB, RSS_PER_TABLE_BYTE

SHARDED_BASE_GB = 0.5  # a `sharded` SDK process's fixed part (see above)
BUCKET_BYTES_PER_RECORD_BYTE = 12.0  # a bucket's working set per byte of its records
# A record's bytes where the sample CLI has no estimate (pipelines.estimate has one): MAG's
# spec with 128-dim paper features, 140 KB measured (20k papers, 2k seeds: 279 MB of records).
DEFAULT_RECORD_BYTES = 150e3
MAX_KEYS = 65_536  # pipelines.flags.MAX_NODE_SHARDS


@dataclasses.dataclass(frozen=True)
class ShardedFlags:
    num_shards: int
    num_buckets: int
    process_gb: float  # the modelled peak of the largest SDK process with these flags
    budget_gb: float

    def line(self) -> str:
        return (
            f"sharded flags: --num_shards {self.num_shards} --num_buckets {self.num_buckets}"
            f" (largest SDK process ~{self.process_gb * GB / 2**20:,.0f} MB modelled, within"
            f" --worker_memory_mb {self.budget_gb * GB / 2**20:,.0f};"
            " sampler/tools/sharded_bound.py)"
        )


def process_gb(table_bytes: float, seeds: float, record_bytes: float, shards: int, buckets: int):
    """The modelled peak of a `sharded` SDK process, GB."""
    shard = RSS_PER_TABLE_BYTE * table_bytes / max(shards, 1)
    bucket = BUCKET_BYTES_PER_RECORD_BYTE * seeds * record_bytes / max(buckets, 1)
    return SHARDED_BASE_GB + (shard + bucket) / GB


def sharded_flags(
    table_bytes: float,
    seeds: float,
    budget_mb: float,
    *,
    record_bytes: float = DEFAULT_RECORD_BYTES,
    num_shards: int = 32,
    num_buckets: int = 32,
) -> ShardedFlags:
    """The smallest --num_shards >= `num_shards` and --num_buckets >= `num_buckets` whose
    modelled peak fits `budget_mb` (MB of 2**20 bytes, as --worker_memory_mb); a budget below
    the fixed part, or one that needs more than MAX_KEYS of either, is a UserError."""
    budget = budget_mb * 2**20 / GB
    room = (budget - SHARDED_BASE_GB) * GB / 2
    if room <= 0:
        raise UserError(
            f"--worker_memory_mb {budget_mb:,.0f} is below what a `sharded` SDK process needs"
            f" whatever its flags (~{SHARDED_BASE_GB * GB / 2**20:,.0f} MB): raise it"
        )
    shards = max(num_shards, math.ceil(RSS_PER_TABLE_BYTE * table_bytes / room))
    buckets = max(
        num_buckets, math.ceil(BUCKET_BYTES_PER_RECORD_BYTE * seeds * record_bytes / room)
    )
    if max(shards, buckets) > MAX_KEYS:
        raise UserError(
            f"--worker_memory_mb {budget_mb:,.0f} would need --num_shards {shards} and"
            f" --num_buckets {buckets} (at most {MAX_KEYS}): raise it"
        )
    return ShardedFlags(
        shards, buckets, process_gb(table_bytes, seeds, record_bytes, shards, buckets), budget
    )


def _skip(_bad) -> None:
    """A bad seed row is not counted here: the run reads the seed table again, and dead-letters
    it or fails as --max_bad_records says, as on every placement."""


def count_seeds(graph, plan, input_seeds: str | None, negatives_per_seed: int = 0) -> float:
    """The run's seeds (records): --input_seeds' rows, counted; else the seed node set's rows
    (or a link seed op's edges), estimated from the table's size as
    sampler.io.graph_tables.size_estimates does (ID_BYTES and the features a row)."""
    from sampler.io import graph_tables  # noqa: PLC0415 - the sample CLI's auto path only

    if plan.link is not None:
        if input_seeds:
            rows = len(graph_tables.read_seed_pairs(input_seeds, _skip)[0])
        else:
            pattern = graph.edge_sets[plan.link.edge_set].filename
            rows = (
                graph_tables._tfrecord_bytes(
                    pattern, "ids", ("#source", "#target"), f"edge set '{plan.link.edge_set}'"
                )
                / graph_tables.TFRECORD_BYTES_PER_ID_ROW
            )
        return rows * (1 + negatives_per_seed)
    if input_seeds:
        return float(len(graph_tables.read_seed_ids(input_seeds, _skip)))
    info = graph.node_sets[plan.seed_set]
    if not info.filename:
        return 0.0
    width = sum(s.width * (4 if s.kind == "float" else 8) for s in info.features.values())
    columns = ("#id", *info.features)
    kind, where = ("features" if width else "ids"), f"node set '{info.name}'"
    size = graph_tables._tfrecord_bytes(info.filename, kind, columns, where)
    return size / (graph_tables.ID_BYTES + width)
