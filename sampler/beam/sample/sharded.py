"""The `sharded` placement: sample subgraphs hop by hop from sharded node tables and
adjacency lists (SampleSubgraphs, for every kind of seed: sharded_links adds link seeds), and
the pieces all placements share (SamplingInputs, RecordBatch, ToBuckets, SizeCounters).

  Seeds        (shard, Seeds)            seed occurrences, sharded by seed node
  Op/<name>    (shard, SampleNodes)      frontier joined with (shard, Adjacency)
               -> SampledEdges           chosen edges, and their targets as the next frontier
  Nodes/<set>  (shard, SampleNodes)      joined with (shard, NodeTable) -> node rows
  Induced/<es> (node aggregation only)   every out-edge of the sample's nodes
  Assemble     (bucket, pieces)          -> (bucket, chunk, [serialized tf.Example]); the
                                         node rows and edges wait in files (ToBuckets)
"""

from __future__ import annotations

import collections
import typing

import apache_beam as beam
from apache_beam.metrics import Metrics

from sampler import shards
from sampler.batches import SampledEdges, SampleNodes, Seeds, SharedNodeRows
from sampler.beam.packing import packed, packed_buffers, unpacked, unpacked_buffers
from sampler.io.piece_files import PieceRange, read_pieces, write_pieces
from sampler.memory import release_free_memory
from sampler.sample import temporal
from sampler.sample.assemble import assemble_chunks
from sampler.sample.encode import encode_specs
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.plan import NODE, Op, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.sampling import all_out_edges, sample_op
from sampler.schema import GraphInfo

NAMESPACE = "sampler"
SEEDS, NODES, EDGES = "seeds", "nodes", "edges"

# What both placements output: (bucket, chunk, [serialized GraphTensor tf.Example]).
RecordBatch = tuple[int, int, list[bytes]]


class SamplingInputs(typing.NamedTuple):
    """What SampleSubgraphs and SampleOnWorkers sample from."""

    seeds: beam.PCollection  # (shard, Seeds)
    tables: dict[str, beam.PCollection]  # node set -> (shard, NodeTable)
    adjacency: dict[str, beam.PCollection]  # edge set -> (shard, Adjacency)


class SizeCounters:
    """Beam counters `output_nodes/<set>` and `output_edges/<set>`, plus kernel counters."""

    def __init__(self):
        self._sums = collections.Counter()
        self._counters = {}

    def add(self, subgraph) -> None:
        for name, rows in subgraph.node_sets.items():
            self._sums[f"output_nodes/{name}"] += len(rows.ids)
        for name, rows in subgraph.edge_sets.items():
            self._sums[f"output_edges/{name}"] += len(rows.source)

    def add_chunk(self, chunk) -> None:
        """`add` for every subgraph of a SubgraphChunk."""
        chunk.count_sizes(self._sums)

    def flush(self, other: collections.Counter) -> None:
        """Adds the sums, and `other` (the kernel's counters), to Beam's counters."""
        self._sums.update(other)
        for name, value in self._sums.items():
            if name not in self._counters:
                self._counters[name] = Metrics.counter(NAMESPACE, name)
            self._counters[name].inc(value)
        self._sums = collections.Counter()


def encoded_chunk_batches(bucket: int, chunks, specs, sizes, counters):
    """(bucket, chunk, [serialized tf.Example]) of SubgraphChunks (sampler.sample.encode_chunk),
    one batch per chunk, in the order of the chunks (the shards concatenate them in that
    order); counts `output_nodes/`, `output_edges/` and `subgraphs`."""
    for chunk_index, chunk in enumerate(chunks):
        sizes.add_chunk(chunk)
        counters["subgraphs"] += len(chunk)
        records = encode_chunk(chunk, specs)
        if records:
            yield bucket, chunk_index, records


