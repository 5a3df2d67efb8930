"""64-bit fingerprints of string ids and counter-based randomness.

Everything random in the sampler is a pure function of these hashes, so a
sample depends only on (--seed, sample id, op, node), never on RNG state,
worker count or arrival order.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from sampler.jit_loader import kernels

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_SHARD_SALT = np.uint64(0x5851F42D4C957F2D)


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: a bijection on uint64 with good avalanche."""
    with np.errstate(over="ignore"):
        z = np.asarray(x, dtype=np.uint64) + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
        return z ^ (z >> np.uint64(31))


def combine(*parts) -> np.ndarray:
    """Hashes a tuple of uint64 arrays (or scalars), broadcasting, order-sensitive."""
    h = mix(np.asarray(parts[0], dtype=np.uint64))
    for part in parts[1:]:
        h = mix(h ^ np.asarray(part, dtype=np.uint64))
    return h


def uniform(h: np.ndarray) -> np.ndarray:
    """Maps uint64 hashes to floats in [0, 1) with 53 bits."""
    return (np.asarray(h, dtype=np.uint64) >> np.uint64(11)).astype(np.float64) * (2.0**-53)


def draws(stream_keys: np.ndarray, index) -> np.ndarray:
    """The `index`-th uniform draw of each counter-based stream."""
    with np.errstate(over="ignore"):
        idx = (np.asarray(index, dtype=np.uint64) + np.uint64(1)) * _GOLDEN
    return uniform(mix(np.asarray(stream_keys, dtype=np.uint64) ^ idx))


def _as_binary(ids) -> pa.Array:
    if isinstance(ids, pa.ChunkedArray):  # one chunk as it is: combine_chunks would copy it
        ids = ids.chunk(0) if ids.num_chunks == 1 else ids.combine_chunks()
    if not isinstance(ids, pa.Array):
        ids = pa.array(list(ids), type=pa.binary())
    if ids.type != pa.binary():
        ids = ids.cast(pa.binary())
    return ids


def fingerprint(ids) -> np.ndarray:
    """uint64 fingerprints (FNV-1a, then splitmix64) of binary/string ids."""
    arr = _as_binary(ids)
    n = len(arr)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if arr.null_count:
        raise ValueError("ids must not be null")
    offsets = np.frombuffer(arr.buffers()[1], dtype=np.int32)[arr.offset : arr.offset + n + 1]
    data_buf = arr.buffers()[2]
    data = np.frombuffer(data_buf if data_buf is not None else b"\0", dtype=np.uint8)
    for view in (offsets, data):  # read-only, whatever Arrow's buffer: one compiled signature
        view.flags.writeable = False
    return kernels("sampler.ids_jit").fingerprints(data, offsets)


def fingerprint_one(value: bytes | str) -> np.uint64:
    """The fingerprint of a single id or name (plain Python: names are short, and a module
    that names an op at import needs no compiled kernel)."""
    if isinstance(value, str):
        value = value.encode()
    h = int(_FNV_OFFSET)
    for byte in value:
        h = ((h ^ byte) * int(_FNV_PRIME)) & 0xFFFFFFFFFFFFFFFF
    return combine(np.uint64(h), np.uint64(len(value)))[()]


def row_fingerprint(columns: dict[str, np.ndarray], n: int) -> np.ndarray:
    """Content hash of rows across feature columns (numeric or object-of-bytes)."""
    h = np.zeros(n, dtype=np.uint64)
    if n == 0:  # no rows (a header-only table): nothing to hash, and reshape(0, -1) fails
        return h
    for name in sorted(columns):
        col = columns[name]
        if col.dtype == object:
            flat = col.reshape(n, -1)
            for j in range(flat.shape[1]):
                h = combine(h, fingerprint(pa.array(flat[:, j].tolist(), type=pa.binary())))
        else:
            raw = np.ascontiguousarray(col).reshape(n, -1).view(np.uint8)
            words = np.zeros((n, (raw.shape[1] + 7) // 8 * 8), dtype=np.uint8)
            words[:, : raw.shape[1]] = raw
            h = kernels("sampler.ids_jit").combine_words(h, words.view(np.uint64))
    return h


def shard_of(fp: np.ndarray, num_shards: int) -> np.ndarray:
    """The shard (0..num_shards-1) that owns each node fingerprint."""
    return (mix(np.asarray(fp, dtype=np.uint64) ^ _SHARD_SALT) % np.uint64(num_shards)).astype(
        np.int64
    )
