"""Degree statistics of a Unigraph in one streaming pass, and their cache file.

`compute_degree_stats` reads every edge table once (id columns only, through
`sampler.io.graph_tables`), counts the out- and in-degree of every node per edge set
(keyed by the node's 64-bit fingerprint), reads the `#id` column of every node
table to count its nodes, and reads the first rows of every table with features
to measure what a feature costs in a tf.Example. Memory is O(distinct nodes),
never O(edges). A table shared by an edge set and its reversed twin is read once.

The result (`DegreeStats`) is compact and independent of any SamplingSpec:
  * per node set: node count, mean id length, per-feature bytes per row;
  * per edge set: edge count, out-degree histogram (over source nodes, zeros included)
    and in-degree histogram (over target nodes);
  * per node set S, for every weight w in {uniform} + {in-degree along each edge set
    into S} and every edge set B out of S: the out_B-degree histogram of S's nodes
    weighted by w. A node reached by following an edge of A is drawn in proportion to
    its A-in-degree, so these give the expected fan-out of a frontier exactly;
  * per node set: the joint in-degree table (one row per distinct vector of in-degrees
    along the edge sets into S), for the expected number of distinct nodes hit.
Histograms are sparse: degrees up to 64 are exact, larger ones fall in geometric bins
2**(1/16) wide (about 4%), represented by their weighted mean degree.

Cache: `stats_cache_path(schema_path)` is `<schema file>.degree_stats.json`, beside the
graph's schema. It records the schema's text hash and the path, size and modification
time of every table file; `load_cached_stats` ignores a cache whose record differs
(a table was rewritten, added or removed), so a stale cache is never used.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sampler import ids
from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import bigquery_source, files, graph_tables, no_follow, readers
from sampler.schema import GraphInfo, read_text

STATS_VERSION = 1
EXACT_DEGREES = 64
BINS_PER_OCTAVE = 16
UNIFORM = "#uniform"
FEATURE_SAMPLE_ROWS = 512
PROBE_POOL = 1024  # ids kept per node set for probes
_MERGE_AT = 1 << 22  # partial count entries kept before merging

Histogram = list[tuple[float, float]]  # (degree, weight) pairs, sorted by degree


# --------------------------------------------------------------------------- counting


class _Counts:
    """Occurrences of uint64 keys, accumulated batch by batch in O(distinct keys) memory."""

    def __init__(self):
        self._keys: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._pending = 0

    def add(self, keys: np.ndarray) -> None:
        if len(keys) == 0:
            return
        unique, counts = np.unique(keys, return_counts=True)
        self._keys.append(unique)
        self._counts.append(counts.astype(np.int64))
        self._pending += len(unique)
        if self._pending > _MERGE_AT and len(self._keys) > 1:
            self._merge()

    def _merge(self) -> None:
        keys = np.concatenate(self._keys)
        counts = np.concatenate(self._counts)
        unique, inverse = np.unique(keys, return_inverse=True)
        self._keys = [unique]
        self._counts = [
            np.bincount(inverse, weights=counts, minlength=len(unique)).astype(np.int64)
        ]
        self._pending = len(unique)

    def result(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted unique keys, counts)."""
        if not self._keys:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        if len(self._keys) > 1:
            self._merge()
        return self._keys[0], self._counts[0]


class BottomK:
    """A deterministic uniform sample of distinct ids: the k smallest hashes of fingerprints."""

    SALT = np.uint64(0x2545F4914F6CDD1D)

    def __init__(self, k: int):
        self.k = k
        self.keys = np.zeros(0, np.uint64)
        self.ids = np.zeros(0, dtype=object)

    def add(self, fps: np.ndarray, id_column) -> None:
        if len(fps) == 0 or self.k == 0:
            return
        h = ids.mix(np.asarray(fps, dtype=np.uint64) ^ self.SALT)
        mask = np.ones(len(h), bool) if len(self.keys) < self.k else h < self.keys[-1]
        if not mask.any():
            return
        picked = np.flatnonzero(mask)
        if len(picked) > self.k:
            picked = picked[np.argpartition(h[picked], self.k - 1)[: self.k]]
        values = np.empty(len(picked), dtype=object)
        values[:] = id_column.take(pa.array(picked)).to_pylist()
        keys = np.concatenate([self.keys, h[picked]])
        all_ids = np.concatenate([self.ids, values])
        keys, first = np.unique(keys, return_index=True)
        self.keys, self.ids = keys[: self.k], all_ids[first][: self.k]


def _bin(degrees: np.ndarray) -> np.ndarray:
    """Bin index of each degree: the degree itself up to EXACT_DEGREES, then geometric."""
    degrees = np.asarray(degrees, dtype=np.float64)
    out = degrees.copy()
    big = degrees > EXACT_DEGREES
    out[big] = EXACT_DEGREES + np.ceil(
        BINS_PER_OCTAVE * np.log2(degrees[big] / EXACT_DEGREES) + 1e-9
    )
    return out.astype(np.int64)


