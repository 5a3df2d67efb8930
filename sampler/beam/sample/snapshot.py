"""The `worker` placement's graph: read and built once, mapped once per machine.

  Build        once per run, in one worker: every table file read on the process's cores,
               as `--runner InMemory` reads them (sampler.sample.in_memory.read_tables: a file
               that two edge sets read alike is read once; bad rows dead-lettered and counted,
               as ReadGraph does) -> node tables, adjacency, the dense graph
               (sampler.sample.dense.densify) -> a snapshot folder under `folder`
               (sampler.sample.graph_store); counts duplicates, dropped edges, self-loops and
               parallel edges once
  SeedTables   the seed set's ids by shard, for the seeds and the rejected seeds

The graph is built where it is read: its bytes pass through no other file, and never through
the runner. Every SDK process of a machine then maps the snapshot read-only (`open_graph`), so
a machine holds one copy of the graph whatever its number of processes. A remote snapshot
(gs://) is copied once per machine first.
"""

from __future__ import annotations

import shutil
import typing
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from sampler import shards
from sampler.batches import NodeBatch, bytes_array
from sampler.beam.read import BAD_RECORDS, NAMESPACE, _ReadTable
from sampler.io import files
from sampler.node_table import NodeTable
from sampler.sample import graph_store
from sampler.sample.dense import densify, edge_facts
from sampler.sample.in_memory import (
    build_dense_graph,
    build_tables,
    give_back_free_memory,
    read_tables,
)
from sampler.sample.link import edge_pairs
from sampler.sample.plan import SamplingPlan
from sampler.schema import GraphInfo

LINK_PAIRS = "link_pairs"


class GraphSnapshot(typing.NamedTuple):
    """What SnapshotGraph adds to a pipeline."""

    path: beam.PCollection  # one str: the snapshot's folder
    seed_tables: beam.PCollection  # (shard, NodeTable) of the seed set, ids only
    link_pairs: beam.PCollection | None  # (source fps, target fps) of the link edge set
    bad_records: beam.PCollection  # JSON lines


