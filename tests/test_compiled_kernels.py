"""The compiled kernels (sampler/jit.py, issue 33) against the numpy kernels they replace.

The numpy kernels stay in the tree (`sampling.choose` serves the `sharded` placement), so
every compiled kernel is checked here against its numpy twin on random inputs built to hit
the corners: degree at, below and above k, k = 0 and 1, hubs, tied and NaN/inf/negative
weights. tests/test_kernel_digests.py checks whole records against digests recorded before.
"""

from __future__ import annotations

import numpy as np
import pytest

from sampler import ids
from sampler.sample import choose_jit, sampling
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K


def frontier(rng, rows: int, max_degree: int, weight_kind: str):
    degree = rng.integers(1, max_degree + 1, rows)
    degree[rng.random(rows) < 0.05] = max_degree * 20  # hubs
    start = np.cumsum(degree) - degree + rng.integers(0, 3)
    total = int(start[-1] + degree[-1]) + 3
    if weight_kind == "ties":
        weights = rng.integers(-1, 4, total).astype(np.float32)
    elif weight_kind == "odd":
        weights = rng.choice(np.array([np.nan, np.inf, -np.inf, 0, -1, 0.5, 2], np.float32), total)
    else:
        weights = rng.random(total).astype(np.float64)
    stream = ids.mix(rng.integers(0, 2**63, rows).astype(np.uint64))
    return start.astype(np.int64), degree.astype(np.int64), stream, weights


@pytest.mark.parametrize("strategy", [RANDOM_UNIFORM, TOP_K, RANDOM_WEIGHTED])
@pytest.mark.parametrize("weight_kind", ["plain", "ties", "odd"])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 40])
def test_choose_is_the_numpy_choose(strategy, weight_kind, k):
    rng = np.random.default_rng([k, len(strategy), len(weight_kind)])
    start, degree, stream, weights = frontier(rng, 300, 12, weight_kind)
    kwargs = {"sample_size": k, "strategy": strategy, "weights": weights}
    want = sampling.choose(start, degree, stream, **kwargs)
    got = choose_jit.choose(start, degree, stream, **kwargs)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_draw_is_ids_draws():
    from sampler.ids_jit import draw

    rng = np.random.default_rng(0)
    stream = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64)
    index = rng.integers(0, 2**40, 50)
    want = ids.draws(stream, index)
    got = np.array([draw(s, i) for s, i in zip(stream, index, strict=True)])
    np.testing.assert_array_equal(got, want)
