"""The library entry point: sample GraphTensor tf.Examples inside your own Beam pipeline.

    with beam.Pipeline() as p:
        sampled = p | SampleGraphTensors("graph/", "spec.pbtxt", seed=7, placement="worker")
        sampled.examples | beam.Map(...)  # serialized GraphTensor tf.Examples (bytes)
        sampled.bad_records | ...  # unreadable input rows, JSON lines (dead letters)

`pipelines.sample` builds its pipeline through the same function, `sample_graph_tensors`,
and writes its RecordBatches as TFRecord shards; the records are the same bytes.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import typing
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import GoogleCloudOptions

from sampler.beam.read import GraphTables, ReadGraph, ReadSeedIds
from sampler.beam.sample import link as link_beam
from sampler.beam.sample.on_workers import SampleOnWorkers, SnapshotInputs
from sampler.beam.sample.seeds import RejectedSeeds, SeedsFromIds, SeedsFromNodeTable
from sampler.beam.sample.sharded import RecordBatch, SampleSubgraphs, SamplingInputs
from sampler.beam.sample.sharded_links import SampleLinkSubgraphs
from sampler.beam.sample.snapshot import RemoveSnapshot, SnapshotGraph
from sampler.beam.sample.topology import SampleTopologyOnWorkers
from sampler.beam.sample.write import ShardParts
from sampler.io.graph_tables import has_seed_times, table_files
from sampler.sample import temporal
from sampler.sample.in_memory import NodeSeedSampling
from sampler.sample.link import LinkSampling
from sampler.sample.plan import EDGE, SamplingPlan, load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import GraphInfo, load_graph

PLACEMENTS = ("worker", "topology", "sharded")


@dataclasses.dataclass(frozen=True)
class SamplingOptions:
    """How to sample; none of these changes the records except `randomness`."""

    randomness: Randomness = Randomness()
    placement: str = "worker"  # 'worker', 'topology' or 'sharded': same records, different scale
    input_seeds: str | None = None  # table whose #id column lists the seeds; None: every node
    num_shards: int = 32
    num_buckets: int = 32
    max_bad_records: int = 0
    negatives_per_seed: int = 0  # link prediction: label-0 examples per seed edge
    keep_seed_edges: bool = False  # link prediction: keep the seed edge in its subgraph (leaks)
    # `worker`: where the workers put the table parts and the graph snapshot (local or remote);
    # `sharded`: the node rows and edges on their way to the assembly (ToBuckets); default:
    # the pipeline's --temp_location, else the local temp folder. Removed after the run.
    temp_dir: str | None = None
    # `worker`: threads of each SDK worker process that sample and encode chunks side by side
    # (0: one per core of the process). Dataflow runs one SDK process per vCPU: keep 1 there.
    sampling_threads: int = 1

    def __post_init__(self):
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement must be one of {PLACEMENTS}, got {self.placement!r}")
        if self.negatives_per_seed < 0:
            raise ValueError(f"negatives_per_seed must be >= 0, got {self.negatives_per_seed}")


class SampledBatches(typing.NamedTuple):
    """What sample_graph_tensors adds to a pipeline."""

    # RecordBatch: (bucket, chunk, [serialized tf.Example]); where `parts` was given and the
    # placement writes them (`worker`), the parts written: (shard, (bucket, chunk, path))
    batches: beam.PCollection
    bad_records: beam.PCollection  # JSON lines
    rejected_seeds: beam.PCollection | None = None  # JSON lines; None without input_seeds
    parts_written: bool = False


class SampledExamples(typing.NamedTuple):
    """What SampleGraphTensors outputs."""

    examples: beam.PCollection  # bytes: serialized GraphTensor tf.Examples
    bad_records: beam.PCollection  # JSON lines
    rejected_seeds: beam.PCollection | None = None  # JSON lines; None without input_seeds


def sample_graph_tensors(
    root: beam.pvalue.PBegin,
    graph: GraphInfo,
    plan: SamplingPlan,
    options: SamplingOptions,
    parts: ShardParts | None = None,
) -> SampledBatches:
    """Adds the stages ReadGraph, [ReadSeeds,] Seeds, BadRecords and Sample under `root`'s scope.

    Applied directly by the CLI, so its stage names stay top-level, and inside
    SampleGraphTensors for library users. `parts` (the CLI's writer): the `worker` placement
    writes each bucket's records as one part where it samples them (ShardParts).
    """
    if options.placement == "worker":
        return _sample_on_workers(root, graph, plan, options, parts)
    read_graph = ReadGraph(
        graph, plan, options.num_shards, options.placement == "sharded", options.max_bad_records
    )
    read = root | "ReadGraph" >> read_graph
    bad_records = [read.bad_records]
    seed_tables = read.tables.get(plan.seed_set)
    seeds, kernel, rejected = _seeds(root, plan, options, seed_tables, read, bad_records)
    common = {"randomness": options.randomness, "num_buckets": options.num_buckets}
    common["num_shards"] = options.num_shards
    folder = None  # `sharded`: where node rows and edges wait for the assembly
    if options.placement == "topology":
        sample = SampleTopologyOnWorkers(graph, plan, **common, kernel=kernel)
    else:
        folder = options.temp_dir or _temp_folder(root)
        if plan.link is not None:
            common["negatives"] = options.negatives_per_seed
            common["keep_seed_edges"] = options.keep_seed_edges
        sharded = SampleSubgraphs if plan.link is None else SampleLinkSubgraphs
        sample = sharded(graph, plan, **common, folder=folder)
    bad = bad_records | "BadRecords" >> beam.Flatten()
    batches = SamplingInputs(seeds, read.tables, read.adjacency) | "Sample" >> sample
    if folder is not None:  # the pieces' folder goes once every batch is made (no snapshot)
        _remove_after_sampling(root, "RemovePieces", folder, None, batches)
    return SampledBatches(batches, bad, rejected)


def _sample_on_workers(
    root, graph: GraphInfo, plan: SamplingPlan, options: SamplingOptions, parts: ShardParts | None
):
    """The `worker` placement: the tables read into a graph snapshot that every SDK process of
    a machine maps (sampler.beam.sample.snapshot), then SampleOnWorkers on it."""
    folder = options.temp_dir or _temp_folder(root)
    snapshot = root | "ReadGraph" >> SnapshotGraph(
        graph,
        plan,
        folder,
        num_shards=options.num_shards,
        seed_set=None if plan.link is not None else plan.seed_set,
        link_pairs=plan.link is not None
        and (not options.input_seeds or plan.seed_time is not None),
        max_bad_records=options.max_bad_records,
    )
    bad_records = [snapshot.bad_records]
    read = GraphTables({}, {}, None)
    if snapshot.link_pairs is not None:
        read = read._replace(adjacency={plan.link.edge_set: snapshot.link_pairs})
    seeds, kernel, rejected = _seeds(
        root, plan, options, snapshot.seed_tables, read, bad_records, pairs_given=True
    )
    sample = SampleOnWorkers(
        graph,
        plan,
        randomness=options.randomness,
        num_buckets=options.num_buckets,
        kernel=kernel,
        threads=options.sampling_threads,
        parts=parts,
    )
    bad = bad_records | "BadRecords" >> beam.Flatten()
    batches = SnapshotInputs(seeds, snapshot.path) | "Sample" >> sample
    _remove_after_sampling(
        root, "RemoveSnapshot", folder, beam.pvalue.AsSingleton(snapshot.path), batches
    )
    return SampledBatches(batches, bad, rejected, parts is not None)


def _remove_after_sampling(root, label: str, folder: str, snapshot, batches) -> None:
    """Removes the run's `folder` (RemoveSnapshot) once every batch is made (their count is a
    side input); `snapshot`: the snapshot's path as a side input, or None."""
    count = beam.pvalue.AsSingleton(batches | "Sampled" >> beam.combiners.Count.Globally())
    _ = (
        root
        | "AfterSampling" >> beam.Create([None])
        | label >> beam.ParDo(RemoveSnapshot(folder), snapshot, count)
    )


