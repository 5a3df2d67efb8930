"""Deterministic generator of OGBN-MAG-shaped heterogeneous graphs at any scale.

`generate_mag(num_papers, ...)` returns a `SyntheticGraph`: a GraphSchema
(without filenames) plus one canonical Arrow table per stored node/edge set.
`write_graph` writes it as a Unigraph directory (tables + graph_schema.pbtxt);
`mag_sampling_spec` (from sampler.tools.mag_spec) is the SamplingSpec that goes with it.

Shape of the graph (ratios of the real ogbn-mag, 736,389 papers):

  node set         per paper   features
  paper            1           feat float32[feature_dim], year int64, label int64
  author           1.541       none (latent) unless all_node_features
  institution      0.01187     none (latent) unless all_node_features
  field_of_study   0.0814      none (latent) unless all_node_features

  edge set          source -> target            edges           MAG
  cites             paper -> paper              7.36 / paper    5,416,271
  writes            author -> paper             9.70 / paper    7,145,660
  affiliated_with   author -> institution       0.92 / author   1,043,998
  has_topic         paper -> field_of_study     10.2 / paper    7,505,078
  written           paper -> author             reversed `writes` (same file)

Every node belongs to one of `num_clusters` communities (`SyntheticGraph.clusters`).
Each edge is drawn from one end (the "driver": the citing paper, the paper for
writes, the author, the paper for has_topic) with a negative-binomial count per
driver. With probability `intra_cluster` the other end is drawn inside the driver's
cluster with Zipf-like popularity (a random node order per cluster, rank ~ size * U**k);
otherwise it is a globally popular node of another cluster (same law over a random
global order), so cross-cluster edges concentrate on global hubs. In-degrees are
heavy-tailed. Multi-edges and self-loops are removed, so edge counts land a little
below the MAG means (most visibly on small graphs, whose clusters hold few fields and
institutions: about -6% at 1M papers, -10..-20% at 2k papers for has_topic).

Node ids are bytes: b"p0", b"a12", b"i3", b"f7" (prefix + index); `clusters[set][i]`
is the cluster of the node with index i. Edge tables are sorted by (source, target).

Each part of the graph draws from its own PCG64 stream derived from `seed`, so
options that add data (features, weights, hub) never change the rest of the graph.
Everything is vectorized numpy: time and memory are linear in `num_papers`.
"""

from __future__ import annotations

import dataclasses
import math
import os

import numpy as np
import pyarrow as pa
from google.protobuf import text_format

from sampler.errors import UserError
from sampler.features import FeatureSpec, feature_specs
from sampler.io import files
from sampler.protos import graph_schema_pb2, tensor_pb2
from sampler.tools.mag_spec import mag_sampling_spec as mag_sampling_spec  # re-exported
from sampler.tools.mag_spec import (  # re-exported
    temporal_mag_sampling_spec as temporal_mag_sampling_spec,
)
from sampler.tools.mag_spec import write_sampling_spec as write_sampling_spec  # re-exported

# Real ogbn-mag counts, the source of every proportion below.
MAG_COUNTS = {
    "paper": 736_389,
    "author": 1_134_649,
    "institution": 8_740,
    "field_of_study": 59_965,
    "cites": 5_416_271,
    "writes": 7_145_660,
    "affiliated_with": 1_043_998,
    "has_topic": 7_505_078,
}
MAG_NUM_LABELS = 349  # venues
SMALL_FEATURE_DIM = 4  # `feat` width of author/institution/field_of_study (all_node_features)
YEARS = np.arange(2010, 2020)

NODE_SETS = ("paper", "author", "institution", "field_of_study")
ID_PREFIX = {"paper": b"p", "author": b"a", "institution": b"i", "field_of_study": b"f"}
# name: (source set, target set); `written` is stored as the reverse of `writes`.
EDGE_SETS = {
    "cites": ("paper", "paper"),
    "writes": ("author", "paper"),
    "affiliated_with": ("author", "institution"),
    "has_topic": ("paper", "field_of_study"),
    "written": ("paper", "author"),
}
REVERSED = {"written": "writes"}
FORMAT_EXTENSIONS = {"tfrecord": "tfrecord", "csv": "csv", "parquet": "parquet"}

