"""Link seeds on the `sharded` placement: SampleLinkSubgraphs, the counterpart of
`sampler.beam.sample.sharded.SampleSubgraphs` for a symmetric_link_seed_op. The kernels are
`sampler.sample.link_sharded`; the examples are those of `sampler.sample.link`.

The plan, stage by stage (on top of SampleSubgraphs'):
  Endpoint*/<end>  (shard, SampleNodes)   each seed's source and target looked up in its
                                          node set's shard -> (bucket, ids)
  SeedTimes        (shard, LinkSeeds)     a temporal spec: each seed's time, its edge's, found
                                          in the seed edge set's adjacency on the source's
                                          shard -> (bucket, times)
  Positives        (bucket, seeds + ids)  -> LinkExamples; with negatives, (range, requests)
  Negative*        (range, requests)      joined with the target set's fps and ids of that
                                          range (one shuffle of the target set's ids)
                   -> negative LinkExamples; their (source, target) joined with the seed edge
                   set's adjacency on the source's shard: `negatives_that_are_edges`
  Op/<name>        (shard, PairNodes)     frontier rows carry their sample's pair, so the
                                          op drops the seed edges it chose
  Assemble         (bucket, pieces)       seed edges dropped again (node aggregation), the
                                          readout added
"""

from __future__ import annotations

import collections

import apache_beam as beam
import numpy as np
from apache_beam.metrics import Metrics

from sampler import shards
from sampler.batches import SampleNodes
from sampler.beam.packing import packed, unpacked
from sampler.beam.sample.sharded import (
    NAMESPACE,
    NODES,
    LookupNodes,
    NodeRequests,
    RecordBatch,
    SamplingInputs,
    SizeCounters,
    ToBuckets,
    _one,
    bucket_parts,
    edge_pieces,
    encoded_chunk_batches,
)
from sampler.memory import release_free_memory
from sampler.sample import link, link_sharded, temporal
from sampler.sample.encode import encode_specs
from sampler.sample.plan import Op, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.sampling import sample_op
from sampler.schema import GraphInfo

LINKS = "links"  # the shuffle kind of LinkExamples sent to their bucket


def _flush(counters: collections.Counter) -> None:
    for name, value in counters.items():
        Metrics.counter(NAMESPACE, name).inc(value)


class _EndpointRequests(beam.DoFn):
    """LinkSeeds -> (shard of the endpoint, SampleNodes(sample, endpoint))."""

    def __init__(self, end: str, num_shards: int):
        self._end = end
        self._num_shards = num_shards

    def process(self, seeds: link.LinkSeeds):
        nodes = getattr(seeds, self._end)
        for shard, index in shards.by_shard(nodes, self._num_shards):
            yield shard, SampleNodes(seeds.sample[index], nodes[index])


class _EndpointIds(beam.DoFn):
    """(shard, requests + table) -> (bucket, packed((end, (sample keys, ids)))) of those found."""

    def __init__(self, end: str, num_buckets: int):
        self._end = end
        self._num_buckets = num_buckets

    def process(self, shard_groups):
        _, groups = shard_groups
        table = _one(groups["table"], "node table")
        sample, names = link_sharded.endpoint_ids(
            table, SampleNodes.concat(list(groups["requests"]))
        )
        for bucket, index in shards.by_bucket(sample, self._num_buckets):
            yield bucket, packed((self._end, (sample[index], names[index])))


class _SeedsBySource(beam.DoFn):
    """LinkSeeds -> (shard of the source, LinkSeeds)."""

    def __init__(self, num_shards: int):
        self._num_shards = num_shards

    def process(self, seeds: link.LinkSeeds):
        for shard, index in shards.by_shard(seeds.source, self._num_shards):
            yield shard, seeds.take(index)


class _SeedTimes(beam.DoFn):
    """(shard, seeds + seed edge set adjacency) -> (bucket, packed(("time", (sample keys,
    times)))) of the seeds whose pair is an edge."""

    def __init__(self, feature: str, num_buckets: int):
        self._feature = feature
        self._num_buckets = num_buckets

    def process(self, shard_groups):
        _, groups = shard_groups
        seeds = link.LinkSeeds.concat(list(groups["seeds"]))
        adjacency = _one(groups["adjacency"], "adjacency")
        sample, times = link_sharded.seed_times(adjacency, seeds, self._feature)
        for bucket, index in shards.by_bucket(sample, self._num_buckets):
            yield bucket, packed(("time", (sample[index], times[index])))


