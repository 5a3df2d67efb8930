"""The `worker` placement's graph: read by the workers, built once, mapped once per machine.

  Files        every table file, spread over the workers
  Read         each file read once (bad rows dead-lettered and counted, as ReadGraph does)
               into one part file under `folder`: only the part's path reaches the runner;
               a file that two edge sets read alike is read once (sampler.io.file_reads)
  Build        once per run: the parts -> node tables, adjacency, the dense graph
               (sampler.sample.dense.densify) -> a snapshot folder (sampler.sample.graph_store);
               counts duplicates, dropped edges, self-loops and parallel edges once
  SeedTables   the seed set's ids by shard, for the seeds and the rejected seeds

Every SDK process of a machine then maps the snapshot read-only (`open_graph`), so a
machine holds one copy of the graph whatever its number of processes, and the graph's bytes
never pass through the runner. A remote snapshot (gs://) is copied once per machine first.
"""

from __future__ import annotations

import shutil
import typing
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from sampler import shards
from sampler.batches import NodeBatch, bytes_array
from sampler.beam.packing import FrameWriter, frames
from sampler.beam.read import BAD_RECORDS, NAMESPACE, _ReadTable
from sampler.io import files, graph_tables
from sampler.io.file_reads import file_reads
from sampler.io.files import write_error
from sampler.node_table import NodeTable
from sampler.sample import graph_store
from sampler.sample.dense import densify, edge_facts
from sampler.sample.in_memory import build_dense_graph, build_tables
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


class _ReadToPart(_ReadTable):
    """(index, (kind, set, path, format), sets) -> (index, part path): the file's batches in one
    part, its rows and bad rows counted for each of the `sets` that read it
    (sampler.io.file_reads: a file two edge sets share is read once)."""

    def __init__(self, graph: GraphInfo, folder: str, max_bad_records: int):
        super().__init__("", max_bad_records)
        self._graph = graph
        self._folder = folder
        self._counters = {}

    def _count(self, name: str, rows: int) -> None:
        if name not in self._counters:
            self._counters[name] = (
                Metrics.counter(NAMESPACE, f"bad_records/{name}"),
                Metrics.counter(NAMESPACE, f"rows_read/{name}"),
            )
        self._bad_count, self._rows_read = self._counters[name]
        self._name = name
        self._rows_read.inc(rows)

    def _flush_sets(self, names: list[str]):
        """`_flush` for each set that reads the file: its dead letters and counter each."""
        pending = self._pending[:]
        self._pending.clear()
        for name in names:
            self._count(name, 0)
            self._pending.extend(pending)
            yield from self._flush()

    def process(self, element):
        index, (kind, name, path, fmt), names = element
        for each in names:
            self._count(each, 0)
        if kind == "node":
            pieces = graph_tables.read_node_file(
                path, fmt, self._graph.node_sets[name], self._report
            )
        else:  # latent ids as Arrow arrays: no Python object per id to pickle and unpickle
            info = self._graph.edge_sets[name]
            latent = tuple(graph_tables.latent_ends(self._graph, info))
            pieces = graph_tables.read_edge_file(
                path, fmt, info, latent, self._report, arrow_ends=True
            )
        part = FileSystems.join(self._folder, f"part-{index:05d}-{uuid.uuid4().hex[:8]}")
        try:
            with FileSystems.create(part) as f:
                frames = FrameWriter(f)
                frames.write((kind, name))
                for piece in pieces:  # each piece written as it is read
                    for each in names:
                        self._count(each, len(piece if kind == "node" else piece[0]))
                    frames.write(piece)
                    yield from self._flush_sets(names)
        except OSError as e:
            raise write_error(part, e) from e
        yield from self._flush_sets(names)
        yield index, part


def read_part(path: str) -> tuple[str, str, list]:
    """(kind, set, pieces) of a part file that _ReadToPart wrote (sampler.beam.packing's
    frames, the first one (kind, set)): the pieces' arrays are views of the file's bytes."""
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
        data = np.empty(size, np.uint8)  # aligned, as the frames' arrays want
        view, at = memoryview(data), 0
        while at < size and (count := f.readinto(view[at:])):
            at += count
    if at != size:
        raise OSError(f"{path}: read {at} of {size} bytes")
    (kind, name), *pieces = frames(data)
    return kind, name, pieces


class _Build(beam.DoFn):
    """Once per run: the parts -> the snapshot folder (main output) and, for link prediction's
    default seeds, the link edge set's (source fps, target fps) (LINK_PAIRS)."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, folder: str, link_pairs: bool):
        self._graph = graph
        self._plan = plan
        self._folder = folder
        self._link_pairs = link_pairs

    def process(self, _, parts):
        graph = self._graph
        paths = [path for _, path in sorted(parts)]
        read = file_reads(graph).per_file([read_part(p)[2] for p in paths])
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
        yield folder  # the parts stay until RemoveSnapshot: a retried Build reads them again


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
    """Root -> GraphSnapshot: the tables read by the workers into a dense graph snapshot.

    `folder` is where the parts and the snapshot go (a run's temp folder, local or remote);
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
        reads = file_reads(self._graph)
        files = [(i, file, reads.readers(i)) for i, file in enumerate(reads.reads)]
        read = (
            pbegin
            | "Files" >> beam.Create(files)
            | "Spread" >> beam.Reshuffle()
            | "Read"
            >> beam.ParDo(_ReadToPart(self._graph, self._folder, self._max_bad)).with_outputs(
                BAD_RECORDS, main="parts"
            )
        )
        build = _Build(self._graph, self._plan, self._folder, self._link_pairs)
        built = (
            pbegin
            | "Once" >> beam.Create([None])
            | "Build"
            >> beam.ParDo(build, beam.pvalue.AsList(read.parts)).with_outputs(
                LINK_PAIRS, main="path"
            )
        )
        seed_tables = None
        if self._seed_set is not None:
            seed_tables = built.path | "SeedTables" >> beam.ParDo(
                _SeedTables(self._seed_set, self._num_shards)
            )
        link = built[LINK_PAIRS] if self._link_pairs else None
        return GraphSnapshot(built.path, seed_tables, link, read[BAD_RECORDS])
