"""The `topology` placement: workers hold the graph without node features; features move once.

  Seeds              (bucket, [Seeds])          grouped like the `worker` placement
  SampleBuckets      topology on every worker   -> (part, [Subgraph without node features])
                                                   and per featured node set
                                                   (shard, (part, sorted unique fps))
  Features/<set>     requests x (shard, NodeTable)  -> (part, (set, FeatureRows))
  Fill               (part, pieces)             -> (bucket, chunk, [serialized tf.Example])

A part is (bucket, chunk): the subgraphs of one chunk of one bucket, in the order the
`worker` placement encodes them, so the records and their batches are the same. Node seeds
and link seeds alike (`kernel`, as for `SampleOnWorkers`): a link example's `_readout` node
set is no node set of the input graph, so it joins nothing and keeps its `label`.
"""

from __future__ import annotations

import collections
import uuid

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.utils import shared

from sampler import shards
from sampler.beam.join import Join
from sampler.beam.packing import packed, unpacked
from sampler.beam.sample.on_workers import SampleOnWorkers, sample_buckets
from sampler.beam.sample.sharded import (
    LOST_ROWS,
    NAMESPACE,
    SHUFFLE_SENT,
    RecordBatch,
    Sampling,
    SamplingInputs,
    _one,
    count_received,
)
from sampler.errors import UserError
from sampler.sample import temporal
from sampler.sample.encode import encode_specs
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.in_memory import NodeSeedSampling
from sampler.sample.plan import SamplingPlan
from sampler.sample.subgraph import chunk_of
from sampler.sample.topology import (
    FeatureRows,
    MissingFeatureRows,
    feature_requests,
    fill_features,
    lookup_features,
)
from sampler.schema import GraphInfo

SUBGRAPHS, FEATURES = "subgraphs", "features"


def featured_sets(graph: GraphInfo) -> list[str]:
    """The node sets whose features are joined after sampling."""
    return [name for name, info in graph.node_sets.items() if info.features]


class _SampleTopology(SampleOnWorkers._SampleBucket):
    """A bucket of seeds -> (part, subgraphs) and tagged (shard, (part, fps)) per featured set."""

    def __init__(self, *args, num_shards: int, batch: int = 512, kernel=None):
        super().__init__(*args, kernel=kernel)
        self._num_shards = num_shards
        self._batch = batch

    def process(self, bucket_parts, *side):
        bucket, subgraphs, counters = self.sample(bucket_parts, side)
        sets = featured_sets(self._graph)
        chunk, pending = 0, []
        for subgraph in subgraphs:
            self._sizes.add(subgraph)
            pending.append(subgraph)
            if len(pending) == self._batch:
                yield from self._emit((bucket, chunk), pending, sets)
                chunk, pending = chunk + 1, []
        if pending:
            yield from self._emit((bucket, chunk), pending, sets)
        self._sizes.flush(counters)

    def _emit(self, part, subgraphs, sets):
        yield part, subgraphs
        for name, fps in feature_requests(subgraphs, sets).items():
            for shard, index in shards.by_shard(fps, self._num_shards):
                yield beam.pvalue.TaggedOutput(name, (shard, (part, fps[index])))


class _LookupFeatures(beam.DoFn):
    """(shard, {requests, table}) -> (part, (set, FeatureRows)) for each part's request."""

    def __init__(self, node_set: str):
        self._node_set = node_set
        self._missing = Metrics.counter(NAMESPACE, f"nodes_not_in_node_set/{node_set}")
        self._sent = Metrics.counter(NAMESPACE, f"{SHUFFLE_SENT}/{FEATURES}")

    def process(self, shard_groups):
        _, groups = shard_groups
        table = _one(groups["table"], "node table")
        for part, fps in groups["requests"]:
            if table is None:
                self._missing.inc(len(fps))
                continue
            rows, missing = lookup_features(table, fps)
            self._missing.inc(missing)
            self._sent.inc(len(rows.fp))
            yield part, (self._node_set, rows)


class _Fill(beam.DoFn):
    """(part, [packed subgraphs, packed (set, FeatureRows)...]) -> (bucket, chunk, [tf.Example]).

    The features of the input graph's featured node sets are filled in; the records are
    encoded with `output_schema` (the input schema, or a link seed op's with `_readout`)."""

    def __init__(self, graph: GraphInfo, output_schema):
        self._graph = graph
        self._output_schema = output_schema
        self._specs = None

    def setup(self):
        self._specs = encode_specs(self._output_schema)

    def process(self, part_pieces):
        (bucket, chunk), pieces = part_pieces
        subgraphs, rows = [], {}
        for kind, piece in map(unpacked, pieces):
            if kind == SUBGRAPHS:
                subgraphs.extend(piece)
            else:
                rows.setdefault(piece[0], []).append(piece[1])
        specs = {name: self._graph.node_sets[name].features for name in featured_sets(self._graph)}
        joined = {name: FeatureRows.concat(parts) for name, parts in rows.items()}
        count_received(collections.Counter({FEATURES: sum(len(r.fp) for r in joined.values())}))
        try:
            filled = fill_features(subgraphs, joined, specs)
        except MissingFeatureRows as e:
            raise UserError(f"{e}: {LOST_ROWS}") from None
        yield bucket, chunk, encode_chunk(chunk_of(filled), self._specs)


Part = tuple[tuple[int, int], bytes]


def _packed(kind: str):
    """(part, piece) -> (part, packed (kind, piece)), so the pieces cross the Flatten and
    the shuffle as bytes."""
    return lambda part, piece: (part, packed((kind, piece)))


@beam.typehints.with_output_types(RecordBatch)
class SampleTopologyOnWorkers(Sampling):
    """SamplingInputs -> RecordBatch: sample on the topology, then join node features once."""

    def __init__(self, graph: GraphInfo, plan: SamplingPlan, *, chunk_size=512, kernel=None, **kw):
        super().__init__(graph, plan, **kw)
        self._chunk_size = chunk_size
        self._kernel = kernel or NodeSeedSampling()

    def expand(self, inputs: SamplingInputs):
        graph = self._graph
        sets = featured_sets(graph)
        handle, tag = shared.Shared(), uuid.uuid4().hex
        fn = _SampleTopology(
            graph,
            self._plan,
            self._randomness,
            self._chunk_size,
            handle,
            tag,
            num_shards=self._num_shards,
            kernel=self._kernel,
        )
        keep = temporal.time_features(self._plan)
        sampled = sample_buckets(
            graph, inputs, fn, self._num_buckets, handle, tag, tuple(sets), keep
        )
        pack = beam.MapTuple(_packed(SUBGRAPHS)).with_output_types(Part)
        pieces = [sampled[SUBGRAPHS] | "TagSubgraphs" >> pack]
        for name in sets:
            rows = (
                {"requests": sampled[name], "table": inputs.tables[name]}
                | f"Features/{name}/Join" >> Join()
                | f"Features/{name}/Lookup" >> beam.ParDo(_LookupFeatures(name))
            )
            pack = beam.MapTuple(_packed(FEATURES)).with_output_types(Part)
            pieces.append(rows | f"Features/{name}/Tag" >> pack)
        return (
            pieces
            | "Pieces" >> beam.Flatten()
            | "ByPart" >> beam.GroupByKey()
            | "Fill"
            >> beam.ParDo(_Fill(graph, self._kernel.output_schema(graph.schema, self._plan)))
        )