class _SeedsToBuckets(beam.DoFn):
    def __init__(self, num_buckets: int):
        self._num_buckets = num_buckets

    def process(self, seeds: link.LinkSeeds):
        for bucket, index in shards.by_bucket(seeds.sample, self._num_buckets):
            yield bucket, packed(("seeds", seeds.take(index)))


class _SumCounts(beam.CombineFn):
    def __init__(self, size: int):
        self._size = size

    def create_accumulator(self):
        return np.zeros(self._size, np.int64)

    def add_input(self, acc, counts):
        return acc + counts

    def merge_accumulators(self, accs):
        return sum(accs, self.create_accumulator())

    def extract_output(self, acc):
        return acc


class _Positives(beam.DoFn):
    """(bucket, seeds + endpoint ids) -> positive LinkExamples; with negatives, their
    (range, NegativeRequests) on the output `requests`."""

    def __init__(self, negatives: int, randomness: Randomness, timed: bool):
        self._negatives = negatives
        self._randomness = randomness
        self._timed = timed

    def process(self, bucket_pieces, counts=None):
        _, pieces = bucket_pieces
        parts = {"seeds": [], "source": [], "target": [], "time": []}
        for kind, piece in map(unpacked, pieces):
            parts[kind].append(piece)
        counters = collections.Counter()
        examples = link_sharded.positives(
            link.LinkSeeds.concat(parts["seeds"]),
            parts["source"],
            parts["target"],
            counters,
            parts["time"] if self._timed else None,
        )
        if len(examples):
            yield examples
        if counts is not None:
            for group, requests in link_sharded.negative_requests(
                examples, self._negatives, counts, self._randomness, counters
            ):
                yield beam.pvalue.TaggedOutput("requests", (group, requests))
        _flush(counters)


class _ByRange(beam.DoFn):
    """(shard, NodeTable) -> (range, (fps, ids)) of the target set."""

    def __init__(self, bits: int):
        self._bits = bits

    def process(self, shard_table):
        rows = shard_table[1].rows
        groups = link_sharded.range_of(rows.fp, self._bits)
        for group, index in shards.split_index(groups, 1 << self._bits):
            yield group, (rows.fp[index], rows.ids[index])


class _ResolveNegatives(beam.DoFn):
    def process(self, range_groups):
        _, groups = range_groups
        requests = list(groups["requests"])
        if not requests:
            return
        nodes = list(groups["nodes"])
        fps = np.concatenate([n[0] for n in nodes])
        names = np.concatenate([n[1] for n in nodes])
        yield link_sharded.resolve_negatives(
            link_sharded.NegativeRequests.concat(requests), fps, names
        )


class _CountEdges(beam.DoFn):
    """(shard of source, negatives' pairs + seed edge set adjacency) -> negatives_that_are_edges."""

    def __init__(self):
        self._edges = Metrics.counter(NAMESPACE, "negatives_that_are_edges")

    def process(self, shard_groups):
        _, groups = shard_groups
        adjacency = _one(groups["adjacency"], "adjacency")
        pairs = list(groups["pairs"])
        if adjacency is None or not pairs:
            return
        source = np.concatenate([p[0] for p in pairs])
        target = np.concatenate([p[1] for p in pairs])
        self._edges.inc(int(link_sharded.has_edges(adjacency, source, target).sum()))


class _Frontier(beam.DoFn):
    """LinkExamples -> (shard, PairNodes) of the endpoints `ends`."""

    def __init__(self, ends: tuple[str, ...], num_shards: int):
        self._ends = ends
        self._num_shards = num_shards

    def process(self, examples: link_sharded.LinkExamples):
        for end in self._ends:
            rows = examples.pair_nodes(end)
            for shard, index in shards.by_shard(rows.node, self._num_shards):
                yield shard, rows.take(index)


