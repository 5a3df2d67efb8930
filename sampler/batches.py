"""Columnar batches of nodes and edges keyed by fingerprints (numpy only).

These are the units the Beam transforms move: one batch per (shard) or
(bucket), never one element per node or edge.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from sampler import ids
from sampler.features import NUMPY_DTYPE, FeatureSpec
from sampler.jit_loader import kernels


def one_array(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one Arrow array: a ChunkedArray's only chunk as it is (`combine_chunks`
    copies even one chunk: every id and feature read would be copied once more), else its
    chunks combined."""
    if isinstance(column, pa.ChunkedArray):
        return column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    return column


def column_to_numpy(column, spec: FeatureSpec) -> np.ndarray:
    """A canonical Arrow column as (n,) or (n, width) numpy in the canonical dtype (a view of
    the column's buffer where it has the dtype, unless the column is a slice of larger
    buffers, which the view would keep alive: then a copy of its rows)."""
    column = one_array(column)
    if column.get_total_buffer_size() > column.nbytes + 4096:  # a slice (a BigQuery batch's)
        column = pa.concat_arrays([column])
    n = len(column)
    if spec.shape:
        values = column.flatten()
        out = values.to_numpy(zero_copy_only=False)
        return np.asarray(out, dtype=NUMPY_DTYPE[spec.kind]).reshape(n, spec.width)
    return np.asarray(column.to_numpy(zero_copy_only=False), dtype=NUMPY_DTYPE[spec.kind])


def take_features(features: dict[str, np.ndarray], index: np.ndarray) -> dict[str, np.ndarray]:
    return {name: col[index] for name, col in features.items()}


def concat_features(parts: list[dict[str, np.ndarray]], specs: dict[str, FeatureSpec]):
    out = {}
    for name, spec in specs.items():
        cols = [p[name] for p in parts]
        if cols:
            out[name] = np.concatenate(cols)
        else:
            shape = (0, spec.width) if spec.shape else (0,)
            out[name] = np.zeros(shape, dtype=NUMPY_DTYPE[spec.kind])
    return out


def bytes_array(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def runs_of(column: np.ndarray):
    """`column` to pickle: (values, lengths) of its runs of equal values where they take at
    most three quarters of its bytes (a batch's sample keys, sorted: one run per sample),
    else itself."""
    n = len(column)
    if n < 64:
        return column
    starts = np.flatnonzero(column[1:] != column[:-1]) + 1
    if 2 * len(starts) >= n:
        return column
    starts = np.concatenate([[0], starts])
    lengths = np.diff(np.append(starts, n)).astype(np.uint32 if n < 2**32 else np.int64)
    return column[starts], lengths


def from_runs(packed) -> np.ndarray:
    """The column that `runs_of` made `packed` from."""
    return np.repeat(*packed) if isinstance(packed, tuple) else packed


@dataclasses.dataclass
class NodeBatch:
    """Rows of one node set: fingerprints, string ids and features."""

    fp: np.ndarray  # uint64
    ids: np.ndarray  # object array of bytes
    features: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.fp)

    @classmethod
    def from_table(cls, table: pa.Table, specs: dict[str, FeatureSpec], id_column="#id"):
        id_col = one_array(table.column(id_column))
        feats = {name: column_to_numpy(table.column(name), spec) for name, spec in specs.items()}
        # to_numpy makes the object array of bytes in one C loop (to_pylist, then an object
        # array, made each id twice over)
        return cls(ids.fingerprint(id_col), id_col.to_numpy(zero_copy_only=False), feats)

    def take(self, index: np.ndarray) -> NodeBatch:
        return NodeBatch(self.fp[index], self.ids[index], take_features(self.features, index))

    @classmethod
    def concat(cls, parts: list[NodeBatch], specs: dict[str, FeatureSpec]) -> NodeBatch:
        return cls(
            np.concatenate([p.fp for p in parts]) if parts else np.zeros(0, np.uint64),
            np.concatenate([p.ids for p in parts]) if parts else bytes_array([]),
            concat_features([p.features for p in parts], specs),
        )


