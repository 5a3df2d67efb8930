"""Reading a Unigraph's tables as NodeBatch / EdgeBatch (no Beam pipeline code).

Shared by the in-memory sampler and the Beam transforms, which call these per
file on workers.
"""

from __future__ import annotations

import typing
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sampler import ids
from sampler.batches import EdgeBatch, NodeBatch, SeedRows, bytes_array, one_array
from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import bigquery_source, files, parquet_reader, readers
from sampler.node_table import FingerprintCollision
from sampler.schema import EdgeSetInfo, GraphInfo, NodeSetInfo


def table_files(
    pattern: str, columns: tuple[str, ...] | None = None, where: str = ""
) -> list[tuple[str, str]]:
    """(path, format) of every file of a table; UserError when missing or empty.

    A set in BigQuery (`pattern` a bigquery_source name): (stream, "bigquery") of each stream
    of a read session with the canonical `columns` (None: all), `where` ("node set 'paper'")
    naming the set in its messages; readers.read_table reads a stream as it reads a file.
    """
    if bigquery_source.is_source(pattern):
        from sampler.io import bigquery_reader

        return bigquery_reader.stream_units(pattern, columns, where)
    return [(path, files.guess_format(path)) for path in files.expand_files(pattern)]


def set_files(info: NodeSetInfo | EdgeSetInfo) -> list[tuple[str, str]]:
    """table_files of a node or edge set: its streams carry its columns and name."""
    if isinstance(info, NodeSetInfo):
        return table_files(info.filename, ("#id", *info.features), f"node set '{info.name}'")
    columns = ("#source", "#target", *info.features)
    return table_files(info.filename, columns, f"edge set '{info.name}'")


def graph_patterns(graph: GraphInfo) -> dict[str, str]:
    """{table: the sets that read it} of every set with a table, sorted by table (a file
    pattern or a BigQuery source name; two sets may read one table), the sets as messages name
    them: "node set 'paper'", "edge sets 'cites', 'cited_by'"."""
    users: dict[str, dict[str, list[str]]] = {}
    for kind, sets in (("node", graph.node_sets), ("edge", graph.edge_sets)):
        for name, info in sets.items():
            if info.filename:
                users.setdefault(info.filename, {}).setdefault(kind, []).append(name)
    return {
        pattern: " and ".join(
            f"{kind} set{'s' if len(names) > 1 else ''} " + ", ".join(f"'{n}'" for n in names)
            for kind, names in users[pattern].items()
        )
        for pattern in sorted(users)
    }


def display(pattern: str) -> str:
    """A table for messages: its file pattern, or 'BigQuery table p.d.t' / 'BigQuery query ...'."""
    return bigquery_source.describe(pattern) if bigquery_source.is_source(pattern) else pattern


def unit_size(path: str, fmt: str) -> int:
    """Bytes of one of table_files: a file's size, or a stream's share of its session's."""
    if fmt == bigquery_source.UNIT_FORMAT:
        from sampler.io import bigquery_reader

        return bigquery_reader.unit_bytes(path)
    return files.file_size(path)


def read_node_file(
    path: str, fmt: str, info: NodeSetInfo, on_bad: readers.OnBad = None
) -> Iterator[NodeBatch]:
    """Node batches of one file; bad rows go to `on_bad` (without it the first one raises)."""
    for table in readers.read_table(path, fmt, ("#id",), info.features, on_bad=on_bad):
        yield NodeBatch.from_table(table, info.features)


def read_edge_file(
    path: str,
    fmt: str,
    info: EdgeSetInfo,
    latent_ends: tuple[str, ...] = (),
    on_bad: readers.OnBad = None,
    arrow_ends: bool = False,
) -> Iterator[tuple[EdgeBatch, dict]]:
    """Edge batches (source/target swapped for reversed sets), plus the ids at latent ends.

    `latent_ends` lists '#source' / '#target' (as stored in the file) whose node set has no
    table: their distinct ids are returned as feature-less NodeBatches keyed by that column,
    or with `arrow_ends` as a binary Arrow array of the distinct ids in no particular order
    (no fingerprint and no Python object per id yet: `distinct_id_column` of all of a set's
    arrays makes its rows).
    """
    tables = readers.read_table(path, fmt, ("#source", "#target"), info.features, on_bad=on_bad)
    for table in tables:
        ends = {}
        for column in latent_ends:
            values = one_array(table.column(column))
            ends[column] = pc.unique(values) if arrow_ends else distinct_ids(values)
        yield EdgeBatch.from_table(table, info.features, info.reversed), ends