def bucket_parts(pieces, first_kind: str, folder: str | None) -> tuple[list, dict, dict]:
    """A bucket's packed pieces unpacked (a PieceRange read from its file in `folder`: its
    arrays views of the bytes read, sampler.beam.packing.unpacked_buffers) and
    counted as received (check_shuffle): the pieces of `first_kind` (the seeds or link
    examples), and node set -> node rows (SharedNodeRows), edge set -> sampled edges."""
    firsts, nodes, edges = [], collections.defaultdict(list), collections.defaultdict(list)
    received = collections.Counter()
    pieces = [unpacked(p) for p in pieces]
    where = [i for i, (_, _, piece) in enumerate(pieces) if isinstance(piece, PieceRange)]
    for i, data in read_pieces(folder, [pieces[i][2] for i in where]):
        pieces[where[i]] = (*pieces[where[i]][:2], unpacked_buffers(data))
    for kind, name, piece in pieces:
        received[kind] += len(piece.sample)
        {first_kind: firsts, NODES: nodes[name], EDGES: edges[name]}[kind].append(piece)
    count_received(received)
    return firsts, nodes, edges


def _one(values, what: str):
    values = list(values)
    if len(values) > 1:
        raise ValueError(f"expected at most one {what} per shard, got {len(values)}")
    return values[0] if values else None


class SplitSampleNodes(beam.DoFn):
    """SampleNodes -> (shard of node, SampleNodes), each (sample, node) once: an op's targets
    repeat a node for every edge of a sample that reaches it (a field of study from most of a
    sample's papers), and every step that receives them (an op, a lookup) takes each once."""

    def __init__(self, num_shards: int):
        self._num_shards = num_shards

    def process(self, batch: SampleNodes):
        batch = batch.unique()
        for shard, index in shards.by_shard(batch.node, self._num_shards):
            yield shard, batch.take(index)


# Rows of per-sample pieces sent to their bucket and received there (per kind). Beam 2.77's
# local FnApiRunner with gRPC workers (--direct_running_mode=multi_processing or
# multi_threading) dropped writes in its time-flushed data streams (pipelines.beam_patches.streamed_inputs
# turns that flush off); the CLI still compares the two after the run
# (pipelines.reporting.accounting.check_shuffle): a loss is an error, whatever the runner.
SHUFFLE_SENT, SHUFFLE_RECEIVED = "shuffle_rows_sent", "shuffle_rows_received"
LOST_ROWS = (
    "the runner lost rows between stages (Beam 2.77's local runner did so with worker"
    " processes or threads before pipelines.beam_patches.streamed_inputs): run in one process (the"
    " default --direct_running_mode) or on Dataflow, or use --graph_placement worker"
)


def count_received(received: collections.Counter) -> None:
    for kind, rows in received.items():
        Metrics.counter(NAMESPACE, f"{SHUFFLE_RECEIVED}/{kind}").inc(rows)


@beam.typehints.with_output_types(tuple[int, bytes])
class ToBuckets(beam.DoFn):
    """A per-sample piece -> (bucket, packed (kind, set name, piece)) by sample key. With a
    `folder`, the bucket parts go into one file there and the piece sent is its PieceRange
    (sampler.io.piece_files): the shuffle carries where the rows are, not the rows."""

    def __init__(self, kind: str, name: str, num_buckets: int, folder: str | None = None):
        self._kind = kind
        self._name = name
        self._num_buckets = num_buckets
        self._folder = folder
        self._sent = Metrics.counter(NAMESPACE, f"{SHUFFLE_SENT}/{kind}")

    def process(self, piece):
        self._sent.inc(len(piece.sample))
        parts = (
            (bucket, piece.take(index))
            for bucket, index in shards.by_bucket(piece.sample, self._num_buckets)
        )
        if self._folder is not None:
            pieces = ((b, packed_buffers(p)) for b, p in parts)
            parts = write_pieces(self._folder, self._kind, pieces)
        for bucket, part in parts:
            yield bucket, packed((self._kind, self._name, part))


class _SeedTimes(beam.DoFn):
    """(shard, {seeds, table}) -> (shard, SampleNodes with seed times): temporal.seed_nodes."""

    def __init__(self, feature: str):
        self._feature = feature

    def process(self, shard_groups):
        shard, groups = shard_groups
        seeds, table = list(groups["seeds"]), _one(groups["table"], "node table")
        if seeds and table is not None:
            yield shard, temporal.seed_nodes(Seeds.concat(seeds), table, self._feature)