def _temp_folder(root) -> str:
    """A new folder under the pipeline's --temp_location, else under the local temp folder."""
    base = root.pipeline.options.view_as(GoogleCloudOptions).temp_location
    name = f"beam-graph-{uuid.uuid4().hex[:12]}"
    return FileSystems.join(base, name) if base else os.path.join(tempfile.gettempdir(), name)


def _seeds(root, plan, options, seed_tables, read, bad_records, pairs_given=False):
    """(seeds, kernel, rejected seeds' lines or None): link seeds (_link_seeds), the seeds of
    --input_seeds, or every node of the seed set (`seed_tables`: its (shard, NodeTable))."""
    if plan.link is not None:
        seeds = _link_seeds(root, plan, options, read, bad_records, pairs_given)
        return seeds, LinkSampling(options.negatives_per_seed, options.keep_seed_edges), None
    if not options.input_seeds:
        return seed_tables | "Seeds" >> SeedsFromNodeTable(), NodeSeedSampling(), None
    read_seeds = root | "ReadSeeds" >> ReadSeedIds(
        options.input_seeds, options.max_bad_records, temporal.table_time_kind(plan)
    )
    seeds = read_seeds.ids | "Seeds" >> SeedsFromIds(options.num_shards)
    bad_records.append(read_seeds.bad_records)
    rejected = (seeds, seed_tables) | "RejectedSeeds" >> RejectedSeeds(plan.seed_set)
    return seeds, NodeSeedSampling(), rejected