class DistinctIds(typing.NamedTuple):
    """Distinct ids in fingerprint order, the ids still an Arrow binary array."""

    fp: np.ndarray  # uint64, sorted, no two equal
    ids: pa.Array  # binary, the id of each fingerprint

    def __len__(self) -> int:
        return len(self.fp)

    def nodes(self) -> NodeBatch:
        """The feature-less NodeBatch of these ids (a latent node set's rows)."""
        return NodeBatch(self.fp, self.ids.to_numpy(zero_copy_only=False), {})


def distinct_id_column(column: pa.Array | pa.ChunkedArray) -> DistinctIds:
    """The distinct ids of a binary column in fingerprint order: Arrow's hash table finds the
    distinct ids, then only those are fingerprinted and sorted; two ids with one fingerprint
    raise FingerprintCollision, as in build_node_table."""
    unique = pc.unique(column)
    if isinstance(unique, pa.ChunkedArray):
        unique = unique.combine_chunks()
    fp = ids.fingerprint(unique)
    order = np.argsort(fp)  # no two ids share a fingerprint (checked below): any sort will do
    fp = fp[order]
    same = np.flatnonzero(fp[1:] == fp[:-1]) if len(fp) > 1 else np.zeros(0, np.int64)
    if len(same):
        i, j = int(order[same[0]]), int(order[same[0] + 1])
        raise FingerprintCollision(
            f"ids {unique[i].as_py()!r} and {unique[j].as_py()!r} share a 64-bit fingerprint"
        )
    return DistinctIds(fp, unique.take(order))


def distinct_ids(column: pa.Array) -> NodeBatch:
    """The distinct ids of a column as a feature-less NodeBatch in fingerprint order (a latent
    node set's rows: an author of a thousand papers is one row, not a thousand); two ids with
    one fingerprint raise FingerprintCollision, as in build_node_table."""
    return distinct_id_column(column).nodes()


def graph_files(graph: GraphInfo) -> list[tuple[str, str, str, str]]:
    """(kind, set, path, format) of every table file: node sets, then edge sets (the order of
    the dead letters and of the tables built from them)."""
    out = []
    for name, info in graph.node_sets.items():
        if info.filename:
            out += [("node", name, *f) for f in set_files(info)]
    for name, info in graph.edge_sets.items():
        out += [("edge", name, *f) for f in set_files(info)]
    return out


def read_graph_file(
    graph: GraphInfo, kind: str, name: str, path: str, fmt: str, on_bad: readers.OnBad = None
) -> Iterator:
    """The pieces of one of `graph_files`: NodeBatches of a node set's file, or (EdgeBatch,
    {end column: NodeBatch of latent ids}) of an edge set's."""
    if kind == "node":
        return read_node_file(path, fmt, graph.node_sets[name], on_bad)
    info = graph.edge_sets[name]
    return read_edge_file(path, fmt, info, tuple(latent_ends(graph, info)), on_bad)


def latent_ends(graph: GraphInfo, info: EdgeSetInfo) -> dict[str, str]:
    """{file column: node set} for the ends of an edge set whose node set is latent."""
    ends = {}
    file_source, file_target = (
        (info.target, info.source) if info.reversed else (info.source, info.target)
    )
    if graph.node_sets[file_source].filename is None:
        ends["#source"] = file_source
    if graph.node_sets[file_target].filename is None:
        ends["#target"] = file_target
    return ends


def read_seed_ids(pattern: str, on_bad: readers.OnBad = None) -> np.ndarray:
    """All ids of a seed table (the `#id` column), duplicates kept, as bytes objects."""
    return read_seeds(pattern, None, on_bad).ids


# A seeds table's column of each seed's time (a temporal spec's; docs/sampling.md).
SEED_TIME_COLUMN = "seed_time"


def has_seed_times(units: list[tuple[str, str]]) -> bool:
    """Whether a seeds table (its `table_files`) has the time column SEED_TIME_COLUMN, as its
    first file with a header or a record says (every file must then have it)."""
    for path, fmt in units:
        names = readers.columns_of(path, fmt)
        if names is not None:
            return SEED_TIME_COLUMN in names
    return False