# How edges are drawn: the node set whose nodes draw the edges ("driver"), the mean
# number drawn per driver node, the negative-binomial shape of that count (smaller =
# heavier tail), the minimum count, and the popularity exponent k of the other end
# (rank = size * U**k; larger k = more skewed in-degrees).
_PER_PAPER = MAG_COUNTS["paper"]
_DRAW = {
    # edge set: (driver end, mean per driver, nb shape, min count, popularity k)
    "cites": ("source", MAG_COUNTS["cites"] / _PER_PAPER, 1.5, 0, 3.0),
    "writes": ("target", MAG_COUNTS["writes"] / _PER_PAPER, 1.0, 1, 2.0),
    "affiliated_with": (
        "source",
        MAG_COUNTS["affiliated_with"] / MAG_COUNTS["author"],
        2.0,
        0,
        2.5,
    ),
    "has_topic": ("source", MAG_COUNTS["has_topic"] / _PER_PAPER, 3.0, 1, 2.5),
}
# Independent random streams (spawn keys) per part of the graph.
_STREAM = {
    "clusters": 1,
    "paper_features": 2,
    "paper_labels": 10,
    "other_features": 3,
    "cites": 4,
    "writes": 5,
    "affiliated_with": 6,
    "has_topic": 7,
    "hub": 8,
    "weights": 9,
}


@dataclasses.dataclass
class SyntheticGraph:
    """A generated graph: schema (no filenames), tables and the latent communities.

    schema:   GraphSchema (sampler.protos); metadata.cardinality is set, filename is not.
    tables:   canonical Arrow tables keyed by set name; none for latent node sets
              (author/institution/field_of_study unless all_node_features) nor `written`.
    clusters: node set -> int32 array, cluster of the node with index i (id prefix + i).
    num_nodes: node set -> number of nodes (also for latent node sets).
    """

    schema: graph_schema_pb2.GraphSchema
    tables: dict[str, pa.Table]
    clusters: dict[str, np.ndarray]
    num_nodes: dict[str, int]
    num_clusters: int

    def counts(self) -> dict[str, int]:
        """Rows per node set and edge set (`written` counts the `writes` rows)."""
        out = dict(self.num_nodes)
        for name in EDGE_SETS:
            out[name] = self.tables[REVERSED.get(name, name)].num_rows
        return out


def _rng(seed: int, part: str) -> np.random.Generator:
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(_STREAM[part],)))
    )


def node_counts(num_papers: int) -> dict[str, int]:
    """Nodes per set for `num_papers` papers in MAG proportions (at least 1 each)."""
    return {
        name: max(1, round(num_papers * MAG_COUNTS[name] / MAG_COUNTS["paper"]))
        for name in NODE_SETS
    }


def default_num_clusters(num_papers: int) -> int:
    """sqrt-scaled: about 5*sqrt(num_papers) papers per cluster (200 clusters at 1M)."""
    return max(1, min(round(math.sqrt(num_papers) / 5), node_counts(num_papers)["institution"]))


def node_ids(node_set: str, n: int) -> pa.Array:
    """The ids b"<prefix><i>" for i in range(n) as an Arrow binary array."""
    prefix = ID_PREFIX[node_set]
    return pa.array(np.char.add(prefix, np.arange(n).astype("S")), type=pa.binary())


def _schema(
    feature_dim: int, all_node_features: bool, edge_weights: bool, edge_years: bool = False
) -> graph_schema_pb2.GraphSchema:
    schema = graph_schema_pb2.GraphSchema()

    def add(features, name, dtype, dims=()):
        feature = features[name]
        feature.dtype = dtype
        for size in dims:
            feature.shape.dim.add().size = size

    paper = schema.node_sets["paper"]
    paper.description = (
        "Synthetic MAG paper: feat is a noisy cluster centroid, label follows the cluster."
    )
    add(paper.features, "feat", tensor_pb2.DT_FLOAT, (feature_dim,))
    add(paper.features, "year", tensor_pb2.DT_INT64)
    add(paper.features, "label", tensor_pb2.DT_INT64)
    for name in NODE_SETS[1:]:
        node_set = schema.node_sets[name]
        if all_node_features:
            add(node_set.features, "feat", tensor_pb2.DT_FLOAT, (SMALL_FEATURE_DIM,))
        else:
            node_set.description = "Latent node set: no features and no table."
    for name, (source, target) in EDGE_SETS.items():
        edge_set = schema.edge_sets[name]
        edge_set.source = source
        edge_set.target = target
        if name in REVERSED:
            extra = edge_set.metadata.extra.add()
            extra.key = "edge_type"
            extra.value = "reversed"
    if edge_weights:
        add(schema.edge_sets["cites"].features, "weight", tensor_pb2.DT_FLOAT)
    for name in ("cites", "writes", "written") if edge_years else ():
        add(schema.edge_sets[name].features, "year", tensor_pb2.DT_INT64)
    return schema