def _link_seeds(root, plan, options, read, bad_records, pairs_given=False) -> beam.PCollection:
    """A symmetric_link_seed_op's (shard, LinkSeeds): from --input_seeds or the seed edge set
    (`read.adjacency`'s shards, or with `pairs_given` its pairs). A temporal spec's seeds
    table without a time column: each pair that is no seed edge is a bad row (no time)."""
    if options.input_seeds:
        kind, edge_keys = temporal.table_time_kind(plan), None
        if kind is not None and not has_seed_times(table_files(options.input_seeds)):
            kind = None
            edges = read.adjacency[plan.link.edge_set]
            if not pairs_given:
                edges = link_beam.seed_pairs(read.adjacency, plan)
            edge_keys = edges | "SeedEdgeKeys" >> link_beam.SeedEdgeKeys()
        read_seeds = root | "ReadSeeds" >> link_beam.ReadSeedPairs(
            options.input_seeds, options.max_bad_records, kind, edge_keys
        )
        pairs = read_seeds.pairs
        bad_records.append(read_seeds.bad_records)
    elif pairs_given:
        pairs = read.adjacency[plan.link.edge_set]
    elif read.seed_pairs is not None:  # `sharded`: its adjacency has no dangling edges
        pairs = read.seed_pairs
    else:
        pairs = link_beam.seed_pairs(read.adjacency, plan)
    return pairs | "Seeds" >> link_beam.LinkSeedsFromPairs(options.num_shards)


def _records(batch: RecordBatch):
    return batch[2]


@beam.typehints.with_input_types(beam.pvalue.PBegin)
@beam.typehints.with_output_types(bytes)
class SampleGraphTensors(beam.PTransform):
    """Pipeline root -> SampledExamples(examples: serialized GraphTensor tf.Examples, bad_records).

    `graph_schema`: a GraphSchema pbtxt path (or a directory holding one), or a loaded GraphInfo.
    `sampling_spec`: a SamplingSpec pbtxt path or a SamplingSpec proto. The examples are the
    records `pipelines.sample` writes for the same flags (and the in-memory sampler makes),
    in no particular order.

    Link prediction (a spec whose seed is `symmetric_link_seed_op`): `seed_edge_set` names the
    seed edges' edge set (--seed_edge_set), `input_seeds` a `#source`, `#target` table (default:
    every edge of that set), `negatives_per_seed` the label-0 examples per seed edge, and
    `keep_seed_edges` keeps the seed edge in its own subgraph (off: no leakage). Every placement
    takes them (the same records).
    """

    def __init__(
        self,
        graph_schema: str | GraphInfo,
        sampling_spec,
        *,
        seed: int = 0,
        placement: str = "worker",
        aggregation: str = EDGE,
        input_seeds: str | None = None,
        num_shards: int = 32,
        num_buckets: int = 32,
        max_bad_records: int = 0,
        seed_edge_set: str | None = None,
        negatives_per_seed: int = 0,
        keep_seed_edges: bool = False,
    ):
        super().__init__()
        graph = graph_schema if isinstance(graph_schema, GraphInfo) else load_graph(graph_schema)
        spec = (
            load_sampling_spec(sampling_spec) if isinstance(sampling_spec, str) else sampling_spec
        )
        self.graph = graph
        self.plan = make_plan(graph, spec, aggregation, seed_edge_set)
        self.options = SamplingOptions(
            Randomness(seed),
            placement,
            input_seeds,
            num_shards,
            num_buckets,
            max_bad_records,
            negatives_per_seed,
            keep_seed_edges,
        )
        if self.plan.link is None and (negatives_per_seed or keep_seed_edges):
            raise ValueError("negatives_per_seed and keep_seed_edges need a symmetric_link_seed_op")

    def expand(self, root):
        sampled = sample_graph_tensors(root, self.graph, self.plan, self.options)
        examples = sampled.batches | "Records" >> beam.FlatMap(_records)
        return SampledExamples(examples, sampled.bad_records, sampled.rejected_seeds)
