"""Compiled kernel of `sampler.ids.fingerprint`: FNV-1a over each id's bytes, one pass.

Time is linear in the ids' bytes (the numpy version stepped over byte positions, so one
long id cost every row of its batch that many steps)."""

from __future__ import annotations

import numpy as np

from sampler.jit import njit

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@njit
def fnv1a(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """FNV-1a (64-bit) of data[offsets[i]:offsets[i + 1]] for each i: uint64."""
    n = len(offsets) - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        for j in range(offsets[i], offsets[i + 1]):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        out[i] = h
    return out


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


@njit
def mix(z):
    """`sampler.ids.mix` of one uint64 (splitmix64 finalizer), the same bits."""
    z = z + _GOLDEN
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@njit
def draw(stream, index):
    """`sampler.ids.draws` of one stream and draw index: the same float64."""
    h = mix(stream ^ ((np.uint64(index) + np.uint64(1)) * _GOLDEN))
    return np.float64(h >> np.uint64(11)) * (2.0**-53)