def _clusters(rng: np.random.Generator, n: int, num_clusters: int) -> np.ndarray:
    """Balanced random assignment of n nodes to clusters (each non-empty when n >= clusters)."""
    blocks = (np.arange(n, dtype=np.int64) * num_clusters // n).astype(np.int32)
    return rng.permutation(blocks)


class _Popularity:
    """Draws nodes of one node set with Zipf-like popularity, in a cluster or globally."""

    def __init__(self, rng: np.random.Generator, cluster: np.ndarray, num_clusters: int):
        # A random order of the nodes inside each cluster: position 0 is the most popular.
        shuffled = rng.permutation(len(cluster))
        self.order = shuffled[np.argsort(cluster[shuffled], kind="stable")]
        sizes = np.bincount(cluster, minlength=num_clusters)
        self.sizes = sizes.astype(np.int64)
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
        # An independent global order for edges that leave their cluster.
        self.global_order = rng.permutation(len(cluster))
        self.cluster = cluster

    def draw(self, rng: np.random.Generator, clusters: np.ndarray, k: float) -> np.ndarray:
        """One node per entry of `clusters`, drawn inside that cluster."""
        sizes = self.sizes[clusters]
        ranks = (sizes * rng.random(len(clusters)) ** k).astype(np.int64)
        np.minimum(ranks, sizes - 1, out=ranks)
        return self.order[self.starts[clusters] + ranks]

    def draw_outside(self, rng: np.random.Generator, clusters: np.ndarray, k: float) -> np.ndarray:
        """One globally popular node per entry of `clusters`, outside that cluster.

        Draws are repeated for the nodes that land inside; after a few rounds any rest stays
        (only possible when one cluster holds nearly all the popularity).
        """
        n = len(self.global_order)
        nodes = np.empty(len(clusters), dtype=np.int64)
        todo = np.arange(len(clusters))
        for _ in range(8):
            ranks = np.minimum((n * rng.random(len(todo)) ** k).astype(np.int64), n - 1)
            nodes[todo] = self.global_order[ranks]
            todo = todo[self.cluster[nodes[todo]] == clusters[todo]]
            if not len(todo):
                break
        return nodes


def _draw_edges(
    name: str,
    rng: np.random.Generator,
    clusters: dict[str, np.ndarray],
    popularity: dict[str, _Popularity],
    num_clusters: int,
    intra_cluster: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(source index, target index) arrays for one edge set, before dedup.

    Each edge is drawn by its "driver" end; the other end is a popular node of the
    driver's cluster (probability intra_cluster) or a globally popular node of another
    cluster, so cross-cluster edges concentrate on global hubs as in citation graphs.
    """
    source, target = EDGE_SETS[name]
    driver_end, mean, shape, minimum, k = _DRAW[name]
    driver, other = (source, target) if driver_end == "source" else (target, source)
    n = len(clusters[driver])
    extra = mean - minimum
    degree = rng.negative_binomial(shape, shape / (shape + extra), size=n) + minimum
    drivers = np.repeat(np.arange(n, dtype=np.int64), degree)
    cluster = clusters[driver][drivers]
    others = popularity[other].draw(rng, cluster, k)
    if num_clusters > 1:
        inter = np.flatnonzero(rng.random(len(drivers)) >= intra_cluster)
        others[inter] = popularity[other].draw_outside(rng, cluster[inter], k)
    return (drivers, others) if driver_end == "source" else (others, drivers)


def _dedup(src: np.ndarray, tgt: np.ndarray, num_targets: int, drop_self_loops: bool):
    """Unique (src, tgt) pairs sorted by (src, tgt)."""
    if drop_self_loops:
        keep = src != tgt
        src, tgt = src[keep], tgt[keep]
    key = src * num_targets + tgt
    key.sort()  # np.unique would hash first: several times slower on 10M keys.
    keep = np.empty(len(key), dtype=bool)
    keep[:1] = True
    np.not_equal(key[1:], key[:-1], out=keep[1:])
    key = key[keep]
    return key // num_targets, key % num_targets


def _fixed_list(values: np.ndarray, spec: FeatureSpec) -> pa.Array:
    flat = pa.array(np.ascontiguousarray(values, dtype=np.float32).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, spec.width)


def _table(id_columns: dict[str, pa.Array], columns: dict[str, pa.Array], specs) -> pa.Table:
    """Canonical table: id columns (binary) then features sorted by name."""
    fields = [pa.field(name, pa.binary()) for name in id_columns]
    arrays = list(id_columns.values())
    for name, spec in specs.items():
        fields.append(pa.field(name, spec.arrow_type))
        arrays.append(columns[name])
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _check(num_papers, feature_dim, hub_fraction, intra_cluster, num_clusters, num_labels):
    if int(num_papers) != num_papers or num_papers < 1:
        raise UserError(f"num_papers must be a positive integer, got {num_papers}")
    if int(feature_dim) != feature_dim or feature_dim < 1:
        raise UserError(f"feature_dim must be a positive integer, got {feature_dim}")
    if not 0.0 <= hub_fraction <= 1.0:
        raise UserError(f"hub_fraction must be in [0, 1], got {hub_fraction}")
    if not 0.0 <= intra_cluster <= 1.0:
        raise UserError(f"intra_cluster must be in [0, 1], got {intra_cluster}")
    if num_labels < 1:
        raise UserError(f"num_labels must be positive, got {num_labels}")
    if num_clusters is not None:
        smallest = min(node_counts(num_papers).values())
        if not 1 <= num_clusters <= smallest:
            raise UserError(
                f"num_clusters must be in [1, {smallest}] for {num_papers} papers "
                f"(every cluster needs an institution), got {num_clusters}"
            )


def generate_mag(
    num_papers: int,
    *,
    seed: int = 0,
    feature_dim: int = 16,
    all_node_features: bool = False,
    hub_fraction: float = 0.0,
    edge_weights: bool = False,
    num_clusters: int | None = None,
    intra_cluster: float = 0.9,
    num_labels: int = MAG_NUM_LABELS,
    edge_years: bool = False,
) -> SyntheticGraph:
    """Generates an OGBN-MAG-shaped graph; the result depends only on the arguments.

    hub_fraction: paper p0 becomes a hub cited by round(hub_fraction * num_papers)
      other papers (chosen uniformly), on top of its ordinary citations.
    edge_weights: `cites` gets a scalar float32 `weight` in (0, 1].
    edge_years: `cites`, `writes` and `written` get an int64 `year`, the year of their paper
      end (of the cited paper for `cites`): the times of temporal sampling.
    num_clusters: communities (default `default_num_clusters`); intra_cluster is the
      fraction of drawn edges that stay inside their cluster.
    """
    _check(num_papers, feature_dim, hub_fraction, intra_cluster, num_clusters, num_labels)
    num_papers = int(num_papers)
    counts = node_counts(num_papers)
    if num_clusters is None:
        num_clusters = default_num_clusters(num_papers)
    schema = _schema(feature_dim, all_node_features, edge_weights, edge_years)
    for name, count in counts.items():
        schema.node_sets[name].metadata.cardinality = count

    rng = _rng(seed, "clusters")
    clusters = {name: _clusters(rng, counts[name], num_clusters) for name in NODE_SETS}
    popularity = {name: _Popularity(rng, clusters[name], num_clusters) for name in NODE_SETS}
    ids = {name: node_ids(name, counts[name]) for name in NODE_SETS}

    tables: dict[str, pa.Table] = {}
    # Papers: feat = cluster centroid + noise, label mostly the cluster's label, year.
    rng = _rng(seed, "paper_features")
    cluster = clusters["paper"]
    centroids = rng.standard_normal((num_clusters, feature_dim), dtype=np.float32)
    feat = rng.standard_normal((num_papers, feature_dim), dtype=np.float32)
    feat += centroids[cluster]
    rng = _rng(seed, "paper_labels")
    cluster_label = rng.integers(0, num_labels, size=num_clusters)
    label = np.where(
        rng.random(num_papers) < 0.8,
        cluster_label[cluster],
        rng.integers(0, num_labels, size=num_papers),
    ).astype(np.int64)
    year_weights = np.linspace(1.0, 2.0, len(YEARS))
    year = rng.choice(YEARS, size=num_papers, p=year_weights / year_weights.sum()).astype(np.int64)
    specs = feature_specs(schema.node_sets["paper"].features, "paper")
    columns = {
        "feat": _fixed_list(feat, specs["feat"]),
        "label": pa.array(label),
        "year": pa.array(year),
    }
    del feat
    tables["paper"] = _table({"#id": ids["paper"]}, columns, specs)

    if all_node_features:
        rng = _rng(seed, "other_features")
        for name in NODE_SETS[1:]:
            specs = feature_specs(schema.node_sets[name].features, name)
            centroids = rng.standard_normal((num_clusters, SMALL_FEATURE_DIM), dtype=np.float32)
            feat = rng.standard_normal((counts[name], SMALL_FEATURE_DIM), dtype=np.float32)
            feat += centroids[clusters[name]]
            tables[name] = _table(
                {"#id": ids[name]}, {"feat": _fixed_list(feat, specs["feat"])}, specs
            )

    for name in _DRAW:
        source, target = EDGE_SETS[name]
        src, tgt = _draw_edges(
            name, _rng(seed, name), clusters, popularity, num_clusters, intra_cluster
        )
        if name == "cites" and hub_fraction > 0 and num_papers > 1:
            rng = _rng(seed, "hub")
            citers = rng.choice(
                num_papers - 1,
                size=min(round(hub_fraction * num_papers), num_papers - 1),
                replace=False,
            )
            src = np.concatenate([src, citers.astype(np.int64) + 1])
            tgt = np.concatenate([tgt, np.zeros(len(citers), dtype=np.int64)])
        src, tgt = _dedup(src, tgt, counts[target], drop_self_loops=source == target)
        columns = {}
        specs = feature_specs(schema.edge_sets[name].features, name)
        if "weight" in specs:
            rng = _rng(seed, "weights")
            columns["weight"] = pa.array((1.0 - rng.random(len(src))).astype(np.float32))
        if "year" in specs:  # the paper end's year: the target of `cites` and `writes`
            columns["year"] = pa.array(year[tgt])
        id_columns = {
            "#source": ids[source].take(pa.array(src)),
            "#target": ids[target].take(pa.array(tgt)),
        }
        del src, tgt
        tables[name] = _table(id_columns, columns, specs)
        schema.edge_sets[name].metadata.cardinality = tables[name].num_rows
    for name, stored in REVERSED.items():
        schema.edge_sets[name].metadata.cardinality = tables[stored].num_rows

    return SyntheticGraph(schema, tables, clusters, counts, num_clusters)


def _is_url(path: str) -> bool:
    return "://" in path


def _join(directory: str, name: str) -> str:
    return (
        directory.rstrip("/") + "/" + name if _is_url(directory) else os.path.join(directory, name)
    )


def write_graph(
    graph: SyntheticGraph, out_dir: str, fmt: str = "tfrecord", num_shards: int = 1
) -> str:
    """Writes every table and `out_dir/graph_schema.pbtxt`; returns the schema's path.

    Tables go to `<set>.<fmt>` (or `<set>.<fmt>@<num_shards>` when num_shards > 1); the
    schema's metadata.filename holds those names relative to out_dir, `written` gets
    the `writes` filename.
    """
    from sampler.io.writers import write_sharded, write_table

    if fmt not in FORMAT_EXTENSIONS:
        raise UserError(f"format must be one of {sorted(FORMAT_EXTENSIONS)}, got '{fmt}'")
    if num_shards < 1:
        raise UserError(f"num_shards must be positive, got {num_shards}")
    if not _is_url(out_dir):
        os.makedirs(out_dir, exist_ok=True)
    schema = graph_schema_pb2.GraphSchema()
    schema.CopyFrom(graph.schema)
    filenames = {}
    for name, table in graph.tables.items():
        where = schema.node_sets[name] if name in schema.node_sets else schema.edge_sets[name]
        specs = feature_specs(where.features, name)
        base = f"{name}.{FORMAT_EXTENSIONS[fmt]}"
        if num_shards > 1:
            written = write_sharded(_join(out_dir, base), table, fmt, specs, num_shards)
            filenames[name] = base + written[written.rindex("@") :]
        else:
            write_table(_join(out_dir, base), table, fmt, specs)
            filenames[name] = base
        where.metadata.filename = filenames[name]
    for name, stored in REVERSED.items():
        schema.edge_sets[name].metadata.filename = filenames[stored]
    path = _join(out_dir, "graph_schema.pbtxt")
    files.write_text(path, text_format.MessageToString(schema))
    return path
