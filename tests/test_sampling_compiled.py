"""The dense sampling's compiled kernels (sampler/sample/dense.py, sample_jit.py) against the
numpy step-by-step sampler they replaced (tests/kernel_oracles.py), chunk by chunk, array by
array.

The records of both are pinned by digests recorded before any compiled code
(tests/test_kernel_digests.py). Here the inputs aim at the corners: seeds
repeated and missing, rows without out-edges, frontiers that end up empty, chunks of one
sample, every strategy (several ops on one edge set, so a source has edges of several ops),
tied, zero, negative and NaN weights, sample sizes 1 and above every degree, both
aggregations and several --seed values.
"""

from __future__ import annotations

import collections
import dataclasses

import numpy as np
import pytest

from sampler import ids
from sampler.arrays import expand_ranges
from sampler.sample import dense, in_memory, sample_jit
from sampler.sample.adjacency import make_seeds
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests import kernel_oracles as oracles

SPECS = {
    "every strategy": """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "uni" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "top" input_op_names: "seed" input_op_names: "uni"
  edge_set_name: "cites" sample_size: 3 strategy: TOP_K }
sampling_ops { op_name: "wtd" input_op_names: "top" input_op_names: "seed"
  edge_set_name: "cites" sample_size: 2 strategy: RANDOM_WEIGHTED }
sampling_ops { op_name: "authors" input_op_names: "seed" input_op_names: "wtd"
  edge_set_name: "written" sample_size: 1 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "papers" input_op_names: "authors" edge_set_name: "writes"
  sample_size: 40 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "again" input_op_names: "papers" edge_set_name: "cites"
  sample_size: 1 strategy: TOP_K }
sampling_ops { op_name: "inst" input_op_names: "authors" edge_set_name: "affiliated_with"
  sample_size: 1 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "topics" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "has_topic" sample_size: 2 strategy: RANDOM_UNIFORM }
""",
    "uniform only": """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "cited" input_op_names: "seed" edge_set_name: "cites" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" input_op_names: "cited"
  edge_set_name: "written" sample_size: 2 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "papers" input_op_names: "authors" edge_set_name: "writes"
  sample_size: 4 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "topics" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "has_topic" sample_size: 2 strategy: RANDOM_UNIFORM }
""",
}


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("sampling_compiled")
    mag = synthetic.generate_mag(300, seed=11, feature_dim=2, edge_weights=True, hub_fraction=0.05)
    schema = load_graph(synthetic.write_graph(mag, str(root / "graph"), fmt="parquet"))
    specs = {}
    for name, text in SPECS.items():
        path = root / f"{len(specs)}.pbtxt"
        path.write_text(text)
        specs[name] = load_sampling_spec(str(path))
    return schema, specs


def odd_weights(dg: dense.DenseGraph) -> dense.DenseGraph:
    """The same graph with cites' weights tied, zero, negative, infinite and NaN."""
    adj = dg.adjacency["cites"]
    rng = np.random.default_rng(5)
    choices = np.array([np.nan, np.inf, -np.inf, 0, -1, 0.5, 2, 2, 2], np.float32)
    dtype = adj.weights.dtype if adj.weights is not None else np.float64
    weights = rng.choice(choices, len(adj.targets)).astype(dtype)
    adjacency = dict(dg.adjacency, cites=dataclasses.replace(adj, weights=weights))
    return dataclasses.replace(dg, adjacency=adjacency)


def parallel_edges(dg: dense.DenseGraph) -> dense.DenseGraph:
    """The same graph with about a third of each edge set's edges made parallel to the edge
    before them (same source and target, their own edge keys): ties broken by edge key."""
    rng = np.random.default_rng(6)
    adjacency = {}
    for name, adj in dg.adjacency.items():
        targets = adj.targets.copy()
        owner, positions = expand_ranges(adj.starts, adj.degrees)
        within = positions - adj.starts[owner]
        for i in np.sort(positions[(within > 0) & (rng.random(len(positions)) < 0.35)]):
            targets[i] = targets[i - 1]
        adjacency[name] = dataclasses.replace(adj, targets=targets)
    return dataclasses.replace(dg, adjacency=adjacency)


def seed_ids(dg: dense.DenseGraph, plan) -> np.ndarray:
    """Seeds with out-edges, without (degree 0 in cites), repeated, and one not in the graph."""
    papers = np.asarray(dg.nodes[plan.seed_set].rows.ids, dtype=object)
    degree = dg.adjacency["cites"].degrees
    isolated = papers[degree == 0][:5]
    some = papers[:40]
    assert len(isolated), "the graph has no paper without citations"
    return np.concatenate([some, isolated, some[:7], isolated[:2], [b"not-a-paper"]])


def both(graph, plan, dg, seeds, seed: int):
    """(numpy, compiled) chunks and counters of the same seeds."""
    out = []
    for sample in (oracles.sample_chunk_numpy, dense.sample_chunk_columns):
        counters = collections.Counter()
        chunk = sample(graph, plan, dg, seeds, Randomness(seed), counters)
        out.append((chunk, counters))
    return out


def assert_same(want, got):
    (w, wc), (g, gc) = want, got
    assert wc == gc
    np.testing.assert_array_equal(g.sample_ids, w.sample_ids)
    assert w.node_rows.keys() == g.node_rows.keys()
    for name, rows in w.node_rows.items():
        np.testing.assert_array_equal(g.node_rows[name].index, rows.index, err_msg=name)
        np.testing.assert_array_equal(g.node_rows[name].bounds, rows.bounds, err_msg=name)
    assert w.edge_rows.keys() == g.edge_rows.keys()
    for name, (edges, features, bounds) in w.edge_rows.items():
        g_edges, g_features, g_bounds = g.edge_rows[name]
        np.testing.assert_array_equal(g_edges, edges, err_msg=name)
        assert g_edges.shape == edges.shape and g_edges.dtype == edges.dtype
        np.testing.assert_array_equal(g_bounds, bounds, err_msg=name)
        assert g_features.keys() == features.keys()
        for f, col in features.items():
            np.testing.assert_array_equal(g_features[f], col, err_msg=f"{name}.{f}")


