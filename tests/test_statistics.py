"""Statistical tests of the sampling kernel, deterministic (fixed seeds) but sound.

The kernel `sample_frontier` is called with many distinct sample keys for one node, so
each key is an independent trial. Frequencies are compared with the contract by
chi-square goodness-of-fit tests at p > 1e-3 (scipy is not a dependency: the chi-square
survival function is computed below and checked against table values):

  * RANDOM_UNIFORM k of d: every k-subset equally likely (multinomial chi-square), every
    neighbour included with probability k/d (chi-square corrected for the negative
    correlation of inclusions without replacement, see `inclusion_statistic`);
  * RANDOM_WEIGHTED k=1: P(edge) = w / sum(w); weight <= 0 never chosen;
  * RANDOM_WEIGHTED k>1: successive sampling without replacement, so
    P({i, j}) = w_i/W * w_j/(W - w_i) + w_j/W * w_i/(W - w_j) for k=2 (k=3 enumerated
    the same way); heavier edges are included more often; weight 0 never.

One smaller check goes through `load_graph` + `sample_in_memory` with repeated seeds.
"""

from __future__ import annotations

import collections
import itertools
import math
import os

import numpy as np
import pyarrow as pa
import pytest

from sampler import ids
from sampler.batches import EdgeBatch, SampleNodes
from sampler.features import FeatureSpec
from sampler.io.writers import write_table
from sampler.sample import in_memory
from sampler.sample.adjacency import build_adjacency, make_seeds
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.sample.sampling import sample_frontier
from sampler.schema import load_graph

P_MIN = 1e-3


# --------------------------------------------------------------------------- chi-square


def _upper_gamma_regularized(a: float, x: float) -> float:
    """Q(a, x) = Gamma(a, x) / Gamma(a) (Numerical Recipes: series or continued fraction)."""
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        for _ in range(10_000):
            n += 1
            term *= x / n
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    tiny = 1e-300
    b = x + 1 - a
    c = 1 / tiny
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return math.exp(log_prefix) * h


def chi2_sf(statistic: float, df: int) -> float:
    """P(chi2_df >= statistic)."""
    return _upper_gamma_regularized(df / 2, statistic / 2)