def read_seed_file(path: str, fmt: str, kind: str | None, on_bad: readers.OnBad = None):
    """SeedRows of one seeds table file: its `#id` column and, with `kind` ("int" or "float"),
    its time column of that kind (a missing or unparseable time is a bad row)."""
    specs = {} if kind is None else {SEED_TIME_COLUMN: FeatureSpec(SEED_TIME_COLUMN, kind, ())}
    for table in readers.read_table(path, fmt, ("#id",), specs, on_bad=on_bad):
        seed_ids = bytes_array(table.column(0).combine_chunks().to_pylist())
        times = None if kind is None else table.column(1).combine_chunks().to_numpy()
        yield SeedRows(seed_ids, times)


def read_seeds(pattern: str, kind: str | None, on_bad: readers.OnBad = None) -> SeedRows:
    """Every row of a seeds table (duplicates kept): ids, and with `kind` each row's time
    when the table has the time column (`has_seed_times`), else no times."""
    units = table_files(pattern)
    if kind is not None and not has_seed_times(units):
        kind = None
    parts = [rows for path, fmt in units for rows in read_seed_file(path, fmt, kind, on_bad)]
    return SeedRows.concat(parts)


def read_seed_pairs(
    pattern: str,
    on_bad: readers.OnBad = None,
    kind: str | None = None,
    edge_keys: np.ndarray | None = None,
) -> tuple:
    """(source fps, target fps, times or None) of a link seed table's `#source`, `#target`
    columns, and with `kind` its time column when it has one (`has_seed_times`); without one,
    `edge_keys` (`seed_edge_keys`) makes each pair that is no seed edge a bad row."""
    units = table_files(pattern)
    if kind is not None and not has_seed_times(units):
        kind = None
    if kind is not None:
        edge_keys = None
    parts = [
        part
        for path, fmt in units
        for part in read_seed_pair_file(path, fmt, kind, on_bad, edge_keys)
    ]
    empty = np.zeros(0, np.uint64)
    return (
        np.concatenate([p[0] for p in parts]) if parts else empty,
        np.concatenate([p[1] for p in parts]) if parts else empty,
        np.concatenate([p[2] for p in parts]) if parts and kind is not None else None,
    )


