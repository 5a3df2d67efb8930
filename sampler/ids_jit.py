"""Compiled kernels of `sampler.ids`: the fingerprint of string ids (FNV-1a over each id's
bytes, then splitmix64, one pass), the hash mix and draws, and lookups in sorted fingerprints.

The fingerprint's time is linear in the ids' bytes (numpy would step over byte positions, so
one long id would cost every row of its batch that many steps: tests/kernel_oracles.py)."""

from __future__ import annotations

import numpy as np

from sampler.jit import njit, prefetch

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


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


@njit
def fingerprints(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """`sampler.ids.fingerprint` of an Arrow binary array's buffers (offsets, data): FNV-1a
    of each id's bytes, then `combine(h, length)`, in one pass."""
    n = len(offsets) - 1
    out = np.empty(n, np.uint64)
    for i in range(n):
        h = _FNV_OFFSET
        lo, hi = offsets[i], offsets[i + 1]
        for j in range(lo, hi):
            h = (h ^ np.uint64(data[j])) * _FNV_PRIME
        out[i] = mix(mix(h) ^ np.uint64(hi - lo))
    return out


@njit
def directory_bits(n):
    """Bits of a directory by top bits for n hash-like values: 4 to 8 values per entry,
    between 1 and 22 bits (a directory of 32 MB at most)."""
    bits = 1
    while bits < 22 and (1 << (bits + 3)) <= n:
        bits += 1
    return bits


_AHEAD = 16  # find_sorted's prefetch distance, in queries


@njit
def find_sorted(table: np.ndarray, query: np.ndarray):
    """(np.minimum(np.searchsorted(table, query), len(table) - 1), found) for a sorted uint64
    `table` (len >= 1) of hash-like values: a directory of the top `bits` bits narrows each
    search to the few entries that share them (numpy's binary search over the whole table
    misses the caches on every step). Each step asks for the directory entry of a query
    `_AHEAD` steps on and for the table entries of one half as far (`prefetch`): the random
    reads of many queries overlap."""
    pos = np.empty(len(query), np.int64)
    found = np.empty(len(query), np.bool_)
    find_sorted_into(table, query, pos, found)
    return pos, found


@njit
def find_sorted_into(table: np.ndarray, query: np.ndarray, pos: np.ndarray, found: np.ndarray):
    """`find_sorted` into the caller's arrays (numpy's memory: `NodeTable.lookup`)."""
    n = len(table)
    bits = directory_bits(n)
    shift = np.uint64(64 - bits)
    buckets = 1 << bits
    first = np.empty(buckets + 1, np.int64)  # first entry whose top bits are >= b
    b = 0
    for i in range(n):
        top = np.int64(table[i] >> shift)
        while b <= top:
            first[b] = i
            b += 1
    while b <= buckets:
        first[b] = n
        b += 1
    m = len(query)
    for k in range(m):
        if k + _AHEAD < m:  # the memory of later steps, asked for now: two levels of it
            prefetch(first, np.int64(query[k + _AHEAD] >> shift))
            prefetch(table, first[np.int64(query[k + _AHEAD // 2] >> shift)])
        q = query[k]
        top = np.int64(q >> shift)
        lo, hi = first[top], first[top + 1]
        while lo < hi:  # the first entry >= q in [lo, hi), else hi
            mid = (lo + hi) >> 1
            if table[mid] < q:
                lo = mid + 1
            else:
                hi = mid
        p = min(lo, n - 1)
        pos[k] = p
        found[k] = lo < n and table[lo] == q


@njit
def combine_words(h: np.ndarray, words: np.ndarray) -> np.ndarray:
    """`h = ids.combine(h, words[:, j])` for each column j in turn, row by row (numpy would
    make six passes over all the rows per column)."""
    out = np.empty(len(h), np.uint64)
    for i in range(len(h)):
        x = h[i]
        for j in range(words.shape[1]):
            x = mix(mix(x) ^ words[i, j])
        out[i] = x
    return out


def warm() -> None:
    """Compiles each kernel for the argument types the runs pass (sampler/jit_loader.py):
    an Arrow array's read-only buffers, and writable uint64 arrays."""
    data = np.frombuffer(b"ab", np.uint8)
    fingerprints(data, np.frombuffer(np.array([0, 1, 2], np.int32).tobytes(), np.int32))
    fps = np.array([1, 2, 3], np.uint64)
    draw(mix(fps[0]), np.int64(0))
    frozen = fps.view()
    frozen.flags.writeable = False  # a node table's lookups pass both read-only
    find_sorted(frozen, frozen)
    find_sorted_into(frozen, frozen, np.empty(3, np.int64), np.empty(3, np.bool_))
    combine_words(fps, np.zeros((3, 2), np.uint64))
