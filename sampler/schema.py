"""Loading a Unigraph GraphSchema and describing its node and edge sets.

Uses the project's GraphSchema class (`sampler.protos.graph_schema_pb2`), wire- and
text-compatible with TF-GNN's. Relative filenames resolve against the schema's directory.
"""

from __future__ import annotations

import dataclasses

from google.protobuf import text_format

from sampler.errors import UserError
from sampler.features import FeatureSpec, feature_specs
from sampler.io import bigquery_source, files
from sampler.io.files import resolve_pattern
from sampler.protos import graph_schema_pb2

SCHEMA_FILENAMES = ("graph_schema.pbtxt", "schema.pbtxt")


@dataclasses.dataclass(frozen=True)
class NodeSetInfo:
    name: str
    features: dict[str, FeatureSpec]
    filename: str | None  # resolved pattern, a BigQuery source, or None for a latent node set


@dataclasses.dataclass(frozen=True)
class EdgeSetInfo:
    name: str
    source: str
    target: str
    features: dict[str, FeatureSpec]
    filename: str  # resolved pattern, or a BigQuery source (sampler.io.bigquery_source)
    reversed: bool  # read the table with #source and #target swapped


@dataclasses.dataclass(frozen=True)
class GraphInfo:
    """The parts of a GraphSchema the readers and samplers need."""

    schema: graph_schema_pb2.GraphSchema
    schema_path: str
    node_sets: dict[str, NodeSetInfo]
    edge_sets: dict[str, EdgeSetInfo]


def find_schema_file(path: str) -> str:
    """`path` itself if it is a file, else the schema pbtxt inside the directory."""
    if path.endswith(".pbtxt") and files.exists(path):
        return path
    for name in SCHEMA_FILENAMES:
        candidate = files.join(path, name)
        if files.exists(candidate):
            return candidate
    matches = files.match(files.join(path, "*.pbtxt")) if files.exists(path) else []
    if len(matches) == 1:
        return matches[0]
    if files.exists(path):
        raise UserError(f"--graph_schema {path}: no single GraphSchema .pbtxt file found there")
    raise UserError(f"--graph_schema {path}: no such file or directory")


def read_text(path: str) -> str:
    try:
        with files.open_stream(path) as f:
            raw = f.read()
        if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
            raise UserError(f"{path}: UTF-16 text (its byte order mark says so); save it as UTF-8")
        # A UTF-8 byte order mark (written by some Windows editors) is accepted, as in CSV tables.
        return raw.decode("utf-8").removeprefix("\ufeff")
    except OSError as e:
        raise UserError(f"{path}: cannot read ({e})") from e
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e


def parse_pbtxt(path: str, message):
    """Parses a text proto; a syntax error becomes one line naming file and line."""
    try:
        return text_format.Parse(read_text(path), message)
    except text_format.ParseError as e:
        raise UserError(f"{path}:{e}") from e


def _table(metadata, schema_dir: str, where: str, features, id_columns) -> str | None:
    """A set's table: its files' resolved pattern, its BigQuery source name, or None."""
    if metadata.HasField("bigquery"):
        if metadata.filename:
            raise UserError(f"{where}: metadata names both a filename and a bigquery table")
        return bigquery_source.from_metadata(metadata.bigquery, where, features, id_columns)
    return resolve_pattern(metadata.filename, schema_dir) if metadata.filename else None


EDGE_TYPES = ("reversed",)  # the values of metadata.extra "edge_type" this project reads


def _is_reversed(edge_set, where: str) -> bool:
    values = [kv.value for kv in edge_set.metadata.extra if kv.key == "edge_type"]
    for value in values:
        if value not in EDGE_TYPES:
            raise UserError(
                f"{where}: metadata.extra edge_type '{value}' is unknown; the only value is "
                f"{', '.join(repr(v) for v in EDGE_TYPES)} (leave it out for forward edges)"
            )
    return bool(values)


def load_graph(path: str) -> GraphInfo:
    """Reads and checks a GraphSchema (a pbtxt file, or a directory holding one)."""
    schema_path = find_schema_file(path)
    schema = parse_pbtxt(schema_path, graph_schema_pb2.GraphSchema())
    schema_dir = schema_path.rsplit("/", 1)[0] if "/" in schema_path else ""
    if not schema.node_sets:
        raise UserError(f"{schema_path}: the schema has no node sets")
    node_sets = {}
    for name in sorted(schema.node_sets):
        ns = schema.node_sets[name]
        where = f"{schema_path}: node set '{name}'"
        features = feature_specs(ns.features, where)
        filename = _table(ns.metadata, schema_dir, where, features, ("#id",))
        if filename is None and features:
            raise UserError(f"{where} has features but no metadata.filename to read them from")
        if "#id" in features:
            raise UserError(f"{where}: '#id' is reserved for the node id column")
        node_sets[name] = NodeSetInfo(name, features, filename)
    edge_sets = {}
    for name in sorted(schema.edge_sets):
        es = schema.edge_sets[name]
        where = f"{schema_path}: edge set '{name}'"
        for end in ("source", "target"):
            if getattr(es, end) not in node_sets:
                raise UserError(f"{where}: {end} '{getattr(es, end)}' is not a node set")
        if not es.metadata.filename and not es.metadata.HasField("bigquery"):
            raise UserError(f"{where} has no metadata.filename")
        features = feature_specs(es.features, where)
        filename = _table(es.metadata, schema_dir, where, features, ("#source", "#target"))
        edge_sets[name] = EdgeSetInfo(
            name, es.source, es.target, features, filename, _is_reversed(es, where)
        )
    return GraphInfo(schema, schema_path, node_sets, edge_sets)
