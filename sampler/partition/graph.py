"""The graph as the partitioner sees it: types, node shards and original integer ids.

Original type-wise ids. A node's original id is the rank of its 64-bit fingerprint
(`sampler.ids.fingerprint` of its string `#id`) among the fingerprints of its node set,
so it depends only on the set of ids, never on how the tables are split into files.
Nodes are sharded by fingerprint *range* (`range_shard`), so a shard holds a contiguous
block of original ids: shard s of type t holds ids [start, start + n) where start is the
number of nodes of t in shards 0..s-1 (a small side input of counts).

An edge's original type-wise id is its rank within its edge set in the order
(source original id, target original id, content hash of its features). Parallel edges
with equal features are interchangeable, so the order is well defined either way. Edges
are grouped by the node shard of their source, which makes that order shard-major too.

Type ids follow DGL: node types sorted by name, edge types sorted as canonical
(source, relation, target) tuples, the relation being the Unigraph edge set name.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.arrays import lexsort_two
from sampler.batches import NodeBatch, take_features
from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.jit_loader import kernels
from sampler.node_table import FingerprintCollision, build_node_table
from sampler.partition import output_format
from sampler.partition.compact import reduce_narrowed
from sampler.partition.output_format import MASK_SPECS, Split
from sampler.schema import GraphInfo


@dataclasses.dataclass(frozen=True)
class GraphTypes:
    """Node and edge types in DGL's order, with the features the partition files hold.

    `node_features` includes the masks --split makes (`splits`); `layout` and `labels` decide
    their dtypes (sampler/partition/output_format.py).
    """

    ntypes: tuple[str, ...]
    etypes: tuple[tuple[str, str, str], ...]  # canonical (source, edge set, target)
    node_features: dict[str, dict[str, FeatureSpec]]  # ntype -> numeric features
    edge_features: dict[str, dict[str, FeatureSpec]]  # edge set -> numeric features
    skipped_features: tuple[str, ...]  # string features, which DGL tensors cannot hold
    splits: dict[str, Split] = dataclasses.field(default_factory=dict)  # ntype -> its masks
    layout: str = "dgl"
    labels: frozenset[str] = frozenset(output_format.DEFAULT_LABELS)

    @classmethod
    def from_graph(
        cls,
        graph: GraphInfo,
        *,
        splits: dict[str, Split] | None = None,
        layout: str = "dgl",
        labels: tuple[str, ...] = output_format.DEFAULT_LABELS,
    ) -> GraphTypes:
        """The types of `graph`; `splits` (node type -> Split) adds their masks."""
        ntypes = tuple(sorted(graph.node_sets))
        etypes = tuple(sorted((e.source, e.name, e.target) for e in graph.edge_sets.values()))
        skipped = []

        def numeric(owner: str, specs: dict[str, FeatureSpec]) -> dict[str, FeatureSpec]:
            out = {}
            for name, spec in specs.items():
                if spec.kind == "bytes":
                    skipped.append(f"{owner}/{name}")
                elif "/" in name:
                    raise UserError(
                        f"feature '{owner}/{name}': DGL splits feature keys on '/', "
                        "so a feature name must not contain it"
                    )
                else:
                    output_format.check_mask_spec(owner, spec)
                    out[name] = spec
            return out

        node_features = {t: numeric(t, graph.node_sets[t].features) for t in ntypes}
        edge_features = {
            e: numeric(canonical(etype), graph.edge_sets[e].features)
            for etype in etypes
            for e in [etype[1]]
        }
        for name in ntypes:
            if ":" in name:
                raise UserError(f"node set '{name}': DGL type names must not contain ':'")
        splits = dict(splits or {})
        for name in splits:
            if name not in node_features:
                raise UserError(f"--split {name}: the graph has no node set of that name")
            taken = sorted(set(output_format.MASK_NAMES) & set(node_features[name]))
            if taken:
                raise UserError(
                    f"--split {name}: node set '{name}' already has a feature {taken[0]}; "
                    "use its masks or drop --split"
                )
            node_features[name] = {**node_features[name], **MASK_SPECS}
        if layout not in output_format.LAYOUTS:
            raise UserError(f"--layout {layout}: use one of {', '.join(output_format.LAYOUTS)}")
        return cls(
            ntypes, etypes, node_features, edge_features, tuple(skipped),
            splits, layout, frozenset(labels),
        )  # fmt: skip

    def table_features(self, ntype: str) -> dict[str, FeatureSpec]:
        """The features of a node set that its table holds (not the masks --split makes)."""
        specs = self.node_features[ntype]
        if ntype not in self.splits:
            return specs
        return {k: v for k, v in specs.items() if k not in output_format.MASK_NAMES}

    @property
    def homogeneous(self) -> bool:
        return len(self.ntypes) == 1 and len(self.etypes) == 1

    def ntype_id(self, name: str) -> int:
        return self.ntypes.index(name)

    def etype_id(self, edge_set: str) -> int:
        return [e[1] for e in self.etypes].index(edge_set)

    def canonical(self, etype: int) -> str:
        return canonical(self.etypes[etype])


def canonical(etype: tuple[str, str, str]) -> str:
    return ":".join(etype)


def range_shard(fp: np.ndarray, num_shards: int) -> np.ndarray:
    """The shard of each fingerprint when [0, 2**64) is cut into num_shards equal ranges."""
    high = np.asarray(fp, dtype=np.uint64) >> np.uint64(32)
    return ((high * np.uint64(num_shards)) >> np.uint64(32)).astype(np.int64)


@dataclasses.dataclass
class NodeShard:
    """The nodes of one type in one fingerprint range, sorted by fingerprint.

    Row i has the original type-wise id `start + i` once `start` is known.
    """

    ntype: int
    shard: int
    rows: NodeBatch
    start: int = -1

    def __len__(self) -> int:
        return len(self.rows)

    def index(self) -> NodeIndex:
        return NodeIndex(self.ntype, self.shard, self.rows.fp, self.start)


@dataclasses.dataclass
class NodeIndex:
    """Fingerprints of a node shard and its first original id: what edge joins need."""

    ntype: int
    shard: int
    fp: np.ndarray  # uint64, sorted
    start: int

    def lookup(self, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(original id, found) of each fingerprint."""
        if len(self.fp) == 0:
            return np.zeros(len(fps), np.int64), np.zeros(len(fps), bool)
        pos = _positions(self.fp, fps)
        pos_c = np.minimum(pos, len(self.fp) - 1)
        found = self.fp[pos_c] == fps
        return (self.start + pos_c).astype(np.int64), found


