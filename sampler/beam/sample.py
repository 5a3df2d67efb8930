"""PTransforms that sample subgraphs from sharded node tables and adjacency lists.

The plan, stage by stage:
  Seeds        (shard, Seeds)            seed occurrences, sharded by seed node
  Op/<name>    (shard, SampleNodes)      frontier joined with (shard, Adjacency)
               -> SampledEdges           chosen edges, and their targets as the next frontier
  Nodes/<set>  (shard, SampleNodes)      joined with (shard, NodeTable) -> node rows
  Induced/<es> (node aggregation only)   every out-edge of the sample's nodes
  Assemble     (bucket, pieces)          -> (bucket, chunk, [serialized tf.Example])
"""

from __future__ import annotations

import collections
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from sampler import ids, shards
from sampler.batches import SampleNodes, Seeds
from sampler.graph_checks import edge_shape_counts
from sampler.node_table import merge_node_tables
from sampler.sample.adjacency import make_seeds, merge_adjacency
from sampler.sample.assemble import assemble, lookup_rows
from sampler.sample.dense import densify
from sampler.sample.encode import encode_specs, encode_subgraph
from sampler.sample.in_memory import sample_in_memory
from sampler.sample.plan import NODE, Op, SamplingPlan
from sampler.sample.sampling import _expand_ranges, all_out_edges, sample_frontier
from sampler.schema import GraphInfo

NAMESPACE = "sampler"
SEEDS, NODES, EDGES = "seeds", "nodes", "edges"


class _SizeCounters:
    """Beam counters `output_nodes/<set>` and `output_edges/<set>`, plus kernel counters."""

    def __init__(self):
        self._sums = collections.Counter()
        self._counters = {}

    def add(self, subgraph) -> None:
        for name, rows in subgraph.node_sets.items():
            self._sums[f"output_nodes/{name}"] += len(rows.ids)
        for name, rows in subgraph.edge_sets.items():
            self._sums[f"output_edges/{name}"] += len(rows.source)

    def flush(self, other: collections.Counter) -> None:
        """Adds the sums, and `other` (the kernel's counters), to Beam's counters."""
        self._sums.update(other)
        for name, value in self._sums.items():
            if name not in self._counters:
                self._counters[name] = Metrics.counter(NAMESPACE, name)
            self._counters[name].inc(value)
        self._sums = collections.Counter()


def _encoded_batches(bucket: int, subgraphs, specs, sizes, batch: int = 512):
    """(bucket, chunk, [serialized tf.Example]) batches, in the order the subgraphs come."""
    records, chunk = [], 0
    for subgraph in subgraphs:
        sizes.add(subgraph)
        records.append(encode_subgraph(subgraph, specs))
        if len(records) == batch:
            yield bucket, chunk, records
            records, chunk = [], chunk + 1
    if records:
        yield bucket, chunk, records


def _one(values, what: str):
    values = list(values)
    if len(values) > 1:
        raise ValueError(f"expected at most one {what} per shard, got {len(values)}")
    return values[0] if values else None


class _SplitSampleNodes(beam.DoFn):
    """SampleNodes -> (shard of node, SampleNodes)."""

    def __init__(self, num_shards: int):
        self._num_shards = num_shards

    def process(self, batch: SampleNodes):
        for shard, index in shards.by_shard(batch.node, self._num_shards):
            yield shard, batch.take(index)


class _ToBuckets(beam.DoFn):
    """A per-sample piece -> (bucket, (kind, set name, piece)) by sample key."""

    def __init__(self, kind: str, name: str, num_buckets: int):
        self._kind = kind
        self._name = name
        self._num_buckets = num_buckets

    def process(self, piece):
        for bucket, index in shards.by_bucket(piece.sample, self._num_buckets):
            yield bucket, (self._kind, self._name, piece.take(index))


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


