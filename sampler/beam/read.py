"""PTransforms that read a Unigraph into sharded node tables and adjacency lists.

Every element is a batch: (shard, NodeTable) and (shard, Adjacency) hold all
nodes / out-edges whose (source) fingerprint falls in that shard.
"""

from __future__ import annotations

import typing

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from sampler import shards
from sampler.batches import EdgeBatch, NodeBatch
from sampler.graph_checks import edge_shape_counts
from sampler.io import graph_tables
from sampler.node_table import NodeTable, build_node_table
from sampler.sample import temporal
from sampler.sample.adjacency import Adjacency, build_adjacency
from sampler.sample.plan import WEIGHT_FEATURE, SamplingPlan
from sampler.schema import EdgeSetInfo, GraphInfo, NodeSetInfo

NAMESPACE = "sampler"
BAD_RECORDS = "bad_records"  # tag of the dead-letter output of the reading DoFns


class _ReadTable(beam.DoFn):
    """Base of the DoFns that read table files: bad rows become dead-letter JSON lines.

    Each bad row (readers.BadRecord) goes to the `bad_records` output as one JSON line
    {"set", "file", "row", "line", "unit", "reason"} and increments the counter
    `bad_records/<set>`; good rows count in `rows_read/<set>`. The driver checks the total
    against `max_bad_records` after the run, once every bad row is in the dead-letter file (a
    worker does not fail early: the user sees every bad row, not the first few).
    """

    def __init__(self, name: str, max_bad_records: int):
        self._name = name
        self._max_bad = max_bad_records
        self._bad_count = Metrics.counter(NAMESPACE, f"bad_records/{name}")
        self._rows_read = Metrics.counter(NAMESPACE, f"rows_read/{name}")
        self._pending: list = []
        self._seen: list[str] = []
        self._bundle_bad = 0

    def start_bundle(self):
        self._pending, self._seen, self._bundle_bad = [], [], 0

    def _report(self, bad) -> None:
        """The readers' `on_bad`: keeps the bad row until the next `_flush`."""
        self._pending.append(bad)

    def _flush(self):
        """TaggedOutputs of the bad rows reported since the last call."""
        pending = self._pending[:]
        self._pending.clear()  # in place: a reader still running holds `_report`, not a list
        for bad in pending:
            self._bad_count.inc()
            self._bundle_bad += 1
            if len(self._seen) < 3:
                self._seen.append(bad.message())
            yield beam.pvalue.TaggedOutput(BAD_RECORDS, bad.to_json(set=self._name))


def read_files(pbegin, files: list, read_fn: beam.DoFn, *tags: str, main: str, side=()):
    """Files -> Spread -> Read: the files spread over workers, each read by `read_fn` (with
    the side inputs `side`), whose outputs are `main`, `tags` and BAD_RECORDS (dead-letter
    JSON lines)."""
    return (
        pbegin
        | "Files" >> beam.Create(files)
        | "Spread" >> beam.Reshuffle()
        | "Read" >> beam.ParDo(read_fn, *side).with_outputs(*tags, BAD_RECORDS, main=main)
    )


class ReadNodeSet(beam.PTransform):
    """Reads one node set's table: outputs `nodes` (NodeBatches) and `bad_records` (JSON lines)."""

    def __init__(self, info: NodeSetInfo, max_bad_records: int = 0):
        super().__init__()
        self._info = info
        self._max_bad = max_bad_records
        self._files = graph_tables.set_files(info)

    class _ReadFile(_ReadTable):
        def __init__(self, info: NodeSetInfo, max_bad_records: int):
            super().__init__(info.name, max_bad_records)
            self._info = info
            self._rows = Metrics.distribution(NAMESPACE, f"read_batch_rows/{info.name}")

        def process(self, path_fmt):
            for batch in graph_tables.read_node_file(*path_fmt, self._info, self._report):
                self._rows.update(len(batch))
                self._rows_read.inc(len(batch))
                yield batch
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        read = read_files(
            pbegin, self._files, self._ReadFile(self._info, self._max_bad), main="nodes"
        )
        return read


