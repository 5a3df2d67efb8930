"""The `worker` placement: each worker process holds the whole graph, samples seeds completely."""

from __future__ import annotations

import collections
import typing
import uuid

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from sampler.beam.packing import unpacked
from sampler.beam.sample.sharded import (
    NAMESPACE,
    SEEDS,
    RecordBatch,
    SamplingInputs,
    SizeCounters,
    ToBuckets,
    count_received,
)
from sampler.beam.sample.snapshot import mapped_graph
from sampler.beam.sample.write import ShardParts
from sampler.node_table import merge_node_tables
from sampler.sample import in_memory
from sampler.sample.adjacency import merge_adjacency
from sampler.sample.chunk_stream import encoded_chunks
from sampler.sample.dense import DenseGraph, densify, edge_facts
from sampler.sample.encode import encode_specs
from sampler.sample.in_memory import NodeSeedSampling
from sampler.sample.plan import SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import SubgraphChunk
from sampler.sample.topology import without_features
from sampler.schema import GraphInfo
from sampler.threads import cpu_count


class _GraphOnWorker:
    """The whole graph in one worker's memory, built once per process from the shards."""

    def __init__(self, graph: GraphInfo, adjacency: dict, tables: dict):
        nodes = {}
        for name, info in graph.node_sets.items():
            shards = list(tables[name])
            # The `topology` placement's tables come without their feature columns.
            present = shards[0].rows.features if shards else info.features
            specs = {f: spec for f, spec in info.features.items() if f in present}
            nodes[name] = merge_node_tables(shards, specs)
        merged = {
            name: merge_adjacency(list(adjacency[name]), info.features)
            for name, info in graph.edge_sets.items()
        }
        self.memory = densify(graph, nodes, merged)


def _shared_graph(graph: GraphInfo, handle, tag: str, side) -> _GraphOnWorker:
    """The graph built once per process from the side inputs (adjacency per edge set, then
    tables per node set) and shared."""
    edge_sets, node_sets = list(graph.edge_sets), list(graph.node_sets)
    adjacency = dict(zip(edge_sets, side[: len(edge_sets)], strict=True))
    tables = dict(zip(node_sets, side[len(edge_sets) :], strict=True))
    return handle.acquire(lambda: _GraphOnWorker(graph, adjacency, tables), tag)


class SnapshotInputs(typing.NamedTuple):
    """What SampleOnWorkers samples from with a graph snapshot (sampler.beam.sample.snapshot)."""

    seeds: beam.PCollection  # (shard, Seeds)
    snapshot: beam.PCollection  # one str: the snapshot's folder


class _MappedGraph(typing.NamedTuple):
    memory: DenseGraph


