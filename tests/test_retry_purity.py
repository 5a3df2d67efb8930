"""A re-executed bundle yields the same records: the DoFns are pure functions of their input.

Dataflow re-runs failed bundles and may run a bundle twice speculatively. The
sampling DoFn must give the same output whatever the order its grouped inputs
arrive in, and however often it runs.
"""

from __future__ import annotations

import collections
import uuid

import apache_beam as beam
import numpy as np
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.utils import shared

from sampler import ids, shards
from sampler.batches import EdgeBatch, SampleNodes
from sampler.beam.packing import packed
from sampler.beam.sample.on_workers import SampleOnWorkers
from sampler.beam.sample.sharded import SEEDS, SampleOp
from sampler.sample import in_memory, link
from sampler.sample.adjacency import build_adjacency
from sampler.sample.plan import RANDOM_UNIFORM, Op, load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.pipeline_helpers import link_oracle_records
from tests.test_library import LINK_SPEC


def _edges(n_nodes=30, n_edges=600, seed=0):
    rng = np.random.default_rng(seed)
    fps = ids.fingerprint([f"n{i}".encode() for i in range(n_nodes)])
    src = fps[rng.integers(0, n_nodes, n_edges)]
    dst = fps[rng.integers(0, n_nodes, n_edges)]
    return fps, EdgeBatch(src, dst, {"w": rng.random(n_edges).astype(np.float32)})


def _run(dofn, element):
    out = list(dofn.process(element))
    return [(e.sample.tolist(), e.src.tolist(), e.dst.tolist(), e.edge_key.tolist()) for e in out]


def test_sample_dofn_is_pure_under_reordering_and_reexecution():
    fps, edges = _edges()
    op = Op("hop", ("seed",), "e", "n", "n", 3, RANDOM_UNIFORM, ids.fingerprint_one("hop"))
    samples = ids.fingerprint([f"s{i}".encode() for i in range(40)])
    rng = np.random.default_rng(1)
    frontier = SampleNodes(np.repeat(samples, 5), fps[rng.integers(0, len(fps), 200)])
    parts = [frontier.take(np.arange(i, 200, 4)) for i in range(4)]
    adjacency = build_adjacency(edges)
    dofn = SampleOp._Sample(op, Randomness(11))
    first = _run(dofn, (0, {"frontier": parts, "adjacency": [adjacency]}))
    again = _run(dofn, (0, {"frontier": parts, "adjacency": [adjacency]}))
    shuffled = _run(dofn, (0, {"frontier": parts[::-1] + parts[:1], "adjacency": [adjacency]}))
    # Edges arriving in another order (a different input sharding) build the same adjacency.
    perm = rng.permutation(len(edges))
    reordered = build_adjacency(edges.take(perm))
    rebuilt = _run(dofn, (0, {"frontier": parts, "adjacency": [reordered]}))
    assert first and first[0][0]
    assert first == again == shuffled == rebuilt
    other_seed = _run(
        SampleOp._Sample(op, Randomness(12)), (0, {"frontier": parts, "adjacency": [adjacency]})
    )
    assert other_seed != first


class FailFirstAttempt(beam.DoFn):
    """Wraps a DoFn; every bundle fails once, at its end, after its outputs were emitted.

    Attempts are counted per (token, bundle content) in a class attribute, so they survive
    the runner re-creating the DoFn for the retry (the BundleBasedDirectRunner runs in this
    process).
    """

    attempts: collections.Counter = collections.Counter()

    def __init__(self, inner: beam.DoFn, token: str):
        self._inner = inner
        self._token = token
        self._keys: list = []

    def setup(self):
        self._inner.setup()

    def start_bundle(self):
        self._keys = []

    def process(self, element, *side):
        self._keys.append(element[0])
        yield from self._inner.process(element, *side)

    def finish_bundle(self):
        key = (self._token, tuple(sorted(self._keys)))
        FailFirstAttempt.attempts[key] += 1
        if FailFirstAttempt.attempts[key] == 1:
            raise RuntimeError(f"injected failure of bundle {key}")