@dataclasses.dataclass
class EdgeBatch:
    """Rows of one edge set as (source fp, target fp, features), already un-reversed."""

    src: np.ndarray  # uint64
    dst: np.ndarray  # uint64
    features: dict[str, np.ndarray]
    # The `sharded` placement: node time feature -> each edge's target's time (the temporal
    # ops' node times, joined where the dangling edges are dropped); not a feature.
    target_times: dict[str, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.src)

    @classmethod
    def from_table(cls, table: pa.Table, specs: dict[str, FeatureSpec], reversed_: bool):
        src = ids.fingerprint(table.column("#source"))
        dst = ids.fingerprint(table.column("#target"))
        if reversed_:
            src, dst = dst, src
        feats = {name: column_to_numpy(table.column(name), spec) for name, spec in specs.items()}
        return cls(src, dst, feats)

    def take(self, index: np.ndarray) -> EdgeBatch:
        times = None if self.target_times is None else take_features(self.target_times, index)
        return EdgeBatch(
            self.src[index], self.dst[index], take_features(self.features, index), times
        )

    @classmethod
    def concat(cls, parts: list[EdgeBatch], specs: dict[str, FeatureSpec]) -> EdgeBatch:
        empty = np.zeros(0, np.uint64)
        times = None
        if parts and parts[0].target_times is not None:
            times = {
                name: np.concatenate([p.target_times[name] for p in parts])
                for name in parts[0].target_times
            }
        return cls(
            np.concatenate([p.src for p in parts]) if parts else empty,
            np.concatenate([p.dst for p in parts]) if parts else empty,
            concat_features([p.features for p in parts], specs),
            times,
        )


@dataclasses.dataclass
class SampleNodes:
    """(sample, node) pairs: a frontier, or the nodes a sample needs features for."""

    sample: np.ndarray  # uint64 sample keys
    node: np.ndarray  # uint64 node fingerprints
    time: np.ndarray | None = None  # a temporal spec's seed time of each sample's row

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> SampleNodes:
        time = None if self.time is None else self.time[index]
        return SampleNodes(self.sample[index], self.node[index], time)

    def __reduce__(self):  # the sample keys by runs: a batch comes sample by sample
        return _sample_nodes, (runs_of(self.sample), self.node, self.time)

    @classmethod
    def concat(cls, parts: list[SampleNodes]) -> SampleNodes:
        if not parts:
            return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint64))
        timed = [p.time is not None for p in parts]
        if any(timed) and not all(timed):
            raise ValueError("SampleNodes with and without seed times")
        time = np.concatenate([p.time for p in parts]) if all(timed) else None
        return cls(
            np.concatenate([p.sample for p in parts]),
            np.concatenate([p.node for p in parts]),
            time,
        )

    def unique(self) -> SampleNodes:
        """Sorted by (sample, node) without duplicates."""
        return self if len(self) == 0 else self.take(self.unique_index())

    def unique_index(self) -> np.ndarray:
        """The rows of `unique()`: the first of each (sample, node), in (sample, node) order."""
        sample = self.sample
        if len(sample) > 1 and np.all(sample[1:] >= sample[:-1]):  # an op's edges, by sample
            order = np.arange(len(sample))
        else:  # the concatenated parts of a step's input: a few sorted runs
            order = np.argsort(sample, kind="stable")
        return kernels("sampler.batches_jit").unique_pairs(sample, self.node, order)


@dataclasses.dataclass
class SampledEdges:
    """Edges chosen for samples, with their features, ready for assembly."""

    sample: np.ndarray  # uint64
    src: np.ndarray  # uint64
    dst: np.ndarray  # uint64
    edge_key: np.ndarray  # uint64: identifies the edge among parallel edges
    features: dict[str, np.ndarray]
    time: np.ndarray | None = None  # a temporal spec's seed time of each edge's sample

    def __len__(self) -> int:
        return len(self.sample)

    def __reduce__(self):  # the sample keys and sources by runs: a source's edges follow it
        fields = (self.edge_key, self.features, self.time)
        return _sampled_edges, (runs_of(self.sample), runs_of(self.src), self.dst, *fields)

    def take(self, index) -> SampledEdges:
        return SampledEdges(
            self.sample[index],
            self.src[index],
            self.dst[index],
            self.edge_key[index],
            take_features(self.features, index),
            None if self.time is None else self.time[index],
        )

    @classmethod
    def concat(cls, parts: list[SampledEdges], specs: dict[str, FeatureSpec]) -> SampledEdges:
        def cat(attr):
            return (
                np.concatenate([getattr(p, attr) for p in parts])
                if parts
                else np.zeros(0, np.uint64)
            )

        return cls(
            cat("sample"),
            cat("src"),
            cat("dst"),
            cat("edge_key"),
            concat_features([p.features for p in parts], specs),
        )