def _positions(table: np.ndarray, fps: np.ndarray) -> np.ndarray:
    """np.searchsorted(table, fps) of a sorted uint64 table, in one or two steps per lookup
    instead of log2(table) (sampler/partition/lookup_jit.py)."""
    bits = min(max(int(len(table) - 1).bit_length(), 1), 32)
    table, fps = (np.ascontiguousarray(a, dtype=np.uint64) for a in (table, fps))
    return kernels("sampler.partition.lookup_jit").positions(table, fps, bits)


def build_node_shard(
    ntype: int,
    shard: int,
    parts: list[NodeBatch],
    specs: dict[str, FeatureSpec],
    name: str,
    split: Split | None = None,
) -> NodeShard:
    """Merges the batches of one shard: sorted by fingerprint, duplicate ids dropped.

    A duplicate id keeps its row with the smallest content hash (as the sampler does), so
    the result does not depend on the order the batches arrive in. `specs` are the table's
    features (GraphTypes.table_features); with a `split` the shard also gets its masks.
    """
    batch = NodeBatch.concat(parts, specs)
    try:
        table = build_node_table(batch)
    except FingerprintCollision as e:
        raise UserError(f"node set '{name}': {e}; rename one of them") from e
    rows = table.rows
    if split is not None:
        masks = output_format.split_masks(name, rows.fp, split)
        rows = dataclasses.replace(rows, features={**rows.features, **masks})
    return NodeShard(ntype, shard, rows)


def shard_starts(counts: dict[tuple[int, int], int], num_types: int, num_shards: int):
    """[T, S + 1] array: the first original id of every (type, shard), and each type's total."""
    table = np.zeros((num_types, num_shards), dtype=np.int64)
    for (t, s), n in counts.items():
        table[t, s] += n
    starts = np.zeros((num_types, num_shards + 1), dtype=np.int64)
    np.cumsum(table, axis=1, out=starts[:, 1:])
    return starts


@dataclasses.dataclass
class EdgeShard:
    """The edges of one edge type whose sources lie in one node shard, in original-id order.

    `dst_shard` is the node shard of each target; features are rows in the same order.
    Row i has the original type-wise edge id `start + i` once `start` is known.
    """

    etype: int
    shard: int  # node shard of the sources
    src: np.ndarray  # int64 original ids of the sources
    dst: np.ndarray  # int64 original ids of the targets
    dst_shard: np.ndarray  # int64
    features: dict[str, np.ndarray]
    start: int = -1

    def __len__(self) -> int:
        return len(self.src)

    def __reduce__(self):
        return reduce_narrowed(self)  # int64 arrays narrowed between Beam stages (compact.py)


def rank_edges(
    etype: int,
    shard: int,
    src: np.ndarray,
    dst: np.ndarray,
    dst_shard: np.ndarray,
    features: dict[str, np.ndarray],
) -> EdgeShard:
    """Sorts one shard's edges of one type by (source id, target id, content hash)."""
    content = ids.row_fingerprint(features, len(src))
    span = int(dst.max()) + 1 if len(dst) else 1
    if len(src) and src.min() >= 0 and dst.min() >= 0 and (int(src.max()) + 1) * span < 2**63:
        order = lexsort_two(content, src.astype(np.int64) * span + dst)  # (src, dst), content
    else:
        order = np.lexsort((content, dst, src))
    return EdgeShard(
        etype,
        shard,
        src[order].astype(np.int64),
        dst[order].astype(np.int64),
        dst_shard[order].astype(np.int64),
        take_features(features, order),
    )
