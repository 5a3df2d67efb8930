"""Feature specs: how a GraphSchema feature maps to columns, numpy and tf.Example.

Every feature is carried in one of three tf.Example value kinds. Arrow columns
and numpy arrays use one canonical dtype per kind:

  kind    tf dtypes                          numpy / Arrow value type
  float   DT_FLOAT, DT_DOUBLE, DT_HALF,      float32
          DT_BFLOAT16
  int     DT_INT*, DT_UINT*, DT_BOOL         int64
  bytes   DT_STRING                          object array of bytes / pa.binary()

A scalar feature is a 1-D column; a feature of fixed shape [d1, ..., dn] is a
fixed_size_list column of d1*...*dn values (numpy: shape (rows, d1*...*dn)).
Ragged dimensions (size -1) are rejected with a clear error.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pyarrow as pa

from sampler.errors import UserError
from sampler.protos import tensor_pb2

_FLOAT = {tensor_pb2.DT_FLOAT, tensor_pb2.DT_DOUBLE, tensor_pb2.DT_HALF, tensor_pb2.DT_BFLOAT16}
_INT = {
    tensor_pb2.DT_INT8,
    tensor_pb2.DT_INT16,
    tensor_pb2.DT_INT32,
    tensor_pb2.DT_INT64,
    tensor_pb2.DT_UINT8,
    tensor_pb2.DT_UINT16,
    tensor_pb2.DT_UINT32,
    tensor_pb2.DT_UINT64,
    tensor_pb2.DT_BOOL,
}
_BYTES = {tensor_pb2.DT_STRING}

NUMPY_DTYPE = {"float": np.float32, "int": np.int64, "bytes": object}
ARROW_TYPE = {"float": pa.float32(), "int": pa.int64(), "bytes": pa.binary()}


@dataclasses.dataclass(frozen=True)
class FeatureSpec:
    """One schema feature: its name, value kind and fixed shape."""

    name: str
    kind: str  # "float" | "int" | "bytes"
    shape: tuple[int, ...]

    @property
    def width(self) -> int:
        """Values per row: 1 for scalars, the product of the dims otherwise."""
        return math.prod(self.shape) if self.shape else 1

    @property
    def arrow_type(self) -> pa.DataType:
        value = ARROW_TYPE[self.kind]
        return pa.list_(value, self.width) if self.shape else value


def feature_spec(name: str, feature, where: str) -> FeatureSpec:
    """Converts a GraphSchema `Feature` (the project's class or TF-GNN's) to a FeatureSpec."""
    if feature.dtype in _FLOAT:
        kind = "float"
    elif feature.dtype in _INT:
        kind = "int"
    elif feature.dtype in _BYTES:
        kind = "bytes"
    else:
        dtype = tensor_pb2.DataType.Name(feature.dtype)
        raise UserError(
            f"{where}: feature '{name}' has dtype {dtype}, which tf.Example cannot carry"
        )
    dims = tuple(int(d.size) for d in feature.shape.dim)
    if any(d < 0 for d in dims):
        raise UserError(
            f"{where}: feature '{name}' has a ragged shape {list(dims)}; only fixed shapes are supported"
        )
    return FeatureSpec(name, kind, dims)


def feature_specs(feature_map, where: str) -> dict[str, FeatureSpec]:
    """All features of a node set, edge set or context, sorted by name."""
    return {name: feature_spec(name, feature_map[name], where) for name in sorted(feature_map)}
