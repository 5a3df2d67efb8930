"""Splitting batches by shard (node fingerprint) or bucket (sample key)."""

from __future__ import annotations

import numpy as np

from sampler import ids


def split_index(keys: np.ndarray, num: int) -> list[tuple[int, np.ndarray]]:
    """[(key, row indices)] for each key in 0..num-1 that has rows, rows in input order."""
    if len(keys) == 0:
        return []
    # numpy sorts 16-bit keys stably by radix (one pass), wider ones by merging: 5x slower
    order = np.argsort(keys.astype(np.int16) if num <= 2**15 else keys, kind="stable")
    sorted_keys = keys[order]
    bounds = np.searchsorted(sorted_keys, np.arange(num + 1))
    return [(k, order[bounds[k] : bounds[k + 1]]) for k in range(num) if bounds[k + 1] > bounds[k]]


def by_shard(node_fps: np.ndarray, num_shards: int) -> list[tuple[int, np.ndarray]]:
    return split_index(ids.shard_of(node_fps, num_shards), num_shards)


def by_bucket(sample_keys: np.ndarray, num_buckets: int) -> list[tuple[int, np.ndarray]]:
    keys = (np.asarray(sample_keys, dtype=np.uint64) % np.uint64(num_buckets)).astype(np.int64)
    return split_index(keys, num_buckets)