def histogram(degrees: np.ndarray, weights: np.ndarray | None = None) -> Histogram:
    """Sparse weighted histogram of degrees: [(weighted mean degree of the bin, weight)]."""
    degrees = np.asarray(degrees, dtype=np.float64)
    weights = np.ones(len(degrees)) if weights is None else np.asarray(weights, np.float64)
    keep = weights > 0
    degrees, weights = degrees[keep], weights[keep]
    if len(degrees) == 0:
        return []
    bins, inverse = np.unique(_bin(degrees), return_inverse=True)
    total = np.bincount(inverse, weights=weights, minlength=len(bins))
    mean = np.bincount(inverse, weights=weights * degrees, minlength=len(bins)) / total
    return [(float(d), float(w)) for d, w in zip(mean, total, strict=True)]


# --------------------------------------------------------------------------- result


@dataclasses.dataclass
class NodeSetStats:
    count: int  # nodes (table rows, or distinct ids seen in edges for a latent set)
    id_bytes: float  # mean length of an id
    feature_bytes: dict[str, float]  # tf.Example value bytes per row, per feature
    in_sets: list[str]  # edge sets into this node set, in joint-table column order
    joint_in: list[tuple[list[float], float]]  # (in-degree vector, nodes), zero vector omitted
    fanout: dict[str, dict[str, Histogram]]  # weight (UNIFORM or in-edge set) -> out-set -> hist
    sample_ids: list[str]  # hex of up to PROBE_POOL ids, a uniform deterministic sample


@dataclasses.dataclass
class EdgeSetStats:
    source: str
    target: str
    count: int  # edges
    out_hist: Histogram  # over all source-set nodes, zero degrees included
    in_hist: Histogram  # over all target-set nodes, zero degrees included
    feature_bytes: dict[str, float]


@dataclasses.dataclass
class DegreeStats:
    node_sets: dict[str, NodeSetStats]
    edge_sets: dict[str, EdgeSetStats]
    signature: dict  # what the cache was computed from (schema hash and table files)

    def to_json(self) -> dict:
        return {
            "version": STATS_VERSION,
            "signature": self.signature,
            "node_sets": {k: dataclasses.asdict(v) for k, v in self.node_sets.items()},
            "edge_sets": {k: dataclasses.asdict(v) for k, v in self.edge_sets.items()},
        }

    @classmethod
    def from_json(cls, data: dict) -> DegreeStats:
        def hist(pairs):
            return [(float(d), float(w)) for d, w in pairs]

        node_sets = {}
        for name, v in data["node_sets"].items():
            node_sets[name] = NodeSetStats(
                count=int(v["count"]),
                id_bytes=float(v["id_bytes"]),
                feature_bytes={k: float(x) for k, x in v["feature_bytes"].items()},
                in_sets=list(v["in_sets"]),
                joint_in=[([float(x) for x in vec], float(n)) for vec, n in v["joint_in"]],
                fanout={
                    w: {b: hist(h) for b, h in outs.items()} for w, outs in v["fanout"].items()
                },
                sample_ids=list(v["sample_ids"]),
            )
        edge_sets = {
            name: EdgeSetStats(
                source=v["source"],
                target=v["target"],
                count=int(v["count"]),
                out_hist=hist(v["out_hist"]),
                in_hist=hist(v["in_hist"]),
                feature_bytes={k: float(x) for k, x in v["feature_bytes"].items()},
            )
            for name, v in data["edge_sets"].items()
        }
        return cls(node_sets, edge_sets, data["signature"])


# --------------------------------------------------------------------------- signature / cache


def stats_cache_path(schema_path: str) -> str:
    """Where the cache lives: beside the schema, `<schema file>.degree_stats.json`."""
    return schema_path + ".degree_stats.json"


def graph_signature(graph: GraphInfo) -> dict:
    """Schema text hash plus (path, size, mtime) of every table file: changes when they do."""
    tables = {}
    for pattern, where in graph_tables.graph_patterns(graph).items():
        if bigquery_source.is_source(pattern):  # a set in BigQuery: its table's version
            from sampler.io import bigquery_reader

            tables[pattern] = bigquery_reader.signature(pattern, where)
            continue
        entries = files.stat_files(files.expand_files(pattern))
        tables[pattern] = sorted([path, size, mtime] for path, size, mtime in entries)
    schema_hash = hashlib.sha256(read_text(graph.schema_path).encode()).hexdigest()
    return {"schema_sha256": schema_hash, "tables": tables}