def seed_edge_keys(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The sorted pair keys of a seed edge set's (source fps, target fps)."""
    return np.sort(ids.combine(source, target))


def read_seed_pair_file(
    path: str,
    fmt: str,
    kind: str | None,
    on_bad: readers.OnBad = None,
    edge_keys: np.ndarray | None = None,
):
    """(source fps, target fps, times or None) batches of one link seed table file: with
    `kind`, its time column (a missing or unparseable time is a bad row); with `edge_keys`
    (the seed edge set's `seed_edge_keys`, for a temporal spec's seeds without a time
    column), a pair that is no edge has no seed time: a bad row, `seed <source>-><target>`."""
    specs = {} if kind is None else {SEED_TIME_COLUMN: FeatureSpec(SEED_TIME_COLUMN, kind, ())}
    for table in readers.read_table(path, fmt, ("#source", "#target"), specs, on_bad=on_bad):
        columns = [table.column(c).combine_chunks() for c in ("#source", "#target")]
        source, target = (ids.fingerprint(c) for c in columns)
        times = None if kind is None else table.column(2).combine_chunks().to_numpy()
        if edge_keys is not None:
            keys = ids.combine(source, target)
            pos = np.minimum(np.searchsorted(edge_keys, keys), max(len(edge_keys) - 1, 0))
            edge = edge_keys[pos] == keys if len(edge_keys) else np.zeros(len(keys), bool)
            if not edge.all():
                _no_edges(path, columns, np.flatnonzero(~edge), on_bad)
                source, target = source[edge], target[edge]
        yield source, target, times


def _no_edges(path: str, columns, rows: np.ndarray, on_bad: readers.OnBad) -> None:
    for i in rows.tolist():
        pair = "->".join(c[i].as_py().decode("utf-8", "backslashreplace") for c in columns)
        bad = readers.BadRecord(
            path,
            pair,
            "no edge of the seed edge set, so no seed time (give the table a seed_time column)",
            unit="seed",
        )
        if on_bad is None:
            raise UserError(bad.message())
        on_bad(bad)


ID_BYTES = 16  # a node's fingerprint and a short id, per row, in a table file

# A table file's bytes as the TFRecord bytes of the same rows, by format and by what dominates
# the rows (feature values, or ids): the placement rates (sampler/tools/placement_cost.py) are
# measured on TFRecord tables. The same generated MAG graph at 50k papers in each format: edge
# tables 4.4-4.9x smaller in CSV than in TFRecord, the 128-dim paper table 3.0-4.2x larger
# (CSV text) and 1.1x smaller (Parquet); the largest ratio seen of each, so that a prediction
# errs on the side of more memory.
TFRECORD_BYTES_PER_BYTE = {
    ("tfrecord", "features"): 1.0,
    ("tfrecord", "ids"): 1.0,
    ("csv", "features"): 0.35,
    ("csv", "ids"): 5.0,
    ("parquet", "features"): 1.2,
    # A BigQuery read session's estimate of its bytes (BigQuery's own row sizes: 8 bytes a
    # number, 2 + length a string), measured on the same graph through the emulator.
    ("bigquery", "features"): 0.6,
    ("bigquery", "ids"): 1.5,
}
# Parquet compresses ids by 3-22x depending on the data (generated MAG edge tables), so a
# Parquet table of ids is sized by its rows (the file's footer) at the TFRecord bytes of an
# edge row of two short ids: 63.6 bytes measured (MAG cites, 50k papers).
TFRECORD_BYTES_PER_ID_ROW = 64


# Footers read per table at most: a table of thousands of files on gs:// is sized from these.
FOOTERS_READ = 16


def _tfrecord_bytes(
    pattern: str, kind: str, columns: tuple[str, ...] | None = None, where: str = ""
) -> float:
    """A table's size as the TFRecord bytes of its rows (TFRECORD_BYTES_PER_BYTE). A Parquet
    table of ids: by its rows, read in the footers of up to FOOTERS_READ files and scaled by
    bytes to the others (a file that is not Parquet counts by its bytes; the read reports it).
    A set in BigQuery: by the bytes its read session (of `columns`; `where` names the set)
    estimates."""
    if bigquery_source.is_source(pattern):
        units = table_files(pattern, columns, where)
        size = sum(unit_size(path, fmt) for path, fmt in units)
        return size * TFRECORD_BYTES_PER_BYTE[bigquery_source.UNIT_FORMAT, kind]
    tables = [(path, fmt, files.file_size(path)) for path, fmt in table_files(pattern)]
    by_rows = [(path, size) for path, fmt, size in tables if fmt == "parquet" and kind == "ids"]
    footers = [(size, parquet_reader.parquet_rows(path)) for path, size in by_rows[:FOOTERS_READ]]
    footers = [(size, rows) for size, rows in footers if rows is not None]
    if not footers:
        by_rows = []
    counted_by_rows = {path for path, _ in by_rows}
    total = sum(
        size * TFRECORD_BYTES_PER_BYTE[fmt, "features" if fmt == "parquet" else kind]
        for path, fmt, size in tables
        if path not in counted_by_rows
    )
    if by_rows:
        rows_per_byte = sum(rows for _, rows in footers) / max(sum(s for s, _ in footers), 1)
        total += sum(size for _, size in by_rows) * rows_per_byte * TFRECORD_BYTES_PER_ID_ROW
    return total


def size_estimates(graph: GraphInfo) -> tuple[int, int]:
    """(whole graph, graph without node features) in TFRecord-equivalent bytes of tables
    (TFRECORD_BYTES_PER_BYTE, TFRECORD_BYTES_PER_ID_ROW), from the table files' sizes and
    Parquet footers; a reversed edge set's table counted once.

    A node table's feature share is estimated from the schema: row bytes ~ id + feature values.
    """
    whole = features = 0.0
    for info in graph.node_sets.values():
        if not info.filename:
            continue
        width = sum(
            spec.width * (4 if spec.kind == "float" else 8) for spec in info.features.values()
        )
        columns = ("#id", *info.features)
        where = f"node set '{info.name}'"
        size = _tfrecord_bytes(info.filename, "features" if width else "ids", columns, where)
        whole += size
        features += size * width / (width + ID_BYTES)
    edge_sets = {info.filename: info for info in graph.edge_sets.values()}
    for pattern in sorted(edge_sets):
        specs, where = edge_sets[pattern].features, f"edge set '{edge_sets[pattern].name}'"
        columns = ("#source", "#target", *specs)
        whole += _tfrecord_bytes(pattern, "features" if specs else "ids", columns, where)
    return int(whole), int(whole - features)
