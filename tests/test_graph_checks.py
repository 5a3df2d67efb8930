"""Self-loop and parallel-edge counts against a brute-force count, sorted input or not."""

from __future__ import annotations

import numpy as np
import pytest

from sampler.graph_checks import edge_shape_counts


@pytest.mark.parametrize("presorted", [False, True])
def test_counts_match_a_brute_force_count(presorted):
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 50))
        src, dst = rng.integers(0, 6, n), rng.integers(0, 6, n)
        if presorted:  # the one-pass path (CSR adjacency is already in this order)
            order = np.lexsort((dst, src))
            src, dst = src[order], dst[order]
        pairs = list(zip(src.tolist(), dst.tolist(), strict=True))
        loops = sum(s == d for s, d in pairs)
        parallel = len(pairs) - len(set(pairs))
        assert edge_shape_counts(src, dst, same_set=True) == (loops, parallel)
        assert edge_shape_counts(src, dst, same_set=False) == (0, parallel)


def test_hand_made_edges():
    # 0->1 twice (1 parallel), 2->2 (a loop), 1->0, then 0->1 again out of order.
    src, dst = np.array([0, 0, 2, 1, 0]), np.array([1, 1, 2, 0, 1])
    assert edge_shape_counts(src, dst, same_set=True) == (1, 2)
    assert edge_shape_counts(np.zeros(0, int), np.zeros(0, int), same_set=True) == (0, 0)