class SampleOnWorkers(beam.PTransform):
    """SnapshotInputs -> (bucket, chunk, [serialized tf.Example]), sample-major (RecordBatch),
    or with `parts` the parts written (sampler.beam.sample.write.ShardParts).

    For graphs that fit one worker's memory: every worker process maps the graph snapshot
    (once per machine, sampler.beam.sample.snapshot) and samples a bucket of seeds
    completely, with the same kernels as the in-memory sampler. Nothing per sample is
    shuffled. (The `topology` placement's DoFn, a subclass of _SampleBucket, merges its
    graph from side inputs instead: `sample_buckets`.)

    `kernel` says what a seed is: `NodeSeedSampling()` (default; seeds are (shard, Seeds)) or
    `sampler.sample.link.LinkSampling` (seeds are (shard, LinkSeeds) of a link seed op).
    """

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        *,
        randomness: Randomness,
        num_buckets: int,
        # seeds sampled at once (the same records whatever it is): a process's working set;
        # at ogbn-mag's size 128 cost 25% more sampling CPU than 512. Default: --runner
        # InMemory's (in_memory.CHUNK_SIZE)
        chunk_size: int | None = None,
        kernel=None,
        threads: int = 1,
        parts: ShardParts | None = None,
    ):
        super().__init__()
        if threads < 0:
            raise ValueError(f"threads must be >= 0 (0: one per core), got {threads}")
        self._num_buckets = num_buckets
        self._parts = parts
        chunk_size = chunk_size or in_memory.CHUNK_SIZE
        handle, tag = shared.Shared(), uuid.uuid4().hex
        args = (handle, tag, kernel, threads, parts, num_buckets)
        self._fn = self._SampleBucket(graph, plan, randomness, chunk_size, *args)

    class _SampleBucket(beam.DoFn):
        def __init__(
            self,
            graph: GraphInfo,
            plan: SamplingPlan,
            randomness: Randomness,
            chunk_size: int,
            handle,
            tag: str,
            kernel=None,
            threads: int = 1,
            parts=None,
            num_buckets: int = 0,
        ):
            self._graph = graph
            self._plan = plan
            self._randomness = randomness
            self._chunk_size = chunk_size
            self._handle = handle
            self._tag = tag
            self._kernel = kernel or NodeSeedSampling()
            self._threads = threads
            self._parts = parts
            self._num_buckets = num_buckets
            self._specs = None
            self._bucket_samples = Metrics.distribution(NAMESPACE, "bucket_samples")
            self._sizes = SizeCounters()

        def setup(self):
            self._specs = encode_specs(self._kernel.output_schema(self._graph.schema, self._plan))

        def process(self, bucket_parts, *side):
            """(bucket, chunk index, records) of each chunk of the bucket's seeds, sampled and
            encoded on `threads` threads (sampler.sample.chunk_stream), in chunk order; with
            `parts` (ShardParts), the bucket's records go to one part instead:
            (shard, (bucket, 0, path))."""
            if self._parts is None:
                yield from self._sampled(bucket_parts, side)
                return
            chunks = (records for _, _, records in self._sampled(bucket_parts, side))
            alone = self._parts.num_shards >= self._num_buckets  # its shard's only bucket
            yield self._parts.write(bucket_parts[0], chunks, alone)

        def _sampled(self, bucket_parts, side):
            """(bucket, chunk index, records) of each chunk of the bucket's seeds, in order."""
            bucket, parts = bucket_parts
            memory = self.graph_on_worker(side).memory
            seeds = self.received_seeds(self._kernel.seeds_type, parts)
            kernel, args = self._kernel, (self._graph, self._plan, memory)

            def sample(chunk, counters):
                return kernel.sample_chunk(*args, chunk, self._randomness, counters)

            jobs = ((bucket, chunk) for chunk in kernel.seed_chunks(seeds, self._chunk_size))
            threads = self._threads or cpu_count()
            counters = collections.Counter()
            done = encoded_chunks(jobs, sample, self._specs, threads, SubgraphChunk.count_sizes)
            for index, chunk in enumerate(done):
                counters.update(chunk.counters)
                counters["subgraphs"] += chunk.subgraphs
                if chunk.records:
                    yield bucket, index, chunk.records
            self._sizes.flush(counters)

        def graph_on_worker(self, side) -> _GraphOnWorker:
            """The dense graph: the snapshot mapped once per process (a side input naming its
            folder), or built once per process from the side inputs and shared."""
            if len(side) == 1 and isinstance(side[0], str):
                return _MappedGraph(mapped_graph(side[0]))
            return _shared_graph(self._graph, self._handle, self._tag, side)

        def received_seeds(self, seeds_type, parts):
            """One bucket's packed seed pieces as one batch, counted as received (check_shuffle)."""
            seeds = seeds_type.concat([unpacked(part)[2] for part in parts])
            count_received(collections.Counter({SEEDS: len(seeds)}))
            self._bucket_samples.update(len(seeds))
            return seeds

        def sample(self, bucket_parts, side):
            """(bucket, lazily sampled subgraphs, the kernel's counters) for a bucket of seeds
            (the `topology` placement's)."""
            bucket, parts = bucket_parts
            loaded = self.graph_on_worker(side)
            seeds = self.received_seeds(self._kernel.seeds_type, parts)
            counters = collections.Counter()
            args = (loaded.memory, seeds, self._randomness, counters, self._chunk_size)
            return bucket, self._kernel.sample(self._graph, self._plan, *args), counters

    class _GraphFacts(beam.DoFn):
        """Once per run: edges with a missing end (dropped), self-loops and parallel edges."""

        def __init__(self, graph: GraphInfo, handle, tag: str):
            self._graph = graph
            self._handle = handle
            self._tag = tag

        def process(self, _, *side):
            loaded = _shared_graph(self._graph, self._handle, self._tag, side)
            for counter, count in edge_facts(self._graph, loaded.memory).items():
                Metrics.counter(NAMESPACE, counter).inc(count)
            return []

    def expand(self, inputs: SnapshotInputs):
        groups = bucketed(inputs.seeds, self._num_buckets)
        sample = beam.ParDo(self._fn, beam.pvalue.AsSingleton(inputs.snapshot))
        sample = sample.with_output_types(RecordBatch)
        if self._parts is not None:
            sample = sample.with_output_types(tuple[int, tuple[int, int, str]])
        return groups | "SampleBuckets" >> sample


def sample_buckets(
    graph: GraphInfo,
    inputs: SamplingInputs,
    fn: beam.DoFn,
    num_buckets: int,
    handle,
    tag: str,
    tags: tuple[str, ...] | None = None,
    keep: dict[str, tuple[str, ...]] | None = None,
):
    """Seeds grouped by bucket -> ParDo(fn) with the graph as side inputs (and GraphFacts),
    for the `topology` placement: the node tables reach the workers without their feature
    columns (but the columns `keep` names per node set: a temporal spec's times); with
    `tags`, fn's tagged outputs come back too (main output `subgraphs`)."""
    seeds, tables, adjacency = inputs.seeds, inputs.tables, inputs.adjacency
    side = [
        beam.pvalue.AsIter(adjacency[name] | f"AdjacencyValues/{name}" >> beam.Values())
        for name in graph.edge_sets
    ]
    for name in graph.node_sets:
        values = tables[name] | f"TableValues/{name}" >> beam.Values()
        strip = beam.Map(without_features, (keep or {}).get(name, ()))
        values = values | f"Topology/{name}" >> strip
        side.append(beam.pvalue.AsIter(values))
    pardo = beam.ParDo(fn, *side)
    _ = (
        seeds.pipeline
        | "Once" >> beam.Create([None])
        | "GraphFacts" >> beam.ParDo(SampleOnWorkers._GraphFacts(graph, handle, tag), *side)
    )
    return bucketed(seeds, num_buckets) | "SampleBuckets" >> (
        pardo if tags is None else pardo.with_outputs(*tags, main="subgraphs")
    )


def bucketed(seeds, num_buckets: int):
    """(shard, Seeds) -> (bucket, [packed seed pieces])."""
    return (
        seeds
        | "SeedValues" >> beam.Values()
        | "SeedBuckets" >> beam.ParDo(ToBuckets(SEEDS, "", num_buckets))
        | "Group" >> beam.GroupByKey()
    )