class SampleOp(beam.PTransform):
    """One sampling op: {frontier parts} x adjacency -> SampledEdges (unkeyed)."""

    def __init__(self, op: Op, seed: int):
        super().__init__()
        self._op = op
        self._seed = seed

    class _Sample(beam.DoFn):
        def __init__(self, op: Op, seed: int):
            self._op = op
            self._seed = seed
            self._frontier = Metrics.distribution(NAMESPACE, f"frontier_rows/{op.name}")
            self._sampled = Metrics.counter(NAMESPACE, f"sampled_edges/{op.name}")

        def process(self, shard_groups):
            _, groups = shard_groups
            adjacency = _one(groups["adjacency"], "adjacency")
            frontier = SampleNodes.concat(list(groups["frontier"])).unique()
            if adjacency is None or len(frontier) == 0:
                return
            self._frontier.update(len(frontier))
            op = self._op
            edges = sample_frontier(
                adjacency,
                frontier,
                sample_size=op.sample_size,
                strategy=op.strategy,
                op_key=op.key,
                seed=self._seed,
            )
            self._sampled.inc(len(edges))
            if len(edges):
                yield edges

    def expand(self, inputs):
        frontier_parts, adjacency = inputs
        frontier = frontier_parts | "Frontier" >> beam.Flatten()
        return (
            {"frontier": frontier, "adjacency": adjacency}
            | "Join" >> beam.CoGroupByKey()
            | "Sample" >> beam.ParDo(self._Sample(self._op, self._seed))
        )


class LookupNodes(beam.PTransform):
    """(shard, SampleNodes) requests x (shard, NodeTable) -> SampleNodeRows."""

    def __init__(self, node_set: str):
        super().__init__()
        self._node_set = node_set

    class _Lookup(beam.DoFn):
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
            rows, missing = lookup_rows(table, requests)
            self._missing.inc(missing)
            if len(rows):
                yield rows

    def expand(self, inputs):
        requests, tables = inputs
        return (
            {"requests": requests, "table": tables}
            | "Join" >> beam.CoGroupByKey()
            | "Lookup" >> beam.ParDo(self._Lookup(self._node_set))
        )


class InducedEdges(beam.PTransform):
    """Node aggregation: every out-edge of every sampled source node, per sample."""

    class _AllEdges(beam.DoFn):
        def process(self, shard_groups):
            _, groups = shard_groups
            adjacency = _one(groups["adjacency"], "adjacency")
            frontier = SampleNodes.concat(list(groups["nodes"])).unique()
            if adjacency is not None and len(frontier):
                edges = all_out_edges(adjacency, frontier)
                if len(edges):
                    yield edges

    def expand(self, inputs):
        nodes, adjacency = inputs
        return (
            {"nodes": nodes, "adjacency": adjacency}
            | "Join" >> beam.CoGroupByKey()
            | "AllEdges" >> beam.ParDo(self._AllEdges())
        )


