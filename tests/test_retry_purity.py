"""A re-executed bundle yields the same records: the DoFns are pure functions of their input.

Dataflow re-runs failed bundles and may run a bundle twice speculatively. The
sampling DoFn must give the same output whatever the order its grouped inputs
arrive in, and however often it runs.
"""

from __future__ import annotations

import numpy as np

from sampler import ids
from sampler.adjacency import build_adjacency
from sampler.batches import EdgeBatch, SampleNodes
from sampler.beam.sample import SampleOp
from sampler.plan import RANDOM_UNIFORM, Op


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
    dofn = SampleOp._Sample(op, seed=11)
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
        SampleOp._Sample(op, seed=12), (0, {"frontier": parts, "adjacency": [adjacency]})
    )
    assert other_seed != first
