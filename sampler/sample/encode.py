"""What the sampled records hold: the tf.Example keys and features of a schema's sets, the
schema that describes the records, and their decoding (the encoding of a chunk of
subgraphs: sampler/sample/encode_chunk.py).

The record layout is exactly the one `tfgnn.parse_example` reads for the schema
returned by `output_schema` (see tensorflow_gnn/graph/graph_tensor_io.py):

  context/seed_id, context/sample_id       bytes_list, one value each
  nodes/<set>.#size                        int64_list, one value: the node count
  nodes/<set>.#id                          bytes_list, the node ids in output order
  nodes/<set>.<feature>                    values of all nodes, flattened row-major
  edges/<set>.#size                        int64_list, one value: the edge count
  edges/<set>.#source, edges/<set>.#target int64_list, indices into the node sets
  edges/<set>.<feature>                    values of all edges, flattened row-major

Every node set and edge set of the schema is written, with all its features,
even when the subgraph has none of its items (size 0, empty value lists).
A Subgraph carries no other context features, so `encode_specs` rejects a
schema with context features other than seed_id and sample_id (the parser
would require them in every record).

`encode_specs` does the schema work once; the encoder then only checks array shapes and
copies values.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from sampler.errors import UserError
from sampler.features import FeatureSpec, feature_spec, feature_specs
from sampler.protos import example_pb2, tensor_pb2
from sampler.sample.subgraph import EdgeSetRows, NodeSetRows, Subgraph

if TYPE_CHECKING:
    from sampler.protos.graph_schema_pb2 import GraphSchema

ID = "#id"
SIZE = "#size"
SOURCE = "#source"
TARGET = "#target"
SEED_ID = "seed_id"
SAMPLE_ID = "sample_id"
SEED_TIME = "seed_time"  # a temporal spec's (sampler.sample.temporal.output_schema)
SEED_ID_KEY = f"context/{SEED_ID}"
SAMPLE_ID_KEY = f"context/{SAMPLE_ID}"
_RESERVED = frozenset({SIZE, SOURCE, TARGET})


# --------------------------------------------------------------------------- schema


def output_schema(schema: GraphSchema) -> GraphSchema:
    """A copy of `schema` describing the sampled records.

    Adds DT_STRING scalar context features `seed_id` and `sample_id` and a
    DT_STRING `#id` node feature to every node set, each unless already
    declared, and clears `metadata.filename` and `metadata.cardinality` of the
    context and of every set (they describe the full input graph). Other
    metadata (`extra`, `bigquery`) is kept, as TF-GNN's sampler does.
    """
    out = type(schema)()
    out.CopyFrom(schema)
    for name in (SEED_ID, SAMPLE_ID):
        if name not in out.context.features:
            out.context.features[name].dtype = tensor_pb2.DT_STRING
    for node_set in out.node_sets.values():
        if ID not in node_set.features:
            node_set.features[ID].dtype = tensor_pb2.DT_STRING
    for set_ in [out.context, *out.node_sets.values(), *out.edge_sets.values()]:
        if set_.HasField("metadata"):
            set_.metadata.ClearField("filename")
            set_.metadata.ClearField("cardinality")
    return out


# --------------------------------------------------------------------------- specs


@dataclasses.dataclass(frozen=True)
class FeatureKey:
    """One feature of one set and its tf.Example key."""

    spec: FeatureSpec
    key: str  # e.g. "nodes/paper.feat"

    @property
    def name(self) -> str:
        return self.spec.name


@dataclasses.dataclass(frozen=True)
class NodeSetEncoding:
    name: str
    size_key: str
    id_key: str
    features: tuple[FeatureKey, ...]  # sorted by name, without "#id"


@dataclasses.dataclass(frozen=True)
class EdgeSetEncoding:
    name: str
    source: str  # node set names
    target: str
    size_key: str
    source_key: str
    target_key: str
    features: tuple[FeatureKey, ...]  # sorted by name


@dataclasses.dataclass(frozen=True)
class EncodeSpecs:
    """Everything the encoder needs, computed once from the input schema."""

    node_sets: dict[str, NodeSetEncoding]  # sorted by name
    edge_sets: dict[str, EdgeSetEncoding]  # sorted by name
    seed_time: FeatureKey | None = None  # context/seed_time of a temporal spec's records


def _check_string_scalar(feature, where: str, name: str) -> None:
    spec = feature_spec(name, feature, where)
    if spec.kind != "bytes" or spec.width != 1:
        raise UserError(
            f"{where}: feature '{name}' must be a DT_STRING scalar, the sampler writes ids into it"
        )


def _feature_keys(feature_map, where: str, prefix: str) -> tuple[FeatureKey, ...]:
    keys = []
    for name, spec in feature_specs(feature_map, where).items():
        if name in _RESERVED:
            raise UserError(f"{where}: feature name '{name}' is reserved by TF-GNN")
        if name != ID:
            keys.append(FeatureKey(spec, f"{prefix}{name}"))
    return tuple(keys)


def encode_specs(schema: GraphSchema) -> EncodeSpecs:
    """Feature specs and tf.Example keys of every set (input or output schema).

    Raises UserError for a schema whose records cannot be written: context
    features other than seed_id/sample_id, seed_id/sample_id/#id that are not
    DT_STRING scalars, reserved feature names, ragged or non-tf.Example dtypes,
    edge sets whose source/target is not a node set.
    """
    context = schema.context.features
    for name in (SEED_ID, SAMPLE_ID):
        if name in context:
            _check_string_scalar(context[name], "context", name)
    seed_time = None
    if SEED_TIME in context:
        spec = feature_spec(SEED_TIME, context[SEED_TIME], "context")
        if spec.kind == "bytes" or spec.shape:
            raise UserError(f"context: feature '{SEED_TIME}' must be an INT64 or FLOAT scalar")
        seed_time = FeatureKey(spec, f"context/{SEED_TIME}")
    extra = sorted(set(context) - {SEED_ID, SAMPLE_ID, SEED_TIME})
    if extra:
        # tfgnn.parse_example requires every context feature; a Subgraph carries none.
        raise UserError(
            f"context: feature '{extra[0]}' cannot be written into sampled subgraphs"
            " (only seed_id and sample_id are); remove it from the schema"
        )
    node_sets = {}
    for name in sorted(schema.node_sets):
        node_set = schema.node_sets[name]
        where = f"node set '{name}'"
        if ID in node_set.features:
            _check_string_scalar(node_set.features[ID], where, ID)
        prefix = f"nodes/{name}."
        node_sets[name] = NodeSetEncoding(
            name,
            f"{prefix}{SIZE}",
            f"{prefix}{ID}",
            _feature_keys(node_set.features, where, prefix),
        )
    edge_sets = {}
    for name in sorted(schema.edge_sets):
        edge_set = schema.edge_sets[name]
        where = f"edge set '{name}'"
        for end in ("source", "target"):
            if getattr(edge_set, end) not in node_sets:
                raise UserError(f"{where}: {end} '{getattr(edge_set, end)}' is not a node set")
        prefix = f"edges/{name}."
        edge_sets[name] = EdgeSetEncoding(
            name,
            edge_set.source,
            edge_set.target,
            f"{prefix}{SIZE}",
            f"{prefix}{SOURCE}",
            f"{prefix}{TARGET}",
            _feature_keys(edge_set.features, where, prefix),
        )
    return EncodeSpecs(node_sets, edge_sets, seed_time)


# --------------------------------------------------------------------------- decode


def _values(fmap, key: str, kind: str, where: str) -> np.ndarray:
    if key not in fmap:
        raise ValueError(f"{where}: key '{key}' is missing")
    feature = fmap[key]
    if kind == "float":
        return np.array(feature.float_list.value, dtype=np.float32)
    if kind == "int":
        return np.array(feature.int64_list.value, dtype=np.int64)
    out = np.empty(len(feature.bytes_list.value), dtype=object)
    out[:] = list(feature.bytes_list.value)
    return out


def _features(fmap, fks: tuple[FeatureKey, ...], rows: int, where: str) -> dict[str, np.ndarray]:
    out = {}
    for fk in fks:
        values = _values(fmap, fk.key, fk.spec.kind, where)
        if len(values) != rows * fk.spec.width:
            raise ValueError(
                f"{where}: feature '{fk.name}' has {len(values)} values for {rows} rows"
                f" of width {fk.spec.width}"
            )
        out[fk.name] = values.reshape(rows, fk.spec.width) if fk.spec.shape else values
    return out


def _size(fmap, key: str, where: str) -> int:
    values = _values(fmap, key, "int", where)
    if len(values) != 1:
        raise ValueError(f"{where}: '{key}' has {len(values)} values, expected 1")
    return int(values[0])


def _single_bytes(fmap, key: str) -> bytes:
    values = _values(fmap, key, "bytes", "context")
    if len(values) != 1:
        raise ValueError(f"context: '{key}' has {len(values)} values, expected 1")
    return values[0]


def decode_subgraph(data: bytes, specs: EncodeSpecs) -> Subgraph:
    """A record as a Subgraph, with the protobuf library only (no TF ops).

    Every node set and edge set of the schema is returned, empty ones included;
    arrays have the canonical dtypes of sampler.features. Keys the specs do not
    know (e.g. user context features) are ignored.
    """
    example = example_pb2.Example.FromString(data)
    fmap = example.features.feature
    node_sets = {}
    for name, enc in specs.node_sets.items():
        where = f"node set '{name}'"
        n = _size(fmap, enc.size_key, where)
        ids = _values(fmap, enc.id_key, "bytes", where)
        if len(ids) != n:
            raise ValueError(f"{where}: {len(ids)} ids for #size {n}")
        node_sets[name] = NodeSetRows(ids, _features(fmap, enc.features, n, where))
    edge_sets = {}
    for name, enc in specs.edge_sets.items():
        where = f"edge set '{name}'"
        m = _size(fmap, enc.size_key, where)
        source = _values(fmap, enc.source_key, "int", where)
        target = _values(fmap, enc.target_key, "int", where)
        if len(source) != m or len(target) != m:
            raise ValueError(f"{where}: {len(source)} sources, {len(target)} targets, #size {m}")
        edge_sets[name] = EdgeSetRows(source, target, _features(fmap, enc.features, m, where))
    return Subgraph(
        sample_id=_single_bytes(fmap, SAMPLE_ID_KEY),
        seed_id=_single_bytes(fmap, SEED_ID_KEY),
        node_sets=node_sets,
        edge_sets=edge_sets,
    )