class AssembleExamples(beam.PTransform):
    """(bucket, pieces) -> (bucket, chunk, [serialized GraphTensor tf.Example]) batches."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan):
        super().__init__()
        self._graph = graph
        self._plan = plan

    class _Assemble(beam.DoFn):
        def __init__(self, graph: GraphInfo, plan: SamplingPlan):
            self._graph = graph
            self._plan = plan
            self._specs = None
            self._bucket_samples = Metrics.distribution(NAMESPACE, "bucket_samples")
            self._sizes = _SizeCounters()

        def setup(self):
            self._specs = encode_specs(self._graph.schema)

        def process(self, bucket_pieces):
            bucket, pieces = bucket_pieces
            seeds, nodes, edges = [], collections.defaultdict(list), collections.defaultdict(list)
            for kind, name, piece in pieces:
                {SEEDS: seeds, NODES: nodes[name], EDGES: edges[name]}[kind].append(piece)
            seeds = Seeds.concat(seeds)
            self._bucket_samples.update(len(seeds))
            counters = collections.Counter()
            subgraphs = assemble(self._graph, self._plan, seeds, nodes, edges, counters)
            yield from _encoded_batches(bucket, subgraphs, self._specs, self._sizes)
            self._sizes.flush(counters)

    def expand(self, pieces):
        return (
            pieces
            | "Flatten" >> beam.Flatten()
            | "Group" >> beam.GroupByKey()
            | "Encode" >> beam.ParDo(self._Assemble(self._graph, self._plan))
        )


class SampleSubgraphs(beam.PTransform):
    """(shard, Seeds) + node tables + adjacency -> (bucket, chunk, [serialized tf.Example])."""

    def __init__(
        self, graph: GraphInfo, plan: SamplingPlan, *, seed: int, num_shards: int, num_buckets: int
    ):
        super().__init__()
        self._graph = graph
        self._plan = plan
        self._seed = seed
        self._num_shards = num_shards
        self._num_buckets = num_buckets

    def expand(self, inputs):
        seeds, tables, adjacency = inputs
        graph, plan, buckets = self._graph, self._plan, self._num_buckets
        produced = {
            plan.seed_op: seeds
            | "SeedNodes" >> beam.MapTuple(lambda s, b: (s, SampleNodes(b.sample, b.node)))
        }
        sampled = collections.defaultdict(list)
        for op in plan.ops:
            frontier = tuple(produced[name] for name in op.inputs)
            edges = (frontier, adjacency[op.edge_set]) | f"Op/{op.name}" >> SampleOp(op, self._seed)
            sampled[op.edge_set].append(edges)
            produced[op.name] = (
                edges
                | f"Targets/{op.name}" >> beam.Map(lambda e: SampleNodes(e.sample, e.dst))
                | f"TargetsByShard/{op.name}" >> beam.ParDo(_SplitSampleNodes(self._num_shards))
            )
        pieces = [
            seeds
            | "SeedsToBuckets" >> beam.Values()
            | "SeedBuckets" >> beam.ParDo(_ToBuckets(SEEDS, "", buckets))
        ]
        rows = {}
        for name in graph.node_sets:
            requests = [produced[op] for op in produced if plan.output_set(op) == name]
            if not requests:
                continue
            rows[name] = (
                tuple(requests) | f"Requests/{name}" >> beam.Flatten(),
                tables[name],
            ) | f"Nodes/{name}" >> LookupNodes(name)
            pieces.append(
                rows[name] | f"NodeBuckets/{name}" >> beam.ParDo(_ToBuckets(NODES, name, buckets))
            )
        if plan.aggregation == NODE:
            sampled = {}
            for name, info in graph.edge_sets.items():
                if info.source not in rows:
                    continue
                present = (
                    rows[info.source]
                    | f"Present/{name}" >> beam.Map(lambda r: SampleNodes(r.sample, r.rows.fp))
                    | f"PresentByShard/{name}" >> beam.ParDo(_SplitSampleNodes(self._num_shards))
                )
                sampled[name] = [(present, adjacency[name]) | f"Induced/{name}" >> InducedEdges()]
        for name, parts in sampled.items():
            for i, edges in enumerate(parts):
                pieces.append(
                    edges
                    | f"EdgeBuckets/{name}/{i}" >> beam.ParDo(_ToBuckets(EDGES, name, buckets))
                )
        return tuple(pieces) | "Assemble" >> AssembleExamples(graph, plan)


class _GraphOnWorker:
    """The whole graph in one worker's memory, built once per process from the shards."""

    def __init__(self, graph: GraphInfo, adjacency: dict, tables: dict):
        nodes = {
            name: merge_node_tables(list(tables[name]), info.features)
            for name, info in graph.node_sets.items()
        }
        merged = {
            name: merge_adjacency(list(adjacency[name]), info.features)
            for name, info in graph.edge_sets.items()
        }
        self.memory = densify(graph, nodes, merged)


