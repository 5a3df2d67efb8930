"""Shared helpers of the partition tests: run the CLI, and the original graph in numpy.

`reference_graph` rebuilds the graph the partitions must reproduce straight from the
generator's Arrow tables, independently of the pipeline: original type-wise node ids are
fingerprint ranks, edge ids ranks of (source id, target id, content hash), as documented
in sampler/partition/graph.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
from tensorflow_gnn.proto import graph_schema_pb2

from pipelines import partition as partition_cli
from sampler import ids
from sampler.batches import column_to_numpy
from sampler.features import feature_specs
from sampler.partition.report import REPORT_NAME


def run_partition(schema: str, out: str, *extra: str) -> None:
    argv = ["--graph_schema", schema, "--output_dir", out, "--graph_name", "g", *extra]
    assert partition_cli.main(argv) == 0


# What run_summary.json holds of a run's flags, wall time and machine, not of its result.
RUN_RECORD = ("command", "flags", "wall_seconds", "finished_at", "python", "resources")


def assert_same_outputs(beam: Path, in_memory: Path) -> None:
    """Two output folders of the partition stage hold the same files, byte for byte; only
    run_summary.json's record of the run (RUN_RECORD) may differ, and the dead letters' line
    order (Beam's text sink writes them in no particular order)."""
    a, b = (sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())
            for d in (beam, in_memory))  # fmt: skip
    assert a == b
    assert "g.json" in a and REPORT_NAME in a and "run_summary.json" in a
    for name in a:
        x, y = (beam / name).read_bytes(), (in_memory / name).read_bytes()
        if name == "run_summary.json":
            x, y = ({k: v for k, v in json.loads(z).items() if k not in RUN_RECORD} for z in (x, y))
        elif name.startswith("bad_records-"):
            x, y = sorted(x.splitlines()), sorted(y.splitlines())
        assert x == y, name


@dataclasses.dataclass
class Reference:
    ntypes: list[str]
    etypes: list[tuple[str, str, str]]
    node_ids: dict[str, np.ndarray]  # ntype -> bytes ids in original-id order
    node_feats: dict[str, dict[str, np.ndarray]]
    edges: dict[str, tuple[np.ndarray, np.ndarray]]  # "s:r:d" -> (src, dst) by original eid
    edge_feats: dict[str, dict[str, np.ndarray]]


def reference_graph(schema: graph_schema_pb2.GraphSchema, tables: dict[str, pa.Table]):
    """The original graph with original ids, from a schema and its (in-memory) tables."""
    reversed_of = {}
    for name, es in schema.edge_sets.items():
        if any(kv.key == "edge_type" and kv.value == "reversed" for kv in es.metadata.extra):
            stored = [n for n in tables if n in schema.edge_sets and n != name]
            reversed_of[name] = [
                n
                for n in stored
                if schema.edge_sets[n].source == es.target
                and schema.edge_sets[n].target == es.source
            ][0]
    node_ids = {}
    node_feats = {}
    for name in sorted(schema.node_sets):
        if name in tables:
            raw = tables[name].column("#id").combine_chunks()
        else:  # latent: the ids seen at its ends of the edge sets
            seen = []
            for ename, es in schema.edge_sets.items():
                table = tables[reversed_of.get(ename, ename)]
                rev = ename in reversed_of
                if es.source == name:
                    seen.append(table.column("#target" if rev else "#source"))
                if es.target == name:
                    seen.append(table.column("#source" if rev else "#target"))
            raw = pa.concat_arrays([c.combine_chunks() for c in seen])
        fp = ids.fingerprint(raw)
        fp_unique, first = np.unique(fp, return_index=True)
        values = np.array(raw.to_pylist(), dtype=object)[first]
        node_ids[name] = values
        specs = feature_specs(schema.node_sets[name].features, name)
        node_feats[name] = {
            k: column_to_numpy(tables[name].column(k), s)[first] for k, s in specs.items()
        }
    fps = {
        name: ids.fingerprint(pa.array(list(v), type=pa.binary())) for name, v in node_ids.items()
    }
    etypes = sorted((es.source, name, es.target) for name, es in schema.edge_sets.items())
    edges, edge_feats = {}, {}
    for src_t, name, dst_t in etypes:
        table = tables[reversed_of.get(name, name)]
        a, b = table.column("#source"), table.column("#target")
        if name in reversed_of:
            a, b = b, a
        src = np.searchsorted(fps[src_t], ids.fingerprint(a))
        dst = np.searchsorted(fps[dst_t], ids.fingerprint(b))
        specs = feature_specs(schema.edge_sets[name].features, name)
        feats = {k: column_to_numpy(table.column(k), s) for k, s in specs.items()}
        order = np.lexsort((ids.row_fingerprint(feats, len(src)), dst, src))
        key = f"{src_t}:{name}:{dst_t}"
        edges[key] = (src[order], dst[order])
        edge_feats[key] = {k: v[order] for k, v in feats.items()}
    return Reference(sorted(node_ids), etypes, node_ids, node_feats, edges, edge_feats)
