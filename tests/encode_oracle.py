"""The protobuf encoder: a Subgraph as a GraphTensor tf.Example, built with the protobuf
library and serialized deterministically. What the product ran before it encoded by the
chunk (sampler/sample/encode_chunk.py); kept for the tests as the oracle the chunk encoder's
records are compared with, byte for byte (tests/test_encode_chunk.py).
"""

from __future__ import annotations

import numpy as np

from sampler.protos import example_pb2
from sampler.sample.encode import SAMPLE_ID_KEY, SEED_ID_KEY, EncodeSpecs, FeatureKey
from sampler.sample.subgraph import EdgeSetRows, NodeSetRows, Subgraph

# Accepted numpy dtype kinds per value kind; anything else is a ValueError.
_ACCEPTED_KINDS = {"float": "fiub", "int": "iub", "bytes": "O"}


def _varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _packed_floats(values: np.ndarray) -> bytes:
    """A serialized FloatList: field 1, wire type 2, then the raw little-endian float32s."""
    raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
    return b"\x0a" + _varint(len(raw)) + raw


def _put_feature(fmap, fk: FeatureKey, values, rows: int, where: str) -> None:
    """Checks one (rows,) / (rows, width) array and writes it under fk.key."""
    spec = fk.spec
    if values is None:
        raise ValueError(f"{where}: feature '{spec.name}' is missing")
    shape = getattr(values, "shape", None)
    expected = (rows, spec.width) if spec.shape else (rows,)
    if shape != expected:
        raise ValueError(
            f"{where}: feature '{spec.name}' has shape {shape}, expected {expected}"
            f" (schema shape {list(spec.shape)})"
        )
    if values.dtype.kind not in _ACCEPTED_KINDS[spec.kind]:
        raise ValueError(
            f"{where}: feature '{spec.name}' has dtype {values.dtype}, expected {spec.kind} values"
        )
    feature = fmap[fk.key]
    if spec.kind == "float":
        feature.float_list.MergeFromString(_packed_floats(values))
    elif spec.kind == "int":
        if values.dtype != np.int64:
            values = values.astype(np.int64)  # bools would become Python bools
        feature.int64_list.SetInParent()
        feature.int64_list.value.extend(values.ravel().tolist())
    else:
        feature.bytes_list.SetInParent()
        try:
            feature.bytes_list.value.extend(values.ravel().tolist())
        except TypeError as e:
            raise ValueError(f"{where}: feature '{spec.name}' holds a non-bytes value ({e})") from e


def _put_empty(fmap, fk: FeatureKey) -> None:
    feature = fmap[fk.key]
    if fk.spec.kind == "float":
        feature.float_list.SetInParent()
    elif fk.spec.kind == "int":
        feature.int64_list.SetInParent()
    else:
        feature.bytes_list.SetInParent()


def _put_ids(fmap, key: str, ids: list, where: str) -> None:
    ids_list = fmap[key].bytes_list
    ids_list.SetInParent()
    try:
        ids_list.value.extend(ids)
    except TypeError as e:
        raise ValueError(f"{where}: node ids must be bytes ({e})") from e


def _put_indices(fmap, key: str, index: np.ndarray, num_nodes: int, where: str) -> None:
    name = key.rsplit(".", 1)[1]
    if len(index):
        if index.dtype.kind not in "iu":
            raise ValueError(f"{where}: {name} has dtype {index.dtype}, not integer")
        # One reduction: as uint64, negative indices become huge.
        wide = index.view(np.uint64) if index.dtype == np.int64 else index.astype(np.uint64)
        if int(wide.max()) >= num_nodes:
            raise ValueError(
                f"{where}: {name} indices span [{index.min()}, {index.max()}]"
                f" but the node set has {num_nodes} nodes"
            )
    ints = fmap[key].int64_list
    ints.SetInParent()
    ints.value.extend(index.tolist())


def encode_subgraph(subgraph: Subgraph, specs: EncodeSpecs) -> bytes:
    """Serializes `subgraph` as a GraphTensor tf.Example (see the module docstring).

    Raises ValueError, naming the set and feature, for a missing feature, an
    array of the wrong shape or kind, edge indices outside their node set, or a
    node/edge set the schema does not have. Extra features are ignored.
    Output bytes are deterministic (map keys sorted).
    """
    unknown = subgraph.node_sets.keys() - specs.node_sets.keys()
    unknown |= subgraph.edge_sets.keys() - specs.edge_sets.keys()
    if unknown:
        raise ValueError(f"subgraph {subgraph.sample_id!r}: sets {sorted(unknown)} not in schema")
    example = example_pb2.Example()
    fmap = example.features.feature
    try:
        fmap[SEED_ID_KEY].bytes_list.value.append(subgraph.seed_id)
        fmap[SAMPLE_ID_KEY].bytes_list.value.append(subgraph.sample_id)
    except TypeError as e:
        raise ValueError(f"subgraph: seed_id and sample_id must be bytes ({e})") from e

    sizes = {}
    for name, enc in specs.node_sets.items():
        rows: NodeSetRows | None = subgraph.node_sets.get(name)
        if rows is None:
            sizes[name] = 0
            fmap[enc.size_key].int64_list.value.append(0)
            fmap[enc.id_key].bytes_list.SetInParent()
            for fk in enc.features:
                _put_empty(fmap, fk)
            continue
        where = f"node set '{name}'"
        ids = rows.ids
        if getattr(ids, "ndim", 1) != 1:
            raise ValueError(f"{where}: ids must be 1-D, got shape {ids.shape}")
        n = len(ids)
        sizes[name] = n
        fmap[enc.size_key].int64_list.value.append(n)
        _put_ids(fmap, enc.id_key, ids.tolist() if isinstance(ids, np.ndarray) else ids, where)
        features = rows.features
        for fk in enc.features:
            _put_feature(fmap, fk, features.get(fk.spec.name), n, where)

    for name, enc in specs.edge_sets.items():
        edges: EdgeSetRows | None = subgraph.edge_sets.get(name)
        if edges is None:
            fmap[enc.size_key].int64_list.value.append(0)
            fmap[enc.source_key].int64_list.SetInParent()
            fmap[enc.target_key].int64_list.SetInParent()
            for fk in enc.features:
                _put_empty(fmap, fk)
            continue
        where = f"edge set '{name}'"
        source = np.asarray(edges.source)
        target = np.asarray(edges.target)
        if source.ndim != 1 or source.shape != target.shape:
            raise ValueError(
                f"{where}: #source {source.shape} and #target {target.shape} must be 1-D, same length"
            )
        m = len(source)
        fmap[enc.size_key].int64_list.value.append(m)
        _put_indices(fmap, enc.source_key, source, sizes[enc.source], where)
        _put_indices(fmap, enc.target_key, target, sizes[enc.target], where)
        features = edges.features
        for fk in enc.features:
            _put_feature(fmap, fk, features.get(fk.spec.name), m, where)

    return example.SerializeToString(deterministic=True)