class ReadEdgeSet(beam.PTransform):
    """Reads one edge set's table: outputs `edges` (EdgeBatches), one output per latent endpoint
    set (its ids, as NodeBatches) and `bad_records` (JSON lines)."""

    def __init__(self, graph: GraphInfo, info: EdgeSetInfo, max_bad_records: int = 0):
        super().__init__()
        self._info = info
        self._max_bad = max_bad_records
        self._ends = graph_tables.latent_ends(graph, info)
        self._files = graph_tables.set_files(info)

    class _ReadFile(_ReadTable):
        def __init__(self, info: EdgeSetInfo, ends: dict[str, str], max_bad_records: int):
            super().__init__(info.name, max_bad_records)
            self._info = info
            self._ends = ends
            self._rows = Metrics.distribution(NAMESPACE, f"read_batch_rows/{info.name}")

        def process(self, path_fmt):
            read = graph_tables.read_edge_file(
                *path_fmt, self._info, tuple(self._ends), self._report
            )
            for batch, end_ids in read:
                self._rows.update(len(batch))
                self._rows_read.inc(len(batch))
                yield batch
                for column, rows in end_ids.items():
                    yield beam.pvalue.TaggedOutput(self._ends[column], rows)
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        tags = sorted(set(self._ends.values()))
        read = read_files(
            pbegin,
            self._files,
            self._ReadFile(self._info, self._ends, self._max_bad),
            *tags,
            main="edges",
        )
        return read


class _SplitByShard(beam.DoFn):
    def __init__(self, num_shards: int, fp_attr: str):
        self._num_shards = num_shards
        self._fp_attr = fp_attr

    def process(self, batch):
        for shard, index in shards.by_shard(getattr(batch, self._fp_attr), self._num_shards):
            yield shard, batch.take(index)


@beam.typehints.with_input_types(NodeBatch)
@beam.typehints.with_output_types(tuple[int, NodeTable])
class BuildNodeTables(beam.PTransform):
    """NodeBatches -> (shard, NodeTable), duplicates dropped and counted."""

    def __init__(self, info: NodeSetInfo, num_shards: int, count_duplicates: bool):
        super().__init__()
        self._info = info
        self._num_shards = num_shards
        self._count_duplicates = count_duplicates

    class _Build(beam.DoFn):
        def __init__(self, info: NodeSetInfo, count_duplicates: bool):
            self._info = info
            self._count_duplicates = count_duplicates
            self._duplicates = Metrics.counter(NAMESPACE, f"duplicate_node_ids/{info.name}")

        def process(self, shard_parts):
            shard, parts = shard_parts
            table = build_node_table(NodeBatch.concat(list(parts), self._info.features))
            if self._count_duplicates:
                self._duplicates.inc(table.duplicates)
            yield shard, table

    def expand(self, batches):
        return (
            batches
            | "ByShard" >> beam.ParDo(_SplitByShard(self._num_shards, "fp"))
            | "Group" >> beam.GroupByKey()
            | "Build" >> beam.ParDo(self._Build(self._info, self._count_duplicates))
        )


@beam.typehints.with_input_types(EdgeBatch)
@beam.typehints.with_output_types(tuple[int, Adjacency])
class BuildAdjacency(beam.PTransform):
    """EdgeBatches -> (shard, Adjacency) keyed by the shard of the source node."""

    def __init__(
        self, info: EdgeSetInfo, num_shards: int, plan: SamplingPlan, count_shapes: bool = True
    ):
        super().__init__()
        self._info = info
        self._num_shards = num_shards
        self._weight = WEIGHT_FEATURE if info.name in plan.weighted_edge_sets() else None
        self._count_shapes = count_shapes

    class _Build(beam.DoFn):
        """Counts self-loops and parallel edges (`count_shapes`: when the edges are final)."""

        def __init__(self, info: EdgeSetInfo, weight: str | None, count_shapes: bool):
            self._info = info
            self._weight = weight
            self._count_shapes = count_shapes
            self._edges = Metrics.distribution(NAMESPACE, f"adjacency_shard_edges/{info.name}")
            self._loops = Metrics.counter(NAMESPACE, f"self_loops/{info.name}")
            self._parallel = Metrics.counter(NAMESPACE, f"parallel_edges/{info.name}")

        def process(self, shard_parts):
            shard, parts = shard_parts
            edges = EdgeBatch.concat(list(parts), self._info.features)
            # All out-edges of a source are in its shard, so parallel edges meet here.
            if self._count_shapes:
                same_set = self._info.source == self._info.target
                loops, parallel = edge_shape_counts(edges.src, edges.dst, same_set)
                self._loops.inc(loops)
                self._parallel.inc(parallel)
            adjacency = build_adjacency(edges, self._weight)
            self._edges.update(adjacency.num_edges)
            yield shard, adjacency

    def expand(self, batches):
        return (
            batches
            | "ByShard" >> beam.ParDo(_SplitByShard(self._num_shards, "src"))
            | "Group" >> beam.GroupByKey()
            | "Build" >> beam.ParDo(self._Build(self._info, self._weight, self._count_shapes))
        )