class OpInputs(typing.NamedTuple):
    """What one SampleOp joins: its input ops' frontiers and its edge set's adjacency."""

    frontier: tuple[beam.PCollection, ...]  # each (shard, SampleNodes)
    adjacency: beam.PCollection  # (shard, Adjacency)


class OpOutputs(typing.NamedTuple):
    edges: beam.PCollection  # SampledEdges
    frontier: beam.PCollection  # (shard, the op's targets): the next ops' frontier


def _join(label: str, groups: dict, fn: beam.DoFn) -> beam.PCollection:
    """`groups` ({name: (shard, value)}) joined by shard, then ParDo(fn): `label`/Join, /Apply."""
    return groups | f"{label}/Join" >> beam.CoGroupByKey() | f"{label}/Apply" >> beam.ParDo(fn)


def _targets(edges: SampledEdges) -> SampleNodes:
    return SampleNodes(edges.sample, edges.dst, edges.time)


class SampleOp(beam.PTransform):
    """One sampling op: OpInputs (frontier parts x adjacency) -> OpOutputs."""

    def __init__(self, op: Op, randomness: Randomness, num_shards: int, kind: str | None = None):
        super().__init__()
        self._op = op
        self._randomness = randomness
        self._num_shards = num_shards
        self._kind = kind  # the time kind of a temporal spec

    class _Sample(beam.DoFn):
        """(shard, frontier + adjacency) -> SampledEdges."""

        frontier_type = SampleNodes

        def __init__(self, op: Op, randomness: Randomness, kind: str | None = None):
            self._op = op
            self._randomness = randomness
            self._kind = kind
            self._frontier = Metrics.distribution(NAMESPACE, f"frontier_rows/{op.name}")
            self._sampled = Metrics.counter(NAMESPACE, f"sampled_edges/{op.name}")

        def process(self, shard_groups):
            _, groups = shard_groups
            adjacency = _one(groups["adjacency"], "adjacency")
            frontier = self.frontier_type.concat(list(groups["frontier"])).unique()
            if adjacency is None or len(frontier) == 0:
                return
            self._frontier.update(len(frontier))
            yield from self.sampled(adjacency, frontier)

        def sampled(self, adjacency, frontier):
            edges = sample_op(adjacency, frontier, self._op, self._kind, self._randomness)
            self._sampled.inc(len(edges))
            if len(edges):
                yield edges

    def sample(self, joined) -> OpOutputs:
        edges = joined | "Sample" >> beam.ParDo(
            self._Sample(self._op, self._randomness, self._kind)
        )
        targets = (
            edges
            | "Targets" >> beam.Map(_targets)
            | "TargetsByShard" >> beam.ParDo(SplitSampleNodes(self._num_shards))
        )
        return OpOutputs(edges, targets)

    def expand(self, inputs: OpInputs) -> OpOutputs:
        frontier = inputs.frontier | "Frontier" >> beam.Flatten()
        return self.sample(
            {"frontier": frontier, "adjacency": inputs.adjacency} | "Join" >> beam.CoGroupByKey()
        )


class _Lookup(beam.DoFn):
    """(shard, requests (SampleNodes) + NodeTable) -> SharedNodeRows."""

    def __init__(self, node_set: str):
        self._missing = Metrics.counter(NAMESPACE, f"nodes_not_in_node_set/{node_set}")

    def process(self, shard_groups):
        _, groups = shard_groups
        table = _one(groups["table"], "node table")
        requests = SampleNodes.concat(list(groups["requests"]))
        if len(requests) == 0:
            return
        if table is None:
            self._missing.inc(len(requests.unique()))
            return
        rows, missing = SharedNodeRows.looked_up(table, requests)
        self._missing.inc(missing)
        if len(rows):
            yield rows


class _AllEdges(beam.DoFn):
    """Node aggregation: (shard, nodes + adjacency) -> every out-edge of the nodes."""

    def process(self, shard_groups):
        _, groups = shard_groups
        adjacency = _one(groups["adjacency"], "adjacency")
        frontier = SampleNodes.concat(list(groups["nodes"])).unique()
        if adjacency is not None and len(frontier):
            edges = all_out_edges(adjacency, frontier)
            if len(edges):
                yield edges