class _Build(_ReadTable):
    """Once per run: every table file read (sampler.sample.in_memory.read_tables, on this
    process's cores; a file two edge sets share read once) and built into the snapshot folder
    (main output); for link prediction's default seeds, also the link edge set's (source fps,
    target fps) (LINK_PAIRS). Bad rows are dead-lettered and counted per set that reads them,
    as ReadGraph does."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, folder: str, link_pairs: bool,
                 max_bad_records: int):  # fmt: skip
        super().__init__("", max_bad_records)
        self._graph = graph
        self._plan = plan
        self._folder = folder
        self._link_pairs = link_pairs

    def _set(self, name: str, rows: int) -> None:
        """Makes `name` the set that `_flush` reports for, and counts its `rows` read."""
        self._name = name
        self._bad_count = Metrics.counter(NAMESPACE, f"bad_records/{name}")
        self._rows_read = Metrics.counter(NAMESPACE, f"rows_read/{name}")
        self._rows_read.inc(rows)

    def process(self, _):
        graph = self._graph
        bad: list = []
        read = read_tables(graph, lambda name, row: bad.append((name, row)))
        for name, row in bad:  # in file order: a set's rows one after the other
            if name != self._name:
                self._set(name, 0)
            self._report(row)
            yield from self._flush()
        bad.clear()
        for kind, name, pieces in read:
            self._set(name, sum(len(p if kind == "node" else p[0]) for p in pieces))
        if self._link_pairs:  # the fingerprint-keyed adjacency of the link edge set is needed
            nodes, adjacency = build_tables(graph, self._plan, read)
            yield beam.pvalue.TaggedOutput(
                LINK_PAIRS, edge_pairs(adjacency[self._plan.link.edge_set])
            )
            dense = densify(graph, nodes, adjacency)
            del nodes, adjacency
        else:  # each edge set re-indexed as soon as it is built (less memory, same graph)
            dense = build_dense_graph(graph, self._plan, read)
        for name, info in graph.node_sets.items():
            if info.filename:
                duplicates = dense.nodes[name].duplicates
                Metrics.counter(NAMESPACE, f"duplicate_node_ids/{name}").inc(duplicates)
        for counter, count in edge_facts(graph, dense).items():
            Metrics.counter(NAMESPACE, counter).inc(count)
        folder = FileSystems.join(self._folder, f"graph-{uuid.uuid4().hex[:8]}")
        graph_store.save_graph(dense, folder)
        del dense  # this process samples next, from the snapshot: the build's memory goes back
        give_back_free_memory()  # (Arrow's pool and glibc keep freed pages by default)
        yield folder  # a retried Build reads the tables again; RemoveSnapshot removes every try's


class _SeedTables(beam.DoFn):
    """The snapshot's seed set as (shard, NodeTable) with ids only (SeedsFromNodeTable,
    RejectedSeeds)."""

    def __init__(self, seed_set: str, num_shards: int):
        self._seed_set = seed_set
        self._num_shards = num_shards

    def process(self, folder):
        rows = mapped_graph(folder).nodes[self._seed_set].rows
        for shard, index in shards.by_shard(rows.fp, self._num_shards):
            ids = bytes_array(rows.ids[index].tolist())
            yield shard, NodeTable(NodeBatch(rows.fp[index], ids, {}), 0)


class RemoveSnapshot(beam.DoFn):
    """Once the sampling is done (its count is a side input): removes the folder of the parts
    and snapshots (every attempt's), or the `sharded` placement's pieces (no snapshot)."""

    def __init__(self, folder: str):
        self._folder = folder

    def process(self, _, snapshot: str | None, _sampled: int):
        if snapshot is not None:  # a remote snapshot's copy on this machine
            graph_store.remove_machine_copy(snapshot)
        if not files.has_scheme(self._folder):
            shutil.rmtree(self._folder, ignore_errors=True)
        elif FileSystems.exists(self._folder.rstrip("/") + "/"):
            FileSystems.delete([self._folder.rstrip("/") + "/"])  # every object under it
        return []


_MAPPED: dict[str, object] = {}


def mapped_graph(folder: str):
    """The snapshot `folder` mapped once per process (the last one only: a run's)."""
    if folder not in _MAPPED:
        _MAPPED.clear()
        _MAPPED[folder] = graph_store.open_graph(graph_store.machine_copy(folder))
    return _MAPPED[folder]


class SnapshotGraph(beam.PTransform):
    """Root -> GraphSnapshot: the tables read by a worker into a dense graph snapshot.

    `folder` is where the snapshot goes (a run's temp folder, local or remote);
    `seed_set` the node set whose ids make `seed_tables`; `link_pairs`: also output the link
    edge set's pairs (link prediction without --input_seeds).
    """

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        folder: str,
        *,
        num_shards: int,
        seed_set: str | None,
        link_pairs: bool = False,
        max_bad_records: int = 0,
    ):
        super().__init__()
        self._graph = graph
        self._plan = plan
        self._folder = folder
        self._num_shards = num_shards
        self._seed_set = seed_set
        self._link_pairs = link_pairs
        self._max_bad = max_bad_records

    def expand(self, pbegin):
        build = _Build(self._graph, self._plan, self._folder, self._link_pairs, self._max_bad)
        built = (
            pbegin
            | "Once" >> beam.Create([None])
            | "Build" >> beam.ParDo(build).with_outputs(LINK_PAIRS, BAD_RECORDS, main="path")
        )
        seed_tables = None
        if self._seed_set is not None:
            seed_tables = built.path | "SeedTables" >> beam.ParDo(
                _SeedTables(self._seed_set, self._num_shards)
            )
        link = built[LINK_PAIRS] if self._link_pairs else None
        return GraphSnapshot(built.path, seed_tables, link, built[BAD_RECORDS])