class _SampleLinkOp(beam.DoFn):
    """(shard, PairNodes frontier + adjacency) -> SampledEdges less the samples' seed edges
    (`orientation`, None to keep them), and the next frontier on the output `frontier`."""

    def __init__(self, op: Op, randomness: Randomness, num_shards: int, orientation, kind=None):
        self._op = op
        self._randomness = randomness
        self._num_shards = num_shards
        self._orientation = orientation
        self._kind = kind  # the time kind of a temporal spec
        self._frontier = Metrics.distribution(NAMESPACE, f"frontier_rows/{op.name}")
        self._sampled = Metrics.counter(NAMESPACE, f"sampled_edges/{op.name}")

    def process(self, shard_groups):
        _, groups = shard_groups
        adjacency = _one(groups["adjacency"], "adjacency")
        frontier = link_sharded.PairNodes.concat(list(groups["frontier"])).unique()
        if adjacency is None or len(frontier) == 0:
            return
        self._frontier.update(len(frontier))
        nodes = frontier.nodes()
        nodes.time = frontier.time
        edges = sample_op(adjacency, nodes, self._op, self._kind, self._randomness)
        pairs = link_sharded.SeedPairs(frontier.sample, frontier.source, frontier.target)
        if self._orientation is not None:
            edges = link_sharded.drop_seed_edges(edges, self._orientation, pairs)
        self._sampled.inc(len(edges))
        if not len(edges):
            return
        yield edges
        source, target, _ = pairs.of(edges.sample)
        after = link_sharded.PairNodes(edges.sample, edges.dst, source, target, edges.time)
        for shard, index in shards.by_shard(after.node, self._num_shards):
            yield beam.pvalue.TaggedOutput("frontier", (shard, after.take(index)))