def bundles_trimmed() -> bool:
    """Whether this SDK worker gives a bundle's freed pages back when the bundle ends, its
    malloc arenas capped (pipelines.runtime.worker_buffers: the local runner's forked workers).
    There a bundle's buckets reuse the pages that the bucket before freed, and giving them back
    after each bucket only made the next one fault them in again (a sixth of the assembly's
    CPU at 200k papers, the same peak); elsewhere (Beam's own workers, Dataflow's) each
    bucket's are given back."""
    from apache_beam.runners.worker import bundle_processor

    return bool(getattr(bundle_processor.BundleProcessor.process_bundle, "_trims", False))


class Assemble(beam.DoFn):
    """(bucket, pieces) -> (bucket, chunk, [serialized tf.Example]) of node seeds; a kind of
    seed overrides `first_kind`, `output_schema` and `chunks`."""

    first_kind = SEEDS  # the ToBuckets kind of the seeds' pieces

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, folder: str | None):
        self._graph = graph
        self._plan = plan
        self._folder = folder  # of the pieces that ToBuckets put in files
        self._specs = None
        self._trim_buckets = True
        self._bucket_samples = Metrics.distribution(NAMESPACE, "bucket_samples")
        self._sizes = SizeCounters()

    def output_schema(self):
        return self._graph.schema

    def setup(self):
        schema = temporal.output_schema(self.output_schema(), self._plan.seed_time)
        self._specs = encode_specs(schema)
        self._trim_buckets = not bundles_trimmed()

    def chunks(self, seeds, nodes, edges, counters):
        seeds = Seeds.concat(seeds)
        self._bucket_samples.update(len(seeds))
        chunks = assemble_chunks(self._graph, self._plan, seeds, nodes, edges, counters)
        if self._plan.seed_time is not None:
            chunks = (temporal.with_chunk_seed_times(c, self._plan) for c in chunks)
            if self._plan.aggregation == NODE:
                chunks = (temporal.filter_induced(c, self._plan) for c in chunks)
        return chunks

    def process(self, bucket_pieces):
        bucket, pieces = bucket_pieces
        firsts, nodes, edges = bucket_parts(pieces, self.first_kind, self._folder)
        counters = collections.Counter()
        chunks = self.chunks(firsts, nodes, edges, counters)
        yield from encoded_chunk_batches(bucket, chunks, self._specs, self._sizes, counters)
        self._sizes.flush(counters)
        del firsts, nodes, edges, chunks
        if self._trim_buckets:  # a bundle assembles many buckets (sampler.memory)
            release_free_memory()


@beam.typehints.with_output_types(RecordBatch)
class AssembleExamples(beam.PTransform):
    """(bucket, pieces) -> (bucket, chunk, [serialized GraphTensor tf.Example]) batches."""

    def __init__(self, fn: Assemble):
        super().__init__()
        self._fn = fn

    def expand(self, pieces):
        return (
            pieces
            | "Flatten" >> beam.Flatten()
            | "Group" >> beam.GroupByKey()
            | "Encode" >> beam.ParDo(self._fn)
        )


class Sampling(beam.PTransform):
    """SamplingInputs -> RecordBatch: what the placements that sample from the sharded tables
    (SampleSubgraphs, topology.SampleTopologyOnWorkers) are made with."""

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        *,
        randomness: Randomness,
        num_shards: int,
        num_buckets: int,
    ):
        super().__init__()
        self._graph = graph
        self._plan = plan
        self._randomness = randomness
        self._num_shards = num_shards
        self._num_buckets = num_buckets


