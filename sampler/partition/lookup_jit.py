"""Compiled lookup of fingerprints in a sorted fingerprint table (sampler/jit.py).

np.searchsorted does a binary search per query: about log2(n) steps, and past the CPU
caches each is a miss, so its cost per edge end grows with the node table (21 steps at
2.6M nodes). Fingerprints are hashes, spread evenly over uint64, so a table of where each
range of their top bits starts (one entry per node or so) leads a query to its place in
one or two steps. `positions` gives exactly what np.searchsorted(table, queries) gives
(side "left"), for any table, even or not (an uneven bucket costs a binary search).
"""

from __future__ import annotations

import numpy as np

from sampler.jit import njit


@njit
def positions(table, queries, bits):
    """np.searchsorted(table, queries) for a sorted uint64 table, through 2**bits buckets
    of the top `bits` bits (1 <= bits <= 32; about log2(len(table)))."""
    n = len(table)
    shift = np.uint64(64 - bits)
    buckets = 1 << bits
    starts = np.empty(buckets + 1, np.int64)
    j = 0
    for b in range(buckets):
        while j < n and np.int64(table[j] >> shift) < b:
            j += 1
        starts[b] = j
    starts[buckets] = n
    out = np.empty(len(queries), np.int64)
    for i in range(len(queries)):
        q = queries[i]
        b = np.int64(q >> shift)
        lo, hi = starts[b], starts[b + 1]
        while hi - lo > 4:  # an uneven bucket: halve it
            mid = (lo + hi) // 2
            if table[mid] < q:
                lo = mid + 1
            else:
                hi = mid
        while lo < hi and table[lo] < q:
            lo += 1
        out[i] = lo
    return out


def warm() -> None:
    """Compiles the kernel for the argument types the runs pass (sampler/jit_loader.py)."""
    positions(np.zeros(2, np.uint64), np.zeros(1, np.uint64), 1)