class _AssembleLinks(beam.DoFn):
    """(bucket, pieces) -> (bucket, chunk, [serialized tf.Example]) of link examples."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, keep_seed_edges: bool, folder):
        self._graph = graph
        self._plan = plan
        self._keep = keep_seed_edges
        self._folder = folder  # of the pieces that ToBuckets put in files
        self._specs = None
        self._sizes = SizeCounters()

    def setup(self):
        schema = link.link_output_schema(self._graph.schema, self._plan)
        self._specs = encode_specs(temporal.output_schema(schema, self._plan.seed_time))

    def process(self, bucket_pieces):
        bucket, pieces = bucket_pieces
        examples, nodes, edges = bucket_parts(pieces, LINKS, self._folder)
        counters = collections.Counter()
        chunks = link_sharded.assemble_link_chunks(
            self._graph,
            self._plan,
            link_sharded.LinkExamples.concat(examples),
            nodes,
            edges,
            counters,
            self._keep,
        )
        yield from encoded_chunk_batches(bucket, chunks, self._specs, self._sizes, counters)
        self._sizes.flush(counters)
        del examples, nodes, edges, chunks
        release_free_memory()


@beam.typehints.with_output_types(RecordBatch)
class SampleLinkSubgraphs(beam.PTransform):
    """SamplingInputs with (shard, LinkSeeds) seeds -> RecordBatch, hop by hop."""

    def __init__(
        self,
        graph: GraphInfo,
        plan: SamplingPlan,
        *,
        randomness: Randomness,
        num_shards: int,
        num_buckets: int,
        negatives: int = 0,
        keep_seed_edges: bool = False,
        folder: str | None = None,
    ):
        super().__init__()
        self._folder = folder  # where node rows and edges wait for the assembly (ToBuckets)
        self._graph = graph
        self._plan = plan
        self._randomness = randomness
        self._num_shards = num_shards
        self._num_buckets = num_buckets
        self._negatives = negatives
        self._keep = keep_seed_edges

    def _examples(self, inputs: SamplingInputs):
        """Positive and negative LinkExamples (unkeyed batches)."""
        link_seed, num_shards, buckets = self._plan.link, self._num_shards, self._num_buckets
        seeds = inputs.seeds | "LinkSeeds" >> beam.Values()
        pieces = [seeds | "SeedsToBuckets" >> beam.ParDo(_SeedsToBuckets(buckets))]
        for end, node_set in (("source", link_seed.source), ("target", link_seed.target)):
            requests = seeds | f"EndpointRequests/{end}" >> beam.ParDo(
                _EndpointRequests(end, num_shards)
            )
            pieces.append(
                {"requests": requests, "table": inputs.tables[node_set]}
                | f"EndpointJoin/{end}" >> beam.CoGroupByKey()
                | f"EndpointIds/{end}" >> beam.ParDo(_EndpointIds(end, buckets))
            )
        timed = self._plan.seed_time is not None
        if timed:
            pieces.append(
                {
                    "seeds": seeds | "SeedsBySource" >> beam.ParDo(_SeedsBySource(num_shards)),
                    "adjacency": inputs.adjacency[link_seed.edge_set],
                }
                | "SeedTimesJoin" >> beam.CoGroupByKey()
                | "SeedTimes" >> beam.ParDo(_SeedTimes(self._plan.seed_time.feature, buckets))
            )
        grouped = pieces | "Endpoints" >> beam.Flatten() | "EndpointsByBucket" >> beam.GroupByKey()
        positives = _Positives(self._negatives, self._randomness, timed)
        if self._negatives <= 0:
            return grouped | "Positives" >> beam.ParDo(positives)
        targets = inputs.tables[link_seed.target]
        bits = link_sharded.range_bits(num_shards)
        counts = (
            targets
            | "TargetCounts" >> beam.Map(lambda st: link_sharded.range_counts(st[1].rows.fp, bits))
            | "TargetCountsSum" >> beam.CombineGlobally(_SumCounts(1 << bits))
        )
        made = grouped | "Positives" >> beam.ParDo(
            positives, beam.pvalue.AsSingleton(counts)
        ).with_outputs("requests", main="examples")
        negatives = (
            {
                "requests": made.requests,
                "nodes": targets | "TargetRanges" >> beam.ParDo(_ByRange(bits)),
            }
            | "NegativeJoin" >> beam.CoGroupByKey()
            | "Negatives" >> beam.ParDo(_ResolveNegatives())
        )
        _ = (
            {
                "pairs": negatives
                | "NegativePairs"
                >> beam.FlatMap(
                    lambda e: (
                        (s, (e.source[i], e.target[i]))
                        for s, i in shards.by_shard(e.source, num_shards)
                    )
                ),
                "adjacency": inputs.adjacency[link_seed.edge_set],
            }
            | "NegativeEdgesJoin" >> beam.CoGroupByKey()
            | "NegativesThatAreEdges" >> beam.ParDo(_CountEdges())
        )
        return (made.examples, negatives) | "Examples" >> beam.Flatten()

    def expand(self, inputs: SamplingInputs):
        graph, plan, buckets = self._graph, self._plan, self._num_buckets
        tables, adjacency = inputs.tables, inputs.adjacency
        examples = self._examples(inputs)
        ends_of = {}
        for end, node_set in (("source", plan.link.source), ("target", plan.link.target)):
            ends_of.setdefault(node_set, []).append(end)
        seed_frontier = {
            name: examples
            | f"SeedFrontier/{name}" >> beam.ParDo(_Frontier(tuple(ends), self._num_shards))
            for name, ends in ends_of.items()
        }
        orientations = {} if self._keep else link.seed_edge_orientations(graph, plan)
        kind = None if plan.seed_time is None else plan.seed_time.kind
        produced, sampled = {}, collections.defaultdict(list)
        for op in plan.ops:
            parts = tuple(
                seed_frontier[op.source] if name == plan.seed_op else produced[name]
                for name in op.inputs
            )
            step = (
                {
                    "frontier": parts | f"Frontier/{op.name}" >> beam.Flatten(),
                    "adjacency": adjacency[op.edge_set],
                }
                | f"Op/{op.name}/Join" >> beam.CoGroupByKey()
                | f"Op/{op.name}/Sample"
                >> beam.ParDo(
                    _SampleLinkOp(
                        op, self._randomness, self._num_shards, orientations.get(op.edge_set), kind
                    )
                ).with_outputs("frontier", main="edges")
            )
            sampled[op.edge_set].append(step.edges)
            produced[op.name] = step.frontier
        pieces = [examples | "ExampleBuckets" >> beam.ParDo(ToBuckets(LINKS, "", buckets))]
        rows = {}
        for name in graph.node_sets:
            requests = [seed_frontier[name]] if name in seed_frontier else []
            requests += [produced[op.name] for op in plan.ops if op.target == name]
            if not requests:
                continue
            nodes = (
                tuple(requests)
                | f"Requests/{name}" >> beam.Flatten()
                | f"RequestNodes/{name}" >> beam.MapTuple(lambda s, p: (s, p.nodes()))
            )
            rows[name] = NodeRequests(nodes, tables[name]) | f"Nodes/{name}" >> LookupNodes(name)
            pieces.append(
                rows[name]
                | f"NodeBuckets/{name}" >> beam.ParDo(ToBuckets(NODES, name, buckets, self._folder))
            )
        shards_, folder = self._num_shards, self._folder
        pieces += edge_pieces(graph, plan, rows, sampled, adjacency, shards_, buckets, folder)
        return (
            tuple(pieces)
            | "Flatten" >> beam.Flatten()
            | "Group" >> beam.GroupByKey()
            | "Encode" >> beam.ParDo(_AssembleLinks(graph, plan, self._keep, folder))
        )