class EdgesAndTables(typing.NamedTuple):
    """What DropDanglingEdges joins: edge batches and the (shard, NodeTable) of one end's set."""

    edges: beam.PCollection  # EdgeBatch
    tables: beam.PCollection  # (shard, NodeTable)


@beam.typehints.with_output_types(EdgeBatch)
class DropDanglingEdges(beam.PTransform):
    """Keeps the edges whose endpoint at `end` ('src' or 'dst') is in its node set; counts the rest.

    The in-memory and `worker` paths drop the same edges when they build the graph
    (sampler.sample.dense.densify), so every placement samples from the same edges. With
    `times` (node time features of the target set; `end` 'dst'), each kept edge carries its
    target's times (EdgeBatch.target_times) for the temporal ops that read them.
    """

    def __init__(self, info: EdgeSetInfo, end: str, num_shards: int, times: tuple = ()):
        super().__init__()
        self._info = info
        self._end = end
        self._num_shards = num_shards
        self._times = times

    class _Keep(beam.DoFn):
        def __init__(self, info: EdgeSetInfo, end: str, times: tuple):
            self._info = info
            self._end = end
            self._times = times
            self._dropped = Metrics.counter(NAMESPACE, f"edges_with_missing_endpoint/{info.name}")

        def process(self, shard_groups):
            _, groups = shard_groups
            tables = list(groups["table"])
            edges = EdgeBatch.concat(list(groups["edges"]), self._info.features)
            if len(edges) == 0:
                return
            found = np.zeros(len(edges), dtype=bool)
            if tables:
                rows, found = tables[0].lookup(getattr(edges, self._end))
            self._dropped.inc(int((~found).sum()))
            if found.any():
                kept = np.flatnonzero(found)
                edges = edges.take(kept)
                if self._times:
                    features = tables[0].rows.features
                    edges.target_times = {f: features[f][rows[kept]] for f in self._times}
                yield edges

    def expand(self, inputs: EdgesAndTables):
        keyed = inputs.edges | "ByShard" >> beam.ParDo(_SplitByShard(self._num_shards, self._end))
        return (
            {"edges": keyed, "table": inputs.tables}
            | "Join" >> beam.CoGroupByKey()
            | "Keep" >> beam.ParDo(self._Keep(self._info, self._end, self._times))
        )


class GraphTables(typing.NamedTuple):
    """What ReadGraph outputs, per shard: node tables and adjacency, and every table's dead letters."""

    tables: dict[str, beam.PCollection]  # node set -> (shard, NodeTable)
    adjacency: dict[str, beam.PCollection]  # edge set -> (shard, Adjacency)
    bad_records: beam.PCollection  # JSON lines
    # With drop_dangling and a link seed op: (source fps, target fps) batches of every edge of
    # the seed edge set, dangling ones included (the default link seeds; see sampler.sample.link).
    seed_pairs: beam.PCollection | None = None