def pearson(observed, expected) -> float:
    observed = np.asarray(observed, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert np.isclose(observed.sum(), expected.sum())
    assert expected.min() >= 5, "chi-square needs expected counts >= 5"
    return float(((observed - expected) ** 2 / expected).sum())


def multinomial_p(observed, probabilities) -> float:
    """Chi-square goodness-of-fit p-value of counts against cell probabilities."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    assert np.isclose(probabilities.sum(), 1.0)
    n = float(np.sum(observed))
    return chi2_sf(pearson(observed, n * probabilities), len(probabilities) - 1)


def inclusion_statistic(counts, trials: int, d: int, k: int) -> float:
    """Pearson statistic of inclusion counts of d items, k chosen uniformly per trial.

    The inclusion indicators have variance p(1-p) (p = k/d) and covariance
    -p(1-p)/(d-1), i.e. covariance p(1-p) d/(d-1) (I - 11'/d); the Pearson sum with
    E = trials*p is then (1-p) d/(d-1) times a chi-square with d-1 degrees of freedom,
    which this corrects for (the factor is 1 for k = 1, the multinomial case).
    """
    p = k / d
    raw = pearson(counts, np.full(d, trials * p))
    return raw * (d - 1) / ((1 - p) * d)


def test_chi2_sf_matches_tables():
    assert chi2_sf(3.841458820694124, 1) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(16.918977604620448, 9) == pytest.approx(0.05, rel=1e-6)
    assert chi2_sf(27.877164871256568, 9) == pytest.approx(0.001, rel=1e-5)
    assert chi2_sf(60.48088639423856, 44) == pytest.approx(0.05, rel=1e-5)
    assert chi2_sf(2.0, 2) == pytest.approx(math.exp(-1), rel=1e-12)
    for x in (0.5, 3.0, 20.0):  # odd df: closed form with erfc
        closed = math.erfc(math.sqrt(x / 2)) + math.sqrt(2 * x / math.pi) * math.exp(-x / 2) * (
            1 + x / 3
        )
        assert chi2_sf(x, 5) == pytest.approx(closed, rel=1e-9)
    assert chi2_sf(1000.0, 3) < 1e-100


def test_statistics_can_reject():
    """The tests below are able to fail: a biased sample is rejected."""
    assert multinomial_p([1100, 900], [0.5, 0.5]) < P_MIN
    assert multinomial_p([1010, 990], [0.5, 0.5]) > P_MIN
    biased = np.array([4200] * 5 + [3800] * 5)  # 10 items, k=2, 20000 trials
    assert chi2_sf(inclusion_statistic(biased, 20_000, 10, 2), 9) < P_MIN


# --------------------------------------------------------------------------- kernel setup


def hub_adjacency(weights, weighted: bool):
    """One source node b"hub" with an edge to b"n{i}" of weight weights[i] per i."""
    d = len(weights)
    targets = [f"n{i}".encode() for i in range(d)]
    hub = ids.fingerprint([b"hub"])[0]
    target_fps = ids.fingerprint(targets)
    edges = EdgeBatch(
        np.full(d, hub, dtype=np.uint64),
        target_fps,
        {"weight": np.asarray(weights, dtype=np.float32)},
    )
    adjacency = build_adjacency(edges, "weight" if weighted else None)
    index = {int(fp): i for i, fp in enumerate(target_fps)}
    return adjacency, hub, index


def sample_keys(n: int, prefix: str = "sample") -> np.ndarray:
    """Fingerprints of distinct sample ids, as the pipeline keys samples."""
    return ids.fingerprint([f"{prefix}{i}".encode() for i in range(n)])


def chosen_sets(
    weights, k: int, strategy: str, keys: np.ndarray, seed: int = 0, op: str = "op"
) -> list[tuple[int, ...]]:
    """The sorted neighbour indices chosen for each sample key."""
    adjacency, hub, index = hub_adjacency(weights, strategy != RANDOM_UNIFORM)
    frontier = SampleNodes(keys, np.full(len(keys), hub, dtype=np.uint64))
    edges = sample_frontier(
        adjacency,
        frontier,
        sample_size=k,
        strategy=strategy,
        op_key=ids.fingerprint_one(op),
        randomness=Randomness(seed),
    )
    assert np.all(edges.src == hub)
    by_sample = collections.defaultdict(list)
    for sample, dst in zip(edges.sample.tolist(), edges.dst.tolist(), strict=True):
        by_sample[sample].append(index[dst])
    out = []
    for key in keys.tolist():
        chosen = by_sample.get(key, [])
        assert len(chosen) == len(set(chosen)), "sampled with replacement"
        out.append(tuple(sorted(chosen)))
    return out


def check_uniform(chosen: list[tuple[int, ...]], d: int, k: int) -> None:
    trials = len(chosen)
    assert all(len(c) == k for c in chosen)
    inclusion = np.bincount([i for c in chosen for i in c], minlength=d)
    p_inclusion = chi2_sf(inclusion_statistic(inclusion, trials, d, k), d - 1)
    assert p_inclusion > P_MIN, (inclusion / trials, p_inclusion)
    subsets = list(itertools.combinations(range(d), k))
    counts = collections.Counter(chosen)
    observed = [counts[s] for s in subsets]
    assert sum(observed) == trials
    p_subsets = multinomial_p(observed, np.full(len(subsets), 1 / len(subsets)))
    assert p_subsets > P_MIN, p_subsets


# --------------------------------------------------------------------------- RANDOM_UNIFORM


def test_uniform_two_of_ten_over_sample_keys():
    """k=2 of degree 10: inclusion 0.2 for every neighbour, each of the 45 pairs 1/45."""
    trials = 20_000
    chosen = chosen_sets(np.ones(10), 2, RANDOM_UNIFORM, sample_keys(trials))
    inclusion = np.bincount([i for c in chosen for i in c], minlength=10) / trials
    np.testing.assert_allclose(inclusion, 0.2, atol=0.015)
    check_uniform(chosen, 10, 2)


@pytest.mark.parametrize("d, k", [(7, 1), (6, 3), (10, 9), (5, 4)])
def test_uniform_k_subsets_are_equally_likely(d, k):
    chosen = chosen_sets(np.ones(d), k, RANDOM_UNIFORM, sample_keys(12_000, f"s{d}-{k}-"))
    check_uniform(chosen, d, k)


def test_uniform_with_consecutive_integer_sample_keys():
    """Low-entropy keys (0, 1, 2, ...) must still give independent draws."""
    keys = np.arange(20_000, dtype=np.uint64)
    check_uniform(chosen_sets(np.ones(10), 2, RANDOM_UNIFORM, keys), 10, 2)


def test_uniform_over_seeds_for_one_sample():
    """The same sample under --seed 0..N-1: inclusion 0.2 each, pairs uniform."""
    key = sample_keys(1)
    chosen = []
    for seed in range(2500):
        chosen.extend(chosen_sets(np.ones(10), 2, RANDOM_UNIFORM, key, seed=seed))
    check_uniform(chosen, 10, 2)


def test_uniform_two_ops_draw_independently():
    """Two ops on one (sample, node): their choices are independent (pairs of pairs)."""
    keys = sample_keys(20_000, "ops")
    first = chosen_sets(np.ones(4), 1, RANDOM_UNIFORM, keys, op="op-a")
    second = chosen_sets(np.ones(4), 1, RANDOM_UNIFORM, keys, op="op-b")
    joint = collections.Counter(zip(first, second, strict=True))
    cells = list(itertools.product([(i,) for i in range(4)], repeat=2))
    assert multinomial_p([joint[c] for c in cells], np.full(16, 1 / 16)) > P_MIN


# --------------------------------------------------------------------------- RANDOM_WEIGHTED


def test_weighted_k1_is_proportional_to_weight():
    weights = [1.0, 2.0, 3.0, 4.0, 0.0, 10.0, 0.5, -1.0]
    trials = 40_000
    chosen = chosen_sets(weights, 1, RANDOM_WEIGHTED, sample_keys(trials, "w"))
    assert all(len(c) == 1 for c in chosen)
    counts = np.bincount([c[0] for c in chosen], minlength=len(weights))
    assert counts[4] == 0 and counts[7] == 0, "weight <= 0 was sampled"
    positive = [i for i, w in enumerate(weights) if w > 0]
    w = np.array([weights[i] for i in positive])
    p = multinomial_p(counts[positive], w / w.sum())
    assert p > P_MIN, (counts, p)


def test_weighted_k2_pairs_follow_successive_sampling():
    weights = [1.0, 2.0, 3.0, 4.0, 0.0]
    trials = 30_000
    chosen = chosen_sets(weights, 2, RANDOM_WEIGHTED, sample_keys(trials, "w2"))
    assert all(len(c) == 2 for c in chosen)
    assert not any(4 in c for c in chosen), "weight 0 was sampled"
    total = sum(weights)
    pairs = list(itertools.combinations(range(4), 2))
    probabilities = [
        weights[i] / total * weights[j] / (total - weights[i])
        + weights[j] / total * weights[i] / (total - weights[j])
        for i, j in pairs
    ]
    enumerated = successive_sampling_probabilities(weights[:4], 2)
    assert probabilities == pytest.approx([enumerated[pair] for pair in pairs])
    counts = collections.Counter(chosen)
    p = multinomial_p([counts[pair] for pair in pairs], probabilities)
    assert p > P_MIN, (counts, p)
    inclusion = np.bincount([i for c in chosen for i in c], minlength=5)
    assert inclusion[0] < inclusion[1] < inclusion[2] < inclusion[3], inclusion


def successive_sampling_probabilities(weights, k: int) -> dict[tuple[int, ...], float]:
    """P(subset) when k items are drawn one by one, each with probability w / (remaining W)."""
    out = collections.Counter()
    for order in itertools.permutations(range(len(weights)), k):
        p, remaining = 1.0, float(sum(weights))
        for i in order:
            p *= weights[i] / remaining
            remaining -= weights[i]
        out[tuple(sorted(order))] += p
    return out


def test_weighted_k3_subsets_and_heavier_edges_included_more_often():
    weights = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 8.0]
    trials = 20_000
    chosen = chosen_sets(weights, 3, RANDOM_WEIGHTED, sample_keys(trials, "w3"))
    assert all(len(c) == 3 for c in chosen)
    inclusion = np.bincount([i for c in chosen for i in c], minlength=len(weights))
    assert np.all(np.diff(inclusion) > 0), inclusion
    probabilities = successive_sampling_probabilities(weights, 3)
    subsets = sorted(probabilities)
    counts = collections.Counter(chosen)
    p = multinomial_p([counts[s] for s in subsets], [probabilities[s] for s in subsets])
    assert p > P_MIN, p


# --------------------------------------------------------------------------- in memory


GRAPH_SCHEMA = """
node_sets { key: "n" value { metadata { filename: "nodes.csv" } } }
edge_sets {
  key: "e"
  value {
    source: "n"
    target: "n"
    features { key: "weight" value { dtype: DT_FLOAT } }
    metadata { filename: "edges.csv" }
  }
}
"""
SPEC = """
seed_op { op_name: "seed" node_set_name: "n" }
sampling_ops {
  op_name: "hop" input_op_names: "seed" edge_set_name: "e" sample_size: %d strategy: %s
}
"""
HUB_WEIGHTS = [1.0, 2.0, 3.0, 4.0, 0.0, 5.0, 1.0, 2.0, 3.0, 4.0]


@pytest.fixture(scope="module")
def hub_graph(tmp_path_factory):
    directory = tmp_path_factory.mktemp("hub")
    names = [b"h"] + [f"n{i}".encode() for i in range(10)]
    write_table(
        str(directory / "nodes.csv"), pa.table({"#id": pa.array(names, pa.binary())}), "csv", {}
    )
    edges = pa.table(
        {
            "#source": pa.array([b"h"] * 10, pa.binary()),
            "#target": pa.array(names[1:], pa.binary()),
            "weight": pa.array(HUB_WEIGHTS, pa.float32()),
        }
    )
    write_table(
        str(directory / "edges.csv"), edges, "csv", {"weight": FeatureSpec("weight", "float", ())}
    )
    with open(directory / "graph_schema.pbtxt", "w") as f:
        f.write(GRAPH_SCHEMA)
    return directory


def in_memory_choices(directory, k: int, strategy: str, repeats: int, seeds) -> list[tuple]:
    """Neighbour indices chosen from b"h" for each (seed, repeat) through the whole sampler."""
    spec_path = os.path.join(directory, f"spec-{k}-{strategy}.pbtxt")
    with open(spec_path, "w") as f:
        f.write(SPEC % (k, strategy))
    graph = load_graph(str(directory / "graph_schema.pbtxt"))
    plan = make_plan(graph, load_sampling_spec(spec_path))
    mem = in_memory.load_dense_graph(graph, plan)
    seed_nodes = make_seeds(np.array([b"h"] * repeats, dtype=object))
    out = []
    for seed in seeds:
        sample_ids = set()
        for sg in in_memory.sample_in_memory(
            graph, plan, mem, seed_nodes, Randomness(seed), collections.Counter()
        ):
            sample_ids.add(sg.sample_id)
            node_ids = sg.node_sets["n"].ids
            assert node_ids[0] == b"h"
            edges = sg.edge_sets["e"]
            assert np.all(edges.source == 0)
            chosen = sorted(int(node_ids[t][1:]) for t in edges.target.tolist())
            assert len(chosen) == len(set(chosen))
            out.append(tuple(chosen))
        assert len(sample_ids) == repeats
    return out


def test_in_memory_uniform_over_repeated_seeds(hub_graph):
    """Repeats h, h:1, h:2, ... of one seed are independent samples."""
    check_uniform(in_memory_choices(hub_graph, 2, "RANDOM_UNIFORM", 3000, [0]), 10, 2)


def test_in_memory_uniform_over_seeds(hub_graph):
    check_uniform(in_memory_choices(hub_graph, 2, "RANDOM_UNIFORM", 10, range(300)), 10, 2)


def test_in_memory_weighted_k1(hub_graph):
    chosen = in_memory_choices(hub_graph, 1, "RANDOM_WEIGHTED", 4000, [7])
    assert all(len(c) == 1 for c in chosen)
    counts = np.bincount([c[0] for c in chosen], minlength=10)
    assert counts[4] == 0, "weight 0 was sampled"
    positive = [i for i, w in enumerate(HUB_WEIGHTS) if w > 0]
    w = np.array([HUB_WEIGHTS[i] for i in positive])
    assert multinomial_p(counts[positive], w / w.sum()) > P_MIN, counts