class SampleOnWorkers(beam.PTransform):
    """(shard, Seeds) + tables + adjacency -> (bucket, chunk, [serialized tf.Example]), sample-major.

    For graphs that fit one worker's memory: every worker process holds the whole
    graph (the sharded tables and adjacency as side inputs, merged once per process
    and shared across bundles), and samples a bucket of seeds completely, with the
    same kernels as the in-memory sampler. Nothing per sample is shuffled.
    """

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        *,
        seed: int,
        num_buckets: int,
        chunk_size: int = 512,
    ):
        super().__init__()
        self._graph = graph
        self._plan = plan
        self._seed = seed
        self._num_buckets = num_buckets
        self._chunk_size = chunk_size

    class _SampleBucket(beam.DoFn):
        def __init__(
            self, graph: GraphInfo, plan: SamplingPlan, seed: int, chunk_size: int, handle, tag: str
        ):
            self._graph = graph
            self._plan = plan
            self._seed = seed
            self._chunk_size = chunk_size
            self._handle = handle
            self._tag = tag
            self._specs = None
            self._bucket_samples = Metrics.distribution(NAMESPACE, "bucket_samples")
            self._sizes = _SizeCounters()

        def setup(self):
            self._specs = encode_specs(self._graph.schema)

        def process(self, bucket_parts, *side):
            bucket, parts = bucket_parts
            edge_sets, node_sets = list(self._graph.edge_sets), list(self._graph.node_sets)
            adjacency = dict(zip(edge_sets, side[: len(edge_sets)], strict=True))
            tables = dict(zip(node_sets, side[len(edge_sets) :], strict=True))
            loaded = self._handle.acquire(
                lambda: _GraphOnWorker(self._graph, adjacency, tables), self._tag
            )
            seeds = Seeds.concat(list(parts))
            self._bucket_samples.update(len(seeds))
            counters = collections.Counter()
            subgraphs = sample_in_memory(
                self._graph,
                self._plan,
                loaded.memory,
                seeds,
                self._seed,
                counters,
                self._chunk_size,
            )
            yield from _encoded_batches(bucket, subgraphs, self._specs, self._sizes)
            self._sizes.flush(counters)

    class _GraphFacts(beam.DoFn):
        """Once per run: edges with a missing end (dropped), self-loops and parallel edges."""

        def __init__(self, graph: GraphInfo, handle, tag: str):
            self._graph = graph
            self._handle = handle
            self._tag = tag

        def process(self, _, *side):
            edge_sets, node_sets = list(self._graph.edge_sets), list(self._graph.node_sets)
            adjacency = dict(zip(edge_sets, side[: len(edge_sets)], strict=True))
            tables = dict(zip(node_sets, side[len(edge_sets) :], strict=True))
            loaded = self._handle.acquire(
                lambda: _GraphOnWorker(self._graph, adjacency, tables), self._tag
            )
            for name, count in loaded.memory.dropped_edges.items():
                Metrics.counter(NAMESPACE, f"edges_with_missing_endpoint/{name}").inc(count)
            for name, info in self._graph.edge_sets.items():
                adj = loaded.memory.adjacency[name]
                src = np.repeat(np.arange(len(adj.degrees)), adj.degrees)
                dst = adj.targets[_expand_ranges(adj.starts, adj.degrees)[1]]
                loops, parallel = edge_shape_counts(src, dst, info.source == info.target)
                Metrics.counter(NAMESPACE, f"self_loops/{name}").inc(loops)
                Metrics.counter(NAMESPACE, f"parallel_edges/{name}").inc(parallel)
            return []

    def expand(self, inputs):
        seeds, tables, adjacency = inputs
        graph = self._graph
        side = [
            beam.pvalue.AsIter(adjacency[name] | f"AdjacencyValues/{name}" >> beam.Values())
            for name in graph.edge_sets
        ]
        side += [
            beam.pvalue.AsIter(tables[name] | f"TableValues/{name}" >> beam.Values())
            for name in graph.node_sets
        ]
        handle, tag = shared.Shared(), uuid.uuid4().hex
        fn = self._SampleBucket(graph, self._plan, self._seed, self._chunk_size, handle, tag)
        _ = (
            seeds.pipeline
            | "Once" >> beam.Create([None])
            | "GraphFacts" >> beam.ParDo(self._GraphFacts(graph, handle, tag), *side)
        )
        return (
            seeds
            | "SeedValues" >> beam.Values()
            | "SeedBuckets" >> beam.ParDo(_ToBuckets(SEEDS, "", self._num_buckets))
            | "BucketSeeds" >> beam.MapTuple(lambda bucket, piece: (bucket, piece[2]))
            | "Group" >> beam.GroupByKey()
            | "SampleBuckets" >> beam.ParDo(fn, *side)
        )
