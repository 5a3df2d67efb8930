"""Compiled kernels of `sampler.batches`: the first of each (sample, node) of a batch, in
(sample, node) order, a short sort of each sample's rows where np.lexsort sorted the whole
batch twice (`SampleNodes.unique_index`; tests/test_compiled_kernels.py compares the two)."""

from __future__ import annotations

import numpy as np

from sampler.jit import njit


@njit
def unique_pairs(major, minor, order):
    """The rows of the first of each (major, minor), in (major, minor, row) order: `order`
    sorts `major` stably; each run of one `major` is sorted stably by `minor`."""
    n = len(order)
    out = np.empty(n, np.int64)
    o = 0
    a = 0
    while a < n:
        m = major[order[a]]
        b = a + 1
        while b < n and major[order[b]] == m:
            b += 1
        run = order[a:b]
        if b - a > 1:
            run = run[np.argsort(minor[run], kind="mergesort")]
        for j in range(b - a):
            if j == 0 or minor[run[j]] != minor[run[j - 1]]:
                out[o] = run[j]
                o += 1
        a = b
    return out[:o]


def warm() -> None:
    """Compiles the kernel for the argument types the runs pass (sampler/jit_loader.py):
    writable uint64 arrays, and read-only ones (a batch made over a buffer)."""
    keys = np.array([2, 1, 1], np.uint64)
    order = np.array([1, 2, 0], np.int64)
    unique_pairs(keys, keys, order)
    frozen = keys.view()
    frozen.flags.writeable = False
    unique_pairs(frozen, frozen, order)
