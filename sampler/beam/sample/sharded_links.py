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
    Assemble,
    OpOutputs,
    RecordBatch,
    SampleOp,
    SampleSubgraphs,
    SamplingInputs,
    SizeCounters,
    _one,
)
from sampler.sample import link, link_sharded
from sampler.sample.plan import Op, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.sampling import sample_op
from sampler.schema import GraphInfo

LINKS = "links"  # the shuffle kind of LinkExamples sent to their bucket


def _endpoint_requests(seeds: link.LinkSeeds, end: str, num_shards: int):
    """LinkSeeds -> (shard of the endpoint `end`, SampleNodes(sample, endpoint))."""
    nodes = getattr(seeds, end)
    for shard, index in shards.by_shard(nodes, num_shards):
        yield shard, SampleNodes(seeds.sample[index], nodes[index])


def _to_buckets(tag: str, sample, values, num_buckets: int):
    """(bucket, packed((tag, (sample keys, values)))) of each bucket's rows."""
    for bucket, index in shards.by_bucket(sample, num_buckets):
        yield bucket, packed((tag, (sample[index], values[index])))


def _endpoint_ids(shard_groups, end: str, num_buckets: int):
    """(shard, requests + table) -> the ids of the endpoints `end` found, to their buckets."""
    groups = shard_groups[1]
    table = _one(groups["table"], "node table")
    requests = SampleNodes.concat(list(groups["requests"]))
    return _to_buckets(end, *link_sharded.endpoint_ids(table, requests), num_buckets)


def _seeds_by_source(seeds: link.LinkSeeds, num_shards: int):
    for shard, index in shards.by_shard(seeds.source, num_shards):
        yield shard, seeds.take(index)


def _seed_times(shard_groups, feature: str, num_buckets: int):
    """(shard, seeds + seed edge set adjacency) -> the times of the seeds whose pair is an
    edge, to their buckets."""
    groups = shard_groups[1]
    seeds = link.LinkSeeds.concat(list(groups["seeds"]))
    adjacency = _one(groups["adjacency"], "adjacency")
    return _to_buckets("time", *link_sharded.seed_times(adjacency, seeds, feature), num_buckets)


def _seeds_to_buckets(seeds: link.LinkSeeds, num_buckets: int):
    for bucket, index in shards.by_bucket(seeds.sample, num_buckets):
        yield bucket, packed(("seeds", seeds.take(index)))


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
        SizeCounters().flush(counters)


def _by_range(shard_table, bits: int):
    """(shard, NodeTable) -> (range, (fps, ids)) of the target set."""
    rows = shard_table[1].rows
    for group, index in shards.split_index(link_sharded.range_of(rows.fp, bits), 1 << bits):
        yield group, (rows.fp[index], rows.ids[index])


def _resolve_negatives(range_groups):
    groups = range_groups[1]
    requests = list(groups["requests"])
    if requests:
        nodes = list(groups["nodes"])
        fps = np.concatenate([n[0] for n in nodes])
        names = np.concatenate([n[1] for n in nodes])
        requests = link_sharded.NegativeRequests.concat(requests)
        yield link_sharded.resolve_negatives(requests, fps, names)


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


def _frontier(examples: link_sharded.LinkExamples, ends: tuple[str, ...], num_shards: int):
    """LinkExamples -> (shard, PairNodes) of the endpoints `ends`."""
    for end in ends:
        rows = examples.pair_nodes(end)
        for shard, index in shards.by_shard(rows.node, num_shards):
            yield shard, rows.take(index)


class _SampleLinkOp(SampleOp._Sample):
    """(shard, PairNodes frontier + adjacency) -> SampledEdges less the samples' seed edges
    (`orientation`, None to keep them), and the next frontier on the output `frontier`."""

    frontier_type = link_sharded.PairNodes

    def __init__(self, op: Op, randomness: Randomness, num_shards: int, orientation, kind=None):
        super().__init__(op, randomness, kind)
        self._num_shards = num_shards
        self._orientation = orientation

    def sampled(self, adjacency, frontier):
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


class _LinkOp(SampleOp):
    def __init__(self, op, randomness, num_shards, orientation, kind=None):
        super().__init__(op, randomness, num_shards, kind)
        self._orientation = orientation

    def sample(self, joined) -> OpOutputs:
        fn = _SampleLinkOp(
            self._op, self._randomness, self._num_shards, self._orientation, self._kind
        )
        step = joined | "Sample" >> beam.ParDo(fn).with_outputs("frontier", main="edges")
        return OpOutputs(step.edges, step.frontier)