@pytest.mark.parametrize("spec", list(SPECS))
@pytest.mark.parametrize("aggregation", ["edge", "node"])
@pytest.mark.parametrize("weights", ["given", "odd", "parallel"])
def test_compiled_is_the_numpy_sampler(graph, spec, aggregation, weights):
    schema, specs = graph
    plan = make_plan(schema, specs[spec], aggregation)
    dg = in_memory.load_dense_graph(schema, plan)
    if weights == "odd":
        dg = odd_weights(dg)
    if weights == "parallel":
        dg = parallel_edges(dg)
    seeds = make_seeds(seed_ids(dg, plan))
    edges = 0
    for seed in (0, 3):
        want, got = both(schema, plan, dg, seeds, seed)
        assert_same(want, got)
        edges += sum(e.shape[1] for e, _, _ in want[0].edge_rows.values())
        for size in (1, 7):  # chunks of one sample and of a few
            for start in range(0, len(seeds), size * 5):
                part = seeds.take(np.arange(start, min(start + size, len(seeds))))
                assert_same(*both(schema, plan, dg, part, seed))
    assert edges > 500  # the comparison saw real work


def test_no_seeds_and_no_frontier(graph):
    """An empty chunk, and seeds whose every op finds no out-edges (empty frontiers)."""
    schema, specs = graph
    plan = make_plan(schema, specs["every strategy"], "edge")
    dg = in_memory.load_dense_graph(schema, plan)
    assert_same(*both(schema, plan, dg, make_seeds(np.zeros(0, dtype=object)), 0))
    papers = np.asarray(dg.nodes["paper"].rows.ids, dtype=object)
    no_edges = {
        name: dataclasses.replace(adj, degrees=np.zeros_like(adj.degrees))
        for name, adj in dg.adjacency.items()
    }
    empty = dataclasses.replace(dg, adjacency=no_edges)
    want, got = both(schema, plan, empty, make_seeds(papers[:9]), 0)
    assert_same(want, got)
    assert all(e.shape == (2, 0) for e, _, _ in got[0].edge_rows.values())


def test_streams_are_randomness_streams():
    rng = np.random.default_rng(1)
    fs = np.sort(rng.integers(0, 20, 500))
    fr = rng.integers(0, 1000, 500)
    keys = rng.integers(0, 2**63, 20).astype(np.uint64)
    fp = ids.mix(np.arange(1000, dtype=np.uint64))
    for seed in (0, 9):
        r = Randomness(seed)
        op = ids.fingerprint_one(f"op{seed}")
        got = sample_jit.streams(fs, fr, keys, fp, r.stream_prefix(op))
        np.testing.assert_array_equal(got, r.stream(op, keys[fs], fp[fr]))


@pytest.mark.parametrize("n_rows", [3, 70, 128, 5000, 200_000])
def test_unique_parts_is_numpy_unique(n_rows):
    """Both ways (bits for a small node set, stamps and a sort for a large one: 200,000 rows
    have more words of 64 bits than 16 per row of any sample here), rows at every bit of a
    word (128: the last bit of the last word)."""
    rng = np.random.default_rng(n_rows)
    n_samples = 30
    parts = []
    for _ in range(3):
        per = rng.integers(0, 40, n_samples)
        per[rng.random(n_samples) < 0.2] = 0
        bounds = np.concatenate([[0], np.cumsum(per)]).astype(np.int64)
        parts.append((bounds, rng.integers(0, n_rows, bounds[-1]).astype(np.int64)))
    sample = np.concatenate([np.repeat(np.arange(n_samples), np.diff(b)) for b, _ in parts])
    row = np.concatenate([r for _, r in parts])
    keys = np.unique(sample * n_rows + row)
    want = np.searchsorted(keys // n_rows, np.arange(n_samples + 1)), keys % n_rows
    got = sample_jit.unique_parts(*dense._stacked(parts), n_rows)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


@pytest.mark.parametrize("length", [0, 1, 2, 17, 31, 32, 33, 60])
@pytest.mark.parametrize("targets", [3, 1000])
def test_sort_run_is_a_stable_sort(length, targets):
    """chunk_edges' sort of one frontier row's edges by (target, edge key), stable, against
    numpy's lexsort: runs up to and past the short-run limit (32), targets that repeat (3
    of them: the edge keys decide, some tied too) and that do not (1,000), inside arrays whose
    entries outside the run stay as they were."""
    rng = np.random.default_rng(length * 7 + targets)
    a, b = 5, 5 + length
    for _ in range(20):
        dst = rng.integers(0, targets, b + 4).astype(np.int64)
        key = rng.integers(0, 4, b + 4).astype(np.uint64)
        pos = rng.permutation(b + 4).astype(np.int64)
        order = a + np.lexsort((key[a:b], dst[a:b]))  # stable: ties keep their order
        want = [x.copy() for x in (dst, pos, key)]
        for x in want:
            x[a:b] = x[order]
        scratch = np.full(max(3 * 32, length), -1, np.int64)
        sample_jit._sort_run(a, b, dst, pos, key, scratch)
        for got, expected in zip((dst, pos, key), want, strict=True):
            np.testing.assert_array_equal(got, expected)
