"""The `topology` placement's kernels: sample without node features, join them in once.

Workers hold only the topology (node fingerprints and ids, adjacency); the subgraphs they
sample (with the dense kernels, `sampler.sample.dense`) lack the node features of the sets
that have any. `feature_requests` lists the nodes of a chunk of subgraphs whose features are
needed (each node once per chunk), `lookup_features` finds them in a node table shard, and
`fill_features` puts them back, giving the subgraphs the other placements sample.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from sampler import ids
from sampler.arrays import sorted_unique
from sampler.batches import NodeBatch, concat_features
from sampler.features import FeatureSpec
from sampler.node_table import NodeTable
from sampler.sample.subgraph import NodeSetRows, Subgraph


def without_features(table: NodeTable, keep: tuple[str, ...] = ()) -> NodeTable:
    """The table's topology: fingerprints and ids, no feature columns but those in `keep`
    (a temporal spec's time features, which sampling reads)."""
    features = {name: table.rows.features[name] for name in keep}
    return NodeTable(NodeBatch(table.rows.fp, table.rows.ids, features), table.duplicates)


def _fps(node_ids: np.ndarray) -> np.ndarray:
    return ids.fingerprint(pa.array(list(node_ids), type=pa.binary()))


def feature_requests(subgraphs: list[Subgraph], node_sets: list[str]) -> dict[str, np.ndarray]:
    """Node set -> sorted unique fingerprints of its nodes in `subgraphs` (sets with nodes)."""
    out = {}
    for name in node_sets:
        parts = [s.node_sets[name].ids for s in subgraphs if name in s.node_sets]
        fps = sorted_unique(_fps(np.concatenate(parts))) if parts else np.zeros(0, np.uint64)
        if len(fps):
            out[name] = fps
    return out


@dataclasses.dataclass
class FeatureRows:
    """Feature rows of some nodes of one node set, sorted by fingerprint."""

    fp: np.ndarray  # uint64, sorted
    features: dict[str, np.ndarray]

    @classmethod
    def concat(cls, parts: list[FeatureRows]) -> FeatureRows:
        fp = np.concatenate([p.fp for p in parts])
        order = np.argsort(fp, kind="stable")
        names = parts[0].features
        return cls(
            fp[order], {f: np.concatenate([p.features[f] for p in parts])[order] for f in names}
        )


def lookup_features(table: NodeTable, fps: np.ndarray) -> tuple[FeatureRows, int]:
    """The feature rows of `fps` found in `table`, and how many were not found."""
    index, found = table.lookup(fps)
    index = index[found]
    rows = FeatureRows(fps[found], {f: col[index] for f, col in table.rows.features.items()})
    return rows, int((~found).sum())


class MissingFeatureRows(RuntimeError):
    """Feature rows that `feature_requests` asked for did not reach `fill_features`."""


def fill_features(
    subgraphs: list[Subgraph],
    rows: dict[str, FeatureRows],
    specs: dict[str, dict[str, FeatureSpec]],
) -> list[Subgraph]:
    """The subgraphs with the features of every node set in `specs` filled in from `rows`.

    Every node must have its row: a missing one (rows lost between the stages) raises
    MissingFeatureRows rather than give a node another node's features."""
    rows = {
        name: rows.get(name) or FeatureRows(np.zeros(0, np.uint64), concat_features([], spec))
        for name, spec in specs.items()
    }
    node_sets = [dict(subgraph.node_sets) for subgraph in subgraphs]
    for name, table in rows.items():
        members = [i for i, sets in enumerate(node_sets) if name in sets]
        if not members:
            continue
        ids_of = [node_sets[i][name].ids for i in members]
        bounds = np.cumsum([0] + [len(node_ids) for node_ids in ids_of])
        fps = _fps(np.concatenate(ids_of))  # one pass over the part, not one per subgraph
        pos = np.minimum(np.searchsorted(table.fp, fps), max(len(table.fp) - 1, 0))
        lost = table.fp[pos] != fps if len(table.fp) else np.ones(len(fps), bool)
        if lost.any():
            k = int(np.searchsorted(bounds, np.flatnonzero(lost)[0], side="right")) - 1
            missing = int(lost[bounds[k] : bounds[k + 1]].sum())
            raise MissingFeatureRows(
                f"the feature rows of {missing:,} '{name}' nodes of sample"
                f" {subgraphs[members[k]].sample_id!r} did not arrive"
            )
        features = {f: col[pos] for f, col in table.features.items()}
        for k, i in enumerate(members):
            lo, hi = bounds[k], bounds[k + 1]
            node_sets[i][name] = NodeSetRows(ids_of[k], {f: v[lo:hi] for f, v in features.items()})
    return [
        dataclasses.replace(subgraph, node_sets=sets)
        for subgraph, sets in zip(subgraphs, node_sets, strict=True)
    ]
