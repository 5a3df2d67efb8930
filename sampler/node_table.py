"""Node tables: one node set's rows sorted by fingerprint, for lookup by node.

Both stages use them: sampling looks up node rows for features, partitioning numbers
nodes by their rank in the table.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.arrays import lexsort_two, read_only
from sampler.batches import NodeBatch
from sampler.jit_loader import kernels


@dataclasses.dataclass
class NodeTable:
    """Node rows sorted by fingerprint, for feature lookup."""

    rows: NodeBatch
    duplicates: int  # rows dropped because their id was already present

    def lookup(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row index, found) per fingerprint: a directory by top bits, then a short search
        (numpy's binary search misses the caches at each step of every lookup). The arrays are
        numpy's (backed by huge pages where large: a dense graph keeps the rows of its edges'
        targets as they come from here)."""
        if len(self.rows.fp) == 0:
            return np.zeros(len(fps), np.int64), np.zeros(len(fps), bool)
        table, query = (read_only(np.ascontiguousarray(a, np.uint64)) for a in (self.rows.fp, fps))
        pos, found = np.empty(len(query), np.int64), np.empty(len(query), bool)
        kernels("sampler.ids_jit").find_sorted_into(table, query, pos, found)
        return pos, found


class FingerprintCollision(ValueError):
    pass


def build_node_table(rows: NodeBatch) -> NodeTable:
    """Sorts by fingerprint; a duplicate id keeps its row with the smallest content hash."""
    n = len(rows)
    content = ids.row_fingerprint(rows.features, n)
    order = lexsort_two(content, rows.fp)  # np.lexsort((content, rows.fp)), faster
    fp = rows.fp[order]
    keep = np.ones(n, dtype=bool)
    keep[1:] = fp[1:] != fp[:-1]
    dropped = order[~keep]
    if len(dropped):
        kept_for = order[np.maximum.accumulate(np.where(keep, np.arange(n), 0))][~keep]
        clash = rows.ids[dropped] != rows.ids[kept_for]
        if np.any(clash):
            i = int(np.flatnonzero(clash)[0])
            raise FingerprintCollision(
                f"ids {rows.ids[dropped][i]!r} and {rows.ids[kept_for][i]!r} share a 64-bit fingerprint"
            )
    return NodeTable(rows.take(order[keep]), int(n - keep.sum()))


def merge_node_tables(shards: list[NodeTable], specs) -> NodeTable:
    """One NodeTable from shards that hold disjoint nodes."""
    rows = NodeBatch.concat([t.rows for t in shards], specs)
    return NodeTable(rows.take(np.argsort(rows.fp)), sum(t.duplicates for t in shards))