class _AssembleLinks(Assemble):
    """(bucket, pieces) -> (bucket, chunk, [serialized tf.Example]) of link examples."""

    first_kind = LINKS

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, keep_seed_edges: bool, folder):
        super().__init__(graph, plan, folder)
        self._keep = keep_seed_edges

    def output_schema(self):
        return link.link_output_schema(self._graph.schema, self._plan)

    def chunks(self, examples, nodes, edges, counters):
        examples = link_sharded.LinkExamples.concat(examples)
        return link_sharded.assemble_link_chunks(
            self._graph, self._plan, examples, nodes, edges, counters, self._keep
        )


@beam.typehints.with_output_types(RecordBatch)
class SampleLinkSubgraphs(SampleSubgraphs):
    """SamplingInputs with (shard, LinkSeeds) seeds -> RecordBatch, hop by hop."""

    def __init__(self, graph, plan, *, negatives: int = 0, keep_seed_edges: bool = False, **kw):
        super().__init__(graph, plan, **kw)
        self._negatives = negatives
        self._keep = keep_seed_edges
        self._orientations = {} if keep_seed_edges else link.seed_edge_orientations(graph, plan)

    def _examples(self, inputs: SamplingInputs):
        """Positive and negative LinkExamples (unkeyed batches)."""
        link_seed, num_shards, buckets = self._plan.link, self._num_shards, self._num_buckets
        seeds = inputs.seeds | "LinkSeeds" >> beam.Values()
        pieces = [seeds | "SeedsToBuckets" >> beam.FlatMap(_seeds_to_buckets, buckets)]
        for end, node_set in (("source", link_seed.source), ("target", link_seed.target)):
            requests = seeds | f"EndpointRequests/{end}" >> beam.FlatMap(
                _endpoint_requests, end, num_shards
            )
            pieces.append(
                {"requests": requests, "table": inputs.tables[node_set]}
                | f"EndpointJoin/{end}" >> beam.CoGroupByKey()
                | f"EndpointIds/{end}" >> beam.FlatMap(_endpoint_ids, end, buckets)
            )
        timed = self._plan.seed_time is not None
        if timed:
            pieces.append(
                {
                    "seeds": seeds | "SeedsBySource" >> beam.FlatMap(_seeds_by_source, num_shards),
                    "adjacency": inputs.adjacency[link_seed.edge_set],
                }
                | "SeedTimesJoin" >> beam.CoGroupByKey()
                | "SeedTimes" >> beam.FlatMap(_seed_times, self._plan.seed_time.feature, buckets)
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
            | "TargetCountsSum"
            >> beam.CombineGlobally(lambda parts: sum(parts, np.zeros(1 << bits, np.int64)))
        )
        made = grouped | "Positives" >> beam.ParDo(
            positives, beam.pvalue.AsSingleton(counts)
        ).with_outputs("requests", main="examples")
        negatives = (
            {
                "requests": made.requests,
                "nodes": targets | "TargetRanges" >> beam.FlatMap(_by_range, bits),
            }
            | "NegativeJoin" >> beam.CoGroupByKey()
            | "Negatives" >> beam.FlatMap(_resolve_negatives)
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

    def seeds(self, inputs: SamplingInputs):
        examples = self._examples(inputs)
        ends_of = {}
        for end, node_set in (
            ("source", self._plan.link.source),
            ("target", self._plan.link.target),
        ):
            ends_of.setdefault(node_set, []).append(end)
        seed_frontier = {
            name: examples
            | f"SeedFrontier/{name}" >> beam.FlatMap(_frontier, tuple(ends), self._num_shards)
            for name, ends in ends_of.items()
        }
        return examples, seed_frontier

    def sample_op(self, op: Op, kind: str | None) -> SampleOp:
        orientation = self._orientations.get(op.edge_set)
        return _LinkOp(op, self._randomness, self._num_shards, orientation, kind)

    def request_nodes(self, name: str, requests):
        return requests | f"RequestNodes/{name}" >> beam.MapTuple(lambda s, p: (s, p.nodes()))

    def assembler(self) -> Assemble:
        return _AssembleLinks(self._graph, self._plan, self._keep, self._folder)
