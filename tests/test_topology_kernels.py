"""The `topology` placement's feature join (sampler.sample.topology), on hand-made rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sampler import ids
from sampler.features import FeatureSpec
from sampler.sample.subgraph import NodeSetRows, Subgraph
from sampler.sample.topology import FeatureRows, MissingFeatureRows, fill_features

SPEC = {"paper": {"x": FeatureSpec("x", "float", (1,))}}


def _fp(names):
    return ids.fingerprint(pa.array([n.encode() for n in names], pa.binary()))


def _subgraph(names):
    node_ids = np.array([n.encode() for n in names], dtype=object)
    return Subgraph(b"s", node_ids[0], {"paper": NodeSetRows(node_ids, {})}, {})


def _rows(values: dict):
    fp = _fp(list(values))
    order = np.argsort(fp)
    x = np.array(list(values.values()), np.float32).reshape(-1, 1)
    return FeatureRows(fp[order], {"x": x[order]})


def test_fill_features_gives_each_node_its_own_row():
    filled = fill_features(
        [_subgraph(["b", "a", "c"])], {"paper": _rows({"a": 1, "b": 2, "c": 3})}, SPEC
    )
    assert filled[0].node_sets["paper"].features["x"].ravel().tolist() == [2, 1, 3]


@pytest.mark.parametrize("rows, missing", [({"a": 1, "c": 3}, 1), ({"a": 1, "b": 2}, 1), (None, 3)])
def test_a_missing_row_is_an_error_not_a_neighbours_features(rows, missing):
    # One node's row is missing (wherever its fingerprint sorts), or every row is: a sorted
    # search alone would hand it a neighbouring row's features.
    joined = {"paper": _rows(rows)} if rows else {}
    with pytest.raises(MissingFeatureRows, match=f"{missing} 'paper' nodes"):
        fill_features([_subgraph(["a", "b", "c"])], joined, SPEC)