def test_a_retried_bundle_yields_the_same_records():
    """BundleBasedDirectRunner retries a failed bundle (up to 4 times; the FnApiRunner, the
    default local runner, does not retry at all): the retried sampling DoFn gives exactly
    the records of a run without failures."""
    fps, edges = _edges(n_nodes=40, n_edges=800, seed=3)
    op = Op("hop", ("seed",), "e", "n", "n", 3, RANDOM_UNIFORM, ids.fingerprint_one("hop"))
    rng = np.random.default_rng(4)
    samples = ids.fingerprint([f"s{i}".encode() for i in range(60)])
    frontier = SampleNodes(np.repeat(samples, 4), fps[rng.integers(0, len(fps), 240)])
    pieces = shards.by_shard(frontier.node, 4)
    elements = [
        (int(shard), {"frontier": [frontier.take(index)], "adjacency": [build_adjacency(edges)]})
        for shard, index in pieces
    ]
    expected = sorted(
        row for element in elements for row in _rows(SampleOp._Sample(op, Randomness(11)), element)
    )
    assert expected
    token = uuid.uuid4().hex
    with beam.Pipeline(runner="BundleBasedDirectRunner") as pipeline:
        got = (
            pipeline
            | beam.Create(elements, reshuffle=False)
            | beam.ParDo(FailFirstAttempt(SampleOp._Sample(op, Randomness(11)), token))
            | beam.FlatMap(_tuples)
        )
        assert_that(got, equal_to(expected))
    tried = {k: n for k, n in FailFirstAttempt.attempts.items() if k[0] == token}
    assert tried and all(n == 2 for n in tried.values())  # every bundle failed, then passed


def test_a_retried_link_bucket_yields_the_same_records(tmp_path):
    """The `worker` placement's bucket DoFn with link seeds and negatives (the graph as side
    inputs, shared per process), every bundle failing once: the records of the in-memory
    sampler, no more, no fewer."""
    graph = synthetic.generate_mag(20, seed=2, feature_dim=2)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"), fmt="parquet")
    spec = tmp_path / "link.pbtxt"
    spec.write_text(LINK_SPEC)
    info = load_graph(schema)
    plan = make_plan(info, load_sampling_spec(str(spec)), "edge", "writes")
    nodes, adjacency = in_memory.load_tables(info, plan)
    seeds = link.make_link_seeds(*link.edge_pairs(adjacency["writes"]))
    elements = [  # as ToBuckets sends them: one packed (kind, name, piece) per bucket
        (int(b), [packed((SEEDS, "", seeds.take(index)))])
        for b, index in shards.by_bucket(seeds.sample, 3)
    ]
    expected = link_oracle_records(schema, str(spec), "writes", seed=11, negatives=2)
    assert len(expected) == 3 * len(seeds) and len(elements) == 3
    fn = SampleOnWorkers._SampleBucket(
        info, plan, Randomness(11), 512, shared.Shared(), uuid.uuid4().hex, link.LinkSampling(2)
    )
    token = uuid.uuid4().hex
    with beam.Pipeline(runner="BundleBasedDirectRunner") as pipeline:
        side = [
            beam.pvalue.AsIter(pipeline | f"Side/{name}" >> beam.Create([table[name]]))
            for table, names in ((adjacency, info.edge_sets), (nodes, info.node_sets))
            for name in names
        ]
        got = (
            pipeline
            | beam.Create(elements, reshuffle=False)
            | beam.ParDo(FailFirstAttempt(fn, token), *side)
            | beam.FlatMap(lambda batch: batch[2])
        )
        assert_that(got, equal_to(expected))
    tried = {k: n for k, n in FailFirstAttempt.attempts.items() if k[0] == token}
    assert tried and all(n == 2 for n in tried.values())


def _tuples(edges):
    return [
        (int(s), int(a), int(b), int(k))
        for s, a, b, k in zip(edges.sample, edges.src, edges.dst, edges.edge_key, strict=True)
    ]


def _rows(dofn, element):
    return [row for edges in dofn.process(element) for row in _tuples(edges)]