@beam.typehints.with_output_types(RecordBatch)
class SampleSubgraphs(Sampling):
    """SamplingInputs -> RecordBatch (bucket, chunk, [serialized tf.Example]), hop by hop.

    The path of every kind of seed: a kind (sharded_links.SampleLinkSubgraphs) overrides
    `seeds`, `sample_op`, `request_nodes` and `assembler`."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, *, folder: str | None = None, **kw):
        super().__init__(graph, plan, **kw)
        self._folder = folder  # where node rows and edges wait for the assembly (ToBuckets)

    def seeds(self, inputs: SamplingInputs) -> tuple[beam.PCollection, dict]:
        """The seeds' pieces for the assembly (unkeyed batches), and node set -> the seed op's
        frontier there ((shard, SampleNodes)), each seed's time from its node's row."""
        seeds, plan = inputs.seeds, self._plan
        if plan.seed_time is None:
            seed_nodes = seeds | "SeedNodes" >> beam.MapTuple(
                lambda s, b: (s, SampleNodes(b.sample, b.node))
            )
        else:
            groups = {"seeds": seeds, "table": inputs.tables[plan.seed_set]}
            seed_nodes = _join("SeedTimes", groups, _SeedTimes(plan.seed_time.feature))
        return seeds | "SeedsToBuckets" >> beam.Values(), {plan.seed_set: seed_nodes}

    def sample_op(self, op: Op, kind: str | None) -> SampleOp:
        return SampleOp(op, self._randomness, self._num_shards, kind)

    def request_nodes(self, name: str, requests: beam.PCollection) -> beam.PCollection:
        """An op's frontier (or the seed frontier) -> (shard, SampleNodes) to look up."""
        return requests

    def assembler(self) -> Assemble:
        return Assemble(self._graph, self._plan, self._folder)

    def expand(self, inputs: SamplingInputs):
        tables, adjacency = inputs.tables, inputs.adjacency
        graph, plan, buckets, folder = self._graph, self._plan, self._num_buckets, self._folder
        firsts, seed_frontier = self.seeds(inputs)
        kind = None if plan.seed_time is None else plan.seed_time.kind
        produced, sampled = {}, collections.defaultdict(list)
        for op in plan.ops:
            parts = tuple(
                seed_frontier[op.source] if name == plan.seed_op else produced[name]
                for name in op.inputs
            )
            step = OpInputs(parts, adjacency[op.edge_set]) | f"Op/{op.name}" >> self.sample_op(
                op, kind
            )
            sampled[op.edge_set].append(step.edges)
            produced[op.name] = step.frontier
        first_kind = self.assembler().first_kind
        pieces = [firsts | "SeedBuckets" >> beam.ParDo(ToBuckets(first_kind, "", buckets))]
        rows = {}
        for name in graph.node_sets:
            requests = [seed_frontier[name]] if name in seed_frontier else []
            requests += [produced[op.name] for op in plan.ops if op.target == name]
            if not requests:
                continue
            nodes = tuple(requests) | f"Requests/{name}" >> beam.Flatten()
            groups = {"requests": self.request_nodes(name, nodes), "table": tables[name]}
            rows[name] = _join(f"Nodes/{name}", groups, _Lookup(name))
            pieces.append(
                rows[name]
                | f"NodeBuckets/{name}" >> beam.ParDo(ToBuckets(NODES, name, buckets, folder))
            )
        shards_ = self._num_shards
        pieces += edge_pieces(graph, plan, rows, sampled, adjacency, shards_, buckets, folder)
        return tuple(pieces) | "Assemble" >> AssembleExamples(self.assembler())


def edge_pieces(graph, plan, rows, sampled, adjacency, num_shards, buckets, folder) -> list:
    """The sampled edges (edge set -> [SampledEdges PCollections]) sent to their buckets (by
    files in `folder` unless None: ToBuckets); with node aggregation, instead every edge
    induced among the nodes found (`rows`: node set -> its looked-up rows)."""
    if plan.aggregation == NODE:
        sampled = {}
        for name, info in graph.edge_sets.items():
            if info.source not in rows:
                continue
            present = (
                rows[info.source]
                | f"Present/{name}"
                >> beam.Map(lambda r: SampleNodes(r.sample, r.rows.fp[r.inverse]))
                | f"PresentByShard/{name}" >> beam.ParDo(SplitSampleNodes(num_shards))
            )
            groups = {"nodes": present, "adjacency": adjacency[name]}
            sampled[name] = [_join(f"Induced/{name}", groups, _AllEdges())]
    return [
        edges | f"EdgeBuckets/{name}/{i}" >> beam.ParDo(ToBuckets(EDGES, name, buckets, folder))
        for name, parts in sampled.items()
        for i, edges in enumerate(parts)
    ]
