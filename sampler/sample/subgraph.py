"""Element types that flow between the kernels and the Beam transforms, named once.

Node identities inside the pipeline are 64-bit fingerprints of the Unigraph
string ids (`sampler.ids.fingerprint`); samples are keyed by the fingerprint of
their sample id. All arrays of one batch have the same length.
"""

from __future__ import annotations

import dataclasses

import numpy as np


@dataclasses.dataclass
class NodeSetRows:
    """The nodes of one node set in one subgraph, in output order."""

    ids: np.ndarray  # object array of bytes
    features: dict[str, np.ndarray]  # name -> (n,) or (n, width), canonical dtypes


@dataclasses.dataclass
class EdgeSetRows:
    """The edges of one edge set in one subgraph."""

    source: np.ndarray  # int64 indices into the source node set's NodeSetRows
    target: np.ndarray  # int64 indices into the target node set's NodeSetRows
    features: dict[str, np.ndarray]


@dataclasses.dataclass
class Subgraph:
    """One sampled subgraph: the seed is node 0 of its node set."""

    sample_id: bytes
    seed_id: bytes
    node_sets: dict[str, NodeSetRows]
    edge_sets: dict[str, EdgeSetRows]
