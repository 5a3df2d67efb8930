"""Element types that flow between the kernels and the Beam transforms, named once.

Node identities inside the pipeline are 64-bit fingerprints of the Unigraph
string ids (`sampler.ids.fingerprint`); samples are keyed by the fingerprint of
their sample id. All arrays of one batch have the same length.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator

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
    seed_time: typing.Any = None  # the seed's time (int or float) of a temporal spec


@dataclasses.dataclass
class NodeRowsOfChunk:
    """The nodes of one node set in a chunk of subgraphs, sample-major: the rows `index`
    of `batch` (all of them when `index` is None); sample i owns [bounds[i], bounds[i + 1])."""

    batch: typing.Any  # sampler.batches.NodeBatch (ids, features)
    index: np.ndarray | None
    bounds: np.ndarray

    def rows(self):
        return self.batch if self.index is None else self.batch.take(self.index)


@dataclasses.dataclass
class SubgraphChunk:
    """A chunk of subgraphs as columns, before they are cut into Subgraphs or encoded.

    `node_rows`: node set -> NodeRowsOfChunk; `edge_rows`: edge set -> ((2, m) source/target
    indices into the sample's nodes of each end, features, bounds). Rows of each set are
    grouped by sample, samples in the order of `sample_ids`. Node rows are gathered lazily,
    by `subgraphs()` or by the chunk encoder (sampler.sample.encode_chunk).
    """

    sample_ids: np.ndarray  # object array of bytes
    seed_ids: np.ndarray  # object array of bytes
    node_rows: dict[str, NodeRowsOfChunk]
    edge_rows: dict[str, tuple[np.ndarray, dict[str, np.ndarray], np.ndarray]]
    seed_times: np.ndarray | None = None  # one per sample, for a temporal spec

    def __len__(self) -> int:
        return len(self.sample_ids)

    def count_sizes(self, counters) -> None:
        """Adds the chunk's nodes and edges per set to `output_nodes/<set>` and
        `output_edges/<set>` of `counters`."""
        for name, part in self.node_rows.items():
            counters[f"output_nodes/{name}"] += int(part.bounds[-1] - part.bounds[0])
        for name, (_, _, bounds) in self.edge_rows.items():
            counters[f"output_edges/{name}"] += int(bounds[-1] - bounds[0])

    def subgraphs(self, counters) -> Iterator[Subgraph]:
        """One Subgraph per sample (counted as `subgraphs` in `counters`)."""
        node_rows = {name: (part.rows(), part.bounds) for name, part in self.node_rows.items()}
        yield from slice_subgraphs(
            self.sample_ids,
            self.seed_ids,
            node_rows,
            self.edge_rows,
            counters,
            seed_times=self.seed_times,
        )


def slice_subgraphs(
    sample_ids,
    seed_ids,
    node_rows: dict,
    edge_rows: dict,
    counters,
    keep: np.ndarray | None = None,
    seed_times: np.ndarray | None = None,
):
    """Cuts per-sample rows, grouped by sample, into one Subgraph per sample.

    `node_rows`: node set -> (NodeBatch, bounds); `edge_rows`: edge set ->
    ((2, n) source/target indices, features, bounds); sample i owns rows
    [bounds[i], bounds[i + 1]). Samples with `keep[i]` False are skipped. Counts
    `subgraphs` in `counters`.
    """
    for i in range(len(sample_ids)):
        if keep is not None and not keep[i]:
            continue
        node_sets = {}
        for name, (rows, bounds) in node_rows.items():
            lo, hi = bounds[i], bounds[i + 1]
            node_sets[name] = NodeSetRows(
                rows.ids[lo:hi], {f: col[lo:hi] for f, col in rows.features.items()}
            )
        edge_sets = {}
        for name, (adj, features, bounds) in edge_rows.items():
            lo, hi = bounds[i], bounds[i + 1]
            edge_sets[name] = EdgeSetRows(
                adj[0, lo:hi], adj[1, lo:hi], {f: col[lo:hi] for f, col in features.items()}
            )
        counters["subgraphs"] += 1
        seed_time = None if seed_times is None else seed_times[i]
        yield Subgraph(sample_ids[i], seed_ids[i], node_sets, edge_sets, seed_time)


def chunk_of(subgraphs: list[Subgraph]) -> SubgraphChunk:
    """Subgraphs as one SubgraphChunk, in order (for the chunk encoder): a set a subgraph
    does not have is a set of no rows there."""
    from sampler.batches import NodeBatch

    def offsets(counts) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def joined(parts, field: str) -> dict[str, np.ndarray]:
        names = {name for p in parts for name in getattr(p, field)}
        return {name: np.concatenate([getattr(p, field)[name] for p in parts]) for name in names}

    node_rows, edge_rows = {}, {}
    for name in sorted({name for s in subgraphs for name in s.node_sets}):
        parts = [s.node_sets.get(name) for s in subgraphs]
        given = [p for p in parts if p is not None]
        ids = np.concatenate([np.asarray(p.ids, dtype=object) for p in given])
        batch = NodeBatch(np.zeros(len(ids), np.uint64), ids, joined(given, "features"))
        counts = [0 if p is None else len(p.ids) for p in parts]
        node_rows[name] = NodeRowsOfChunk(batch, None, offsets(counts))
    for name in sorted({name for s in subgraphs for name in s.edge_sets}):
        parts = [s.edge_sets.get(name) for s in subgraphs]
        given = [p for p in parts if p is not None]
        index = np.stack(
            [np.concatenate([getattr(p, end) for p in given]) for end in ("source", "target")]
        )
        counts = [0 if p is None else len(p.source) for p in parts]
        edge_rows[name] = (index, joined(given, "features"), offsets(counts))
    sample_ids = np.array([s.sample_id for s in subgraphs] or [], dtype=object)
    seed_ids = np.array([s.seed_id for s in subgraphs] or [], dtype=object)
    seed_times = None
    if subgraphs and subgraphs[0].seed_time is not None:
        seed_times = np.array([s.seed_time for s in subgraphs])
    return SubgraphChunk(sample_ids, seed_ids, node_rows, edge_rows, seed_times)