@dataclasses.dataclass
class SharedNodeRows:
    """Node rows of (sample, node)s whose nodes are held once however many of its samples hold
    them (a field of study in most subgraphs of a bucket): row i is `rows[inverse[i]]`. The
    features are copied once per node from the table, not once per sample, and the
    assembly's pieces carry each once."""

    sample: np.ndarray  # uint64
    inverse: np.ndarray  # int64 into rows
    rows: NodeBatch

    def __len__(self) -> int:
        return len(self.sample)

    @classmethod
    def looked_up(cls, table, requests: SampleNodes) -> tuple[SharedNodeRows, int]:
        """The rows of (sample, node) requests in `table` (a sampler.node_table.NodeTable),
        each (sample, node) once, and how many nodes were not in the table."""
        requests = requests.unique()
        index, found = table.lookup(requests.node)
        held, inverse = unique_inverse(index[found], len(table.rows))
        rows = cls(requests.sample[found], inverse, table.rows.take(held))
        return rows, int((~found).sum())

    def __reduce__(self):  # the sample keys by runs
        return _shared_node_rows, (runs_of(self.sample), self.inverse, self.rows)

    def take(self, index: np.ndarray) -> SharedNodeRows:
        """Rows `index`, holding only the node rows that they use."""
        held, inverse = unique_inverse(self.inverse[index], len(self.rows))
        return SharedNodeRows(self.sample[index], inverse, self.rows.take(held))


def unique_inverse(values: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) of row indices in [0, bound), the inverse as
    int64: by marking the rows held where they are few beside the values (no sort), else
    by np.unique's sort."""
    if bound > 4 * len(values):
        held, inverse = np.unique(values, return_inverse=True)
        return held, inverse.astype(np.int64)
    seen = np.zeros(bound, bool)
    seen[values] = True
    held = np.flatnonzero(seen)
    position = np.zeros(bound, np.int64)
    position[held] = np.arange(len(held))
    return held, position[values]


def _sample_nodes(sample, node, time) -> SampleNodes:
    return SampleNodes(from_runs(sample), node, time)


def _sampled_edges(sample, src, dst, edge_key, features, time) -> SampledEdges:
    return SampledEdges(from_runs(sample), from_runs(src), dst, edge_key, features, time)


def _shared_node_rows(sample, inverse, rows) -> SharedNodeRows:
    return SharedNodeRows(from_runs(sample), inverse, rows)


@dataclasses.dataclass
class Seeds:
    """Seed occurrences: one row per subgraph to produce."""

    sample: np.ndarray  # uint64 fingerprint of sample_id
    sample_id: np.ndarray  # object array of bytes
    seed_id: np.ndarray  # object array of bytes
    node: np.ndarray  # uint64 fingerprint of seed_id
    time: np.ndarray | None = None  # each seed's time, from the seeds table's time column

    def __len__(self) -> int:
        return len(self.sample)

    def take(self, index) -> Seeds:
        time = None if self.time is None else self.time[index]
        return Seeds(
            self.sample[index], self.sample_id[index], self.seed_id[index], self.node[index], time
        )

    @classmethod
    def concat(cls, parts: list[Seeds]) -> Seeds:
        if not parts:
            e = np.zeros(0, np.uint64)
            return cls(e, bytes_array([]), bytes_array([]), e)
        timed = [p.time is not None for p in parts]
        if any(timed) and not all(timed):
            raise ValueError("Seeds with and without times")
        return cls(
            np.concatenate([p.sample for p in parts]),
            np.concatenate([p.sample_id for p in parts]),
            np.concatenate([p.seed_id for p in parts]),
            np.concatenate([p.node for p in parts]),
            np.concatenate([p.time for p in parts]) if all(timed) else None,
        )


@dataclasses.dataclass
class SeedRows:
    """Rows of a seeds table: ids (object array of bytes), and each row's time when the table
    has a time column (sampler.io.graph_tables.SEED_TIME_COLUMN)."""

    ids: np.ndarray
    time: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def take(self, index) -> SeedRows:
        return SeedRows(self.ids[index], None if self.time is None else self.time[index])

    @classmethod
    def concat(cls, parts: list[SeedRows]) -> SeedRows:
        timed = [p.time is not None for p in parts]
        if any(timed) and not all(timed):
            raise ValueError("seed rows with and without times")
        ids = np.concatenate([p.ids for p in parts]) if parts else bytes_array([])
        return cls(ids, np.concatenate([p.time for p in parts]) if parts and all(timed) else None)
