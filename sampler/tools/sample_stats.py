"""Reading sampled GraphTensor records back, and summarizing them (numpy + protobuf only).

`iter_subgraphs(pattern, specs)` streams the records of every file matching a path, glob
or `base@N` pattern (sampler.io.files) and decodes them with `sampler.sample.encode` (no
TensorFlow ops). `SampleSummary` accumulates, per node set and edge set, the size of
every subgraph (for exact mean / p50 / p95 / max) and per feature its coverage: the
fraction of rows with a value (not all-NaN floats, non-empty strings) and the fraction
with a non-zero value.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator

import numpy as np

from sampler.errors import UserError
from sampler.io import files, tfrecord
from sampler.protos import example_pb2
from sampler.sample.encode import EncodeSpecs, decode_subgraph, encode_specs
from sampler.sample.link import READOUT
from sampler.sample.subgraph import Subgraph

SCHEMA_NAME = "schema.pbtxt"


def sample_files(pattern: str) -> list[str]:
    """The sample files; a finished output may hold no record (empty shards): 0 records."""
    return files.expand_files(pattern, allow_empty=True)


def default_schema(pattern: str) -> str:
    """The output schema the sampler writes beside the samples."""
    first = sample_files(pattern)[0]
    directory = first.rsplit("/", 1)[0] if "/" in first else "."
    return f"{directory}/{SCHEMA_NAME}"


def load_specs(schema: str) -> EncodeSpecs:
    """Encoding specs from a GraphSchema: the output schema beside the samples, or the input
    schema (a file, or a directory holding one)."""
    from sampler.protos import graph_schema_pb2
    from sampler.schema import find_schema_file, parse_pbtxt

    return encode_specs(parse_pbtxt(find_schema_file(schema), graph_schema_pb2.GraphSchema()))


def iter_records(pattern: str) -> Iterator[tuple[str, int, bytes]]:
    """(file, index in the file, serialized record) of every record, files in sorted order."""
    for path in sample_files(pattern):
        with files.open_file(path) as f:
            for index, record in tfrecord.records(path, f):
                yield path, index, record


def iter_subgraphs(pattern: str, specs: EncodeSpecs) -> Iterator[tuple[str, int, int, Subgraph]]:
    """(file, index in file, record bytes, Subgraph) for every record. The first record of
    each file must hold no set the schema lacks (check_record_sets)."""
    checked = None
    for path, index, record in iter_records(pattern):
        if path != checked:
            check_record_sets(path, index, record, specs)
            checked = path
        try:
            subgraph = decode_subgraph(record, specs)
        except ValueError as e:
            raise UserError(f"{path}: record index {index} does not match the schema ({e})") from e
        yield path, index, len(record), subgraph


def record_sets(record: bytes) -> tuple[set[str], set[str]]:
    """(node sets, edge sets) of a serialized record: the names of its `#size` features."""
    keys = example_pb2.Example.FromString(record).features.feature.keys()
    sets: dict[str, set[str]] = {"nodes/": set(), "edges/": set()}
    for key in keys:
        for prefix, names in sets.items():
            if key.startswith(prefix) and key.endswith(_SIZE_SUFFIX):
                names.add(key[len(prefix) : -len(_SIZE_SUFFIX)])
    return sets["nodes/"], sets["edges/"]


_SIZE_SUFFIX = ".#size"


def check_record_sets(path: str, index: int, record: bytes, specs: EncodeSpecs) -> None:
    """UserError when the record holds a node or edge set the schema does not define: the
    decoder would drop it without a word (a link record's `_readout`, read with the input
    graph's schema instead of the output schema written beside the samples)."""
    nodes, edges = record_sets(record)
    unknown_nodes = sorted(nodes - set(specs.node_sets))
    unknown_edges = sorted(edges - set(specs.edge_sets))
    if not unknown_nodes and not unknown_edges:
        return
    fix = "pass the schema the sampler wrote beside the samples (schema.pbtxt) as --graph_schema"
    if READOUT in unknown_nodes:
        raise UserError(
            f"{path}: record {index} is a link-prediction record (node set '{READOUT}') and the"
            f" schema has no node set '{READOUT}': {fix}"
        )
    kind, name = ("node", unknown_nodes[0]) if unknown_nodes else ("edge", unknown_edges[0])
    raise UserError(
        f"{path}: record {index} holds {kind} set '{name}', which the schema does not define: {fix}"
    )


def _row_coverage(values: np.ndarray, kind: str) -> tuple[int, int]:
    """(rows with a value, rows with a non-zero value)."""
    rows = values.shape[0]
    if rows == 0:
        return 0, 0
    flat = values.reshape(rows, -1)
    if kind == "bytes":
        present = (
            np.array([any(len(v) for v in row) for row in flat])
            if flat.shape[1]
            else (np.zeros(rows, bool))
        )
        return int(present.sum()), int(present.sum())
    if flat.shape[1] == 0:
        return 0, 0
    if kind == "float":
        present = ~np.isnan(flat).all(axis=1)
        nonzero = (np.nan_to_num(flat) != 0).any(axis=1)
    else:
        present = np.ones(rows, bool)
        nonzero = (flat != 0).any(axis=1)
    return int(present.sum()), int(nonzero.sum())


class SampleSummary:
    """Streaming summary of subgraphs (see the module docstring)."""

    def __init__(self, specs: EncodeSpecs):
        self.specs = specs
        self.count = 0
        self.bytes: list[int] = []
        self.sizes: dict[str, list[int]] = collections.defaultdict(list)
        self.coverage: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        self.files: set[str] = set()

    def add(self, subgraph: Subgraph, record_bytes: int, path: str = "") -> None:
        self.count += 1
        self.bytes.append(record_bytes)
        self.files.add(path)
        for kind, sets, encodings in (
            ("nodes", subgraph.node_sets, self.specs.node_sets),
            ("edges", subgraph.edge_sets, self.specs.edge_sets),
        ):
            for name, enc in encodings.items():
                rows = sets[name]
                n = len(rows.ids) if kind == "nodes" else len(rows.source)
                self.sizes[f"{kind}/{name}"].append(n)
                for fk in enc.features:
                    present, nonzero = _row_coverage(rows.features[fk.name], fk.spec.kind)
                    acc = self.coverage[f"{kind}/{name}/{fk.name}"]
                    acc[0] += n
                    acc[1] += present
                    acc[2] += nonzero

    def size_arrays(self) -> dict[str, np.ndarray]:
        return {key: np.asarray(values, dtype=np.int64) for key, values in self.sizes.items()}

    def to_json(self) -> dict:
        def describe(values) -> dict:
            a = np.asarray(values, dtype=np.float64)
            if not len(a):
                return {"mean": 0.0, "p50": 0.0, "p95": 0.0, "max": 0, "min": 0}
            return {
                "mean": round(float(a.mean()), 4),
                "p50": float(np.percentile(a, 50)),
                "p95": float(np.percentile(a, 95)),
                "max": int(a.max()),
                "min": int(a.min()),
            }

        out = {
            "count": self.count,
            "files": len(self.files),
            "bytes": {"total": int(sum(self.bytes)), **describe(self.bytes)},
            "node_sets": {},
            "edge_sets": {},
        }
        for kind, encodings in (
            ("nodes", self.specs.node_sets),
            ("edges", self.specs.edge_sets),
        ):
            section = out["node_sets" if kind == "nodes" else "edge_sets"]
            for name, enc in encodings.items():
                sizes = self.sizes.get(f"{kind}/{name}", [])
                entry = describe(sizes)
                entry["total"] = int(sum(sizes))
                entry["empty_subgraphs"] = int(sum(1 for s in sizes if s == 0))
                features = {}
                for fk in enc.features:
                    rows, present, nonzero = self.coverage[f"{kind}/{name}/{fk.name}"]
                    features[fk.name] = {
                        "coverage": round(present / rows, 6) if rows else 0.0,
                        "nonzero": round(nonzero / rows, 6) if rows else 0.0,
                    }
                entry["features"] = features
                section[name] = entry
        return out


def find_subgraph(
    pattern: str, specs: EncodeSpecs, index: int | None = None, seed_id: bytes | None = None
) -> tuple[str, int, int, Subgraph]:
    """The index-th subgraph over all files (sorted), or the first whose seed or sample id
    is `seed_id`: (file, index in file, global index, Subgraph). UserError if none."""
    seen = 0
    for path, in_file, _, subgraph in iter_subgraphs(pattern, specs):
        if index is not None and seen == index:
            return path, in_file, seen, subgraph
        if seed_id is not None and seed_id in (subgraph.seed_id, subgraph.sample_id):
            return path, in_file, seen, subgraph
        seen += 1
    if index is not None:
        raise UserError(f"--index {index}: the samples hold only {seen} subgraphs")
    shown = seed_id.decode(errors="replace") if seed_id is not None else ""
    raise UserError(f"--seed_id {shown}: no subgraph has this seed or sample id")