def load_cached_stats(path: str, signature: dict) -> DegreeStats | None:
    """The cached stats if the cache exists and matches `signature`, else None."""
    if not files.exists(path):
        return None
    try:  # a local cache: never a read that waits (a FIFO there is a UserError)
        text = read_text(path) if files.has_scheme(path) else no_follow.read_regular(path)
        data = json.loads(text)
    except (UserError, OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    if data.get("version") != STATS_VERSION or data.get("signature") != signature:
        return None
    try:
        return DegreeStats.from_json(data)
    except (KeyError, TypeError, ValueError):
        return None


def save_stats(path: str, stats: DegreeStats) -> None:
    with files.create_file(path) as f:
        f.write(json.dumps(stats.to_json(), sort_keys=True).encode())


# --------------------------------------------------------------------------- feature costs


def _varint_len(values: np.ndarray) -> np.ndarray:
    """Bytes of the protobuf varint of each int64 (negative values take 10)."""
    v = np.asarray(values, dtype=np.int64).astype(np.uint64)
    out = np.ones(v.shape, dtype=np.int64)
    for shift in range(7, 64, 7):
        out += (v >> np.uint64(shift)) > 0
    return out


def value_bytes(column, spec: FeatureSpec) -> float:
    """Mean bytes the values of one row take inside a tf.Example list (without framing)."""
    rows = len(column)
    if rows == 0:
        return 0.0
    if spec.kind == "float":
        return 4.0 * spec.width
    flat = column.flatten() if spec.shape else column
    if isinstance(flat, pa.ChunkedArray):
        flat = flat.combine_chunks()
    if spec.kind == "int":
        return float(_varint_len(flat.to_numpy(zero_copy_only=False)).sum()) / rows
    lengths = pc.binary_length(flat).to_numpy(zero_copy_only=False).astype(np.int64)
    return float((1 + _varint_len(lengths) + lengths).sum()) / rows


def _feature_costs(
    pattern: str, specs: dict[str, FeatureSpec], id_columns, where: str
) -> dict[str, float]:
    if not specs:
        return {}
    path, fmt = graph_tables.table_files(pattern, (*id_columns, *specs), where)[0]
    for table in readers.read_table(path, fmt, id_columns, specs, FEATURE_SAMPLE_ROWS):
        return {name: value_bytes(table.column(name), spec) for name, spec in specs.items()}
    return {name: 4.0 * spec.width if spec.kind == "float" else 0.0 for name, spec in specs.items()}


# --------------------------------------------------------------------------- the pass


def _mean_len(column) -> tuple[int, int]:
    lengths = pc.binary_length(column)
    return int(pc.sum(lengths).as_py() or 0), len(column)


def compute_degree_stats(
    graph: GraphInfo,
    progress: Callable[[str, int], None] | None = None,
    signature: dict | None = None,
) -> DegreeStats:
    """One streaming pass over the graph's tables (see the module docstring).

    `progress(table, rows)` is called after every batch with the rows read so far.
    """
    report = progress or (lambda table, rows: None)
    signature = graph_signature(graph) if signature is None else signature
    # Edge tables: counts per (file pattern, column); one read per pattern.
    column_counts: dict[tuple[str, str], _Counts] = {}
    id_length = collections.defaultdict(lambda: [0, 0])  # node set -> [bytes, ids]
    edge_rows: dict[str, int] = {}
    pools = {name: BottomK(PROBE_POOL) for name in graph.node_sets}
    patterns = sorted({info.filename for info in graph.edge_sets.values()})
    for pattern in patterns:
        users = [info for info in graph.edge_sets.values() if info.filename == pattern]
        for column in ("#source", "#target"):
            column_counts[(pattern, column)] = _Counts()
        rows = 0
        where = f"edge set '{users[0].name}'"
        for path, fmt in graph_tables.table_files(pattern, ("#source", "#target"), where):
            for table in readers.read_table(path, fmt, ("#source", "#target"), {}):
                for column in ("#source", "#target"):
                    col = table.column(column).combine_chunks()
                    fps = ids.fingerprint(col)
                    column_counts[(pattern, column)].add(fps)
                    info = users[0]
                    file_end = (
                        ("target" if column == "#source" else "source")
                        if info.reversed
                        else ("source" if column == "#source" else "target")
                    )
                    total, count = _mean_len(col)
                    end_set = getattr(info, file_end)
                    if not graph.node_sets[end_set].filename:
                        pools[end_set].add(fps, col)
                    acc = id_length[end_set]
                    acc[0] += total
                    acc[1] += count
                rows += table.num_rows
                report(graph_tables.display(pattern), rows)
        edge_rows[pattern] = rows

    # Node tables: distinct ids.
    node_keys: dict[str, np.ndarray] = {}
    for name, info in graph.node_sets.items():
        if not info.filename:
            continue
        counts = _Counts()
        rows = 0
        for path, fmt in graph_tables.table_files(info.filename, ("#id",), f"node set '{name}'"):
            for column in readers.read_ids(path, fmt):
                fps = ids.fingerprint(column)
                counts.add(fps)
                pools[name].add(fps, column)
                total, count = _mean_len(column)
                id_length[name][0] += total
                id_length[name][1] += count
                rows += len(column)
                report(graph_tables.display(info.filename), rows)
        node_keys[name] = counts.result()[0]

    def degrees(edge_set: str, end: str) -> tuple[np.ndarray, np.ndarray]:
        info = graph.edge_sets[edge_set]
        file_source = end == "source"
        if info.reversed:
            file_source = not file_source
        return column_counts[(info.filename, "#source" if file_source else "#target")].result()

    node_sets = {}
    edge_hists: dict[str, dict] = {name: {} for name in graph.edge_sets}
    for name, info in graph.node_sets.items():
        in_sets = [e for e in sorted(graph.edge_sets) if graph.edge_sets[e].target == name]
        out_sets = [e for e in sorted(graph.edge_sets) if graph.edge_sets[e].source == name]
        parts = [degrees(e, "target")[0] for e in in_sets]
        parts += [degrees(e, "source")[0] for e in out_sets]
        if name in node_keys:
            universe = node_keys[name]
        else:
            universe = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint64)
        n = len(universe)

        def column(keys_counts, universe=universe, n=n):
            keys, counts = keys_counts
            out = np.zeros(n, dtype=np.int64)
            if n and len(keys):
                pos = np.minimum(np.searchsorted(universe, keys), n - 1)
                ok = universe[pos] == keys
                out[pos[ok]] = counts[ok]
            return out

        ins = {e: column(degrees(e, "target")) for e in in_sets}
        outs = {e: column(degrees(e, "source")) for e in out_sets}
        fanout = {UNIFORM: {b: histogram(outs[b]) for b in out_sets}}
        for a in in_sets:
            fanout[a] = {b: histogram(outs[b], ins[a]) for b in out_sets}
        for b in out_sets:
            edge_hists[b]["out"] = histogram(outs[b])
        for a in in_sets:
            edge_hists[a]["in"] = histogram(ins[a])
        joint = []
        if in_sets and n:
            matrix = np.stack([_bin(ins[a]) for a in in_sets], axis=1)
            values = np.stack([ins[a] for a in in_sets], axis=1).astype(np.float64)
            nonzero = matrix.any(axis=1)
            matrix, values = matrix[nonzero], values[nonzero]
            if len(matrix):
                rows_, inverse, counts = np.unique(
                    matrix, axis=0, return_inverse=True, return_counts=True
                )
                inverse = inverse.reshape(-1)
                sums = np.zeros((len(rows_), len(in_sets)))
                np.add.at(sums, inverse, values)
                means = sums / counts[:, None]
                joint = [
                    ([float(x) for x in vec], float(c))
                    for vec, c in zip(means, counts, strict=True)
                ]
        length = id_length.get(name, [0, 0])
        specs = info.features
        node_sets[name] = NodeSetStats(
            count=int(n),
            id_bytes=length[0] / length[1] if length[1] else 0.0,
            feature_bytes=(
                _feature_costs(info.filename, specs, ("#id",), f"node set '{name}'")
                if info.filename
                else {}
            ),
            in_sets=in_sets,
            joint_in=joint,
            fanout=fanout,
            sample_ids=[bytes(v).hex() for v in pools[name].ids],
        )
    edge_sets = {}
    for name, info in graph.edge_sets.items():
        edge_sets[name] = EdgeSetStats(
            source=info.source,
            target=info.target,
            count=int(edge_rows[info.filename]),
            out_hist=edge_hists[name].get("out", []),
            in_hist=edge_hists[name].get("in", []),
            feature_bytes=_feature_costs(
                info.filename, info.features, ("#source", "#target"), f"edge set '{name}'"
            ),
        )
    return DegreeStats(node_sets, edge_sets, signature)


def degree_stats(
    graph: GraphInfo,
    cache: str | None = "auto",
    refresh: bool = False,
    progress: Callable[[str, int], None] | None = None,
) -> tuple[DegreeStats, str]:
    """Stats from the cache when it is current, else computed (and cached when possible).

    cache: "auto" (beside the schema), a path, or None (no cache). Returns (stats, where
    they came from, as a phrase for the user).
    """
    path = stats_cache_path(graph.schema_path) if cache == "auto" else cache
    signature = graph_signature(graph)
    if path and not refresh:
        cached = load_cached_stats(path, signature)
        if cached is not None:
            return cached, f"read from the cache {path}"
    stats = compute_degree_stats(graph, progress, signature)
    if not path:
        return stats, "computed in one pass (no cache)"
    try:
        save_stats(path, stats)
    except UserError as e:  # read-only location: the estimate still works
        return stats, f"computed in one pass (not cached: {e})"
    return stats, f"computed in one pass, cached in {path}"