class ReadGraph(beam.PTransform):
    """Reads every table of the schema: ({node set: tables}, {edge set: adjacency}).

    With `drop_dangling`, edges whose endpoint is not in its node set are dropped
    (and counted) before the adjacency is built.
    """

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        num_shards: int,
        drop_dangling: bool,
        max_bad_records: int = 0,
    ):
        super().__init__()
        self._graph = graph
        self._plan = plan
        self._num_shards = num_shards
        self._drop_dangling = drop_dangling
        self._max_bad = max_bad_records

    def expand(self, pbegin):
        graph, num_shards = self._graph, self._num_shards
        node_batches = {name: [] for name in graph.node_sets}
        bad = []
        for name, info in graph.node_sets.items():
            if info.filename:
                read = pbegin | f"ReadNodes/{name}" >> ReadNodeSet(info, self._max_bad)
                node_batches[name].append(read.nodes)
                bad.append(read.bad_records)
        edges = {}
        for name, info in graph.edge_sets.items():
            read = pbegin | f"ReadEdges/{name}" >> ReadEdgeSet(graph, info, self._max_bad)
            bad.append(read.bad_records)
            for node_set in sorted(set(graph_tables.latent_ends(graph, info).values())):
                node_batches[node_set].append(read[node_set])
            edges[name] = read.edges
        tables = {}
        for name, info in graph.node_sets.items():
            if not node_batches[name]:
                node_batches[name].append(
                    pbegin | f"NoNodes/{name}" >> beam.Create([]).with_output_types(NodeBatch)
                )
            tables[name] = (
                node_batches[name]
                | f"AllNodes/{name}" >> beam.Flatten()
                | f"NodeTable/{name}" >> BuildNodeTables(info, num_shards, bool(info.filename))
            )
        adjacency = {}
        seed_pairs = None
        link = self._plan.link if self._plan is not None else None
        target_times = temporal.target_time_features(self._plan) if self._plan is not None else {}
        if self._drop_dangling and link is not None:
            seed_pairs = edges[link.edge_set] | "SeedEdgePairs" >> beam.Map(
                lambda e: (e.src, e.dst)
            )
        for name, info in graph.edge_sets.items():
            if self._drop_dangling:
                known = EdgesAndTables(edges[name], tables[info.source])
                edges[name] = known | f"KnownSources/{name}" >> DropDanglingEdges(
                    info, "src", num_shards
                )
                known = EdgesAndTables(edges[name], tables[info.target])
                edges[name] = known | f"KnownTargets/{name}" >> DropDanglingEdges(
                    info, "dst", num_shards, target_times.get(name, ())
                )
            # Without drop_dangling the edges are final only once the worker drops them
            # (sampler.beam.sample.on_workers.SampleOnWorkers counts them there).
            adjacency[name] = edges[name] | f"Adjacency/{name}" >> BuildAdjacency(
                info, num_shards, self._plan, count_shapes=self._drop_dangling
            )
        return GraphTables(tables, adjacency, bad | "BadRecords" >> beam.Flatten(), seed_pairs)


class ReadSeedIds(beam.PTransform):
    """A seed table's rows as SeedRows: the `#id` column (object arrays of bytes, duplicates
    kept) and, with `time_kind` (a temporal plan's seed time kind), each row's time when the
    table has the time column (graph_tables.has_seed_times).

    Outputs `ids` and `bad_records` (bad rows of the seed table, dead letters of the set `seeds`).
    """

    def __init__(self, pattern: str, max_bad_records: int = 0, time_kind: str | None = None):
        super().__init__()
        self._files = graph_tables.table_files(pattern)
        self._max_bad = max_bad_records
        self._kind = time_kind
        if time_kind is not None and not graph_tables.has_seed_times(self._files):
            self._kind = None

    class _ReadFile(_ReadTable):
        def __init__(self, name: str, max_bad_records: int, kind: str | None):
            super().__init__(name, max_bad_records)
            self._kind = kind

        def process(self, path_fmt):
            for rows in graph_tables.read_seed_file(*path_fmt, self._kind, self._report):
                self._rows_read.inc(len(rows))
                yield rows
                yield from self._flush()
            yield from self._flush()

    def expand(self, pbegin):
        read_fn = self._ReadFile("seeds", self._max_bad, self._kind)
        return read_files(pbegin, self._files, read_fn, main="ids")
