"""Write: new ids, the DGL files of every part, the node id tables, the JSON and the report
(output_format.py: --layout graphstorm also writes raw_id_mappings/).

Rows are routed to their parts by sampler/partition/to_parts.py; the files are laid out by
sampler/partition/layout.py (format: docs/DGL_FORMAT.md).
"""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam
import numpy as np
import pyarrow.parquet as pq

from sampler.beam import join
from sampler.beam.join import Join
from sampler.beam.partition import combiners
from sampler.beam.partition.config import PartitionConfig, key_shard
from sampler.beam.partition.halo import HaloHops
from sampler.beam.partition.new_ids import NewIdsInputs, NumberNodesAndEdges
from sampler.errors import UserError
from sampler.io.files import write_output
from sampler.partition import classes, layout, output_format, to_parts
from sampler.partition.graph import GraphTypes
from sampler.partition.new_ids import EdgesWithEnds
from sampler.partition.report import REPORT_NAME, partition_report


class WriteInputs(NamedTuple):
    nodes: beam.PCollection  # NodeShard
    edges: beam.PCollection  # EdgeShard
    starts: beam.PCollection  # singleton [T, S + 1]
    parts: beam.PCollection  # ((node type, shard), parts)
    info: beam.PCollection  # NodeInfo
    class_table: beam.PCollection  # singleton sorted list of (node type, value)


class _EdgesToParts(beam.DoFn):
    """Edges -> (part, PartEdges) of hop 1, pickled (join.tagged) for GroupByPart; with
    --num_hops > 1 also the inputs of HaloHops: in-edges by target shard and hop-1 HALO
    pairs by source shard."""

    def __init__(self, types: GraphTypes, num_hops: int):
        self._src_type = [types.ntype_id(e[0]) for e in types.etypes]
        self._dst_type = [types.ntype_id(e[2]) for e in types.etypes]
        self._hops = num_hops

    def process(self, ends: EdgesWithEnds, lay):
        edges = ends.edges
        new_id, _ = lay.edge_ids(edges.etype, edges.shard, ends.dst_part)
        if self._hops > 1:
            src_t, dst_t = self._src_type[edges.etype], self._dst_type[edges.etype]
            for s, in_edges in to_parts.halo_in_edges(ends, new_id, src_t):
                yield beam.pvalue.TaggedOutput("in_edges", ((dst_t, s), in_edges))
            pairs = to_parts.halo_pairs(ends)
            if pairs is not None:
                yield beam.pvalue.TaggedOutput("halo", ((src_t, edges.shard), pairs))
        for part, piece in to_parts.edges_to_parts(ends, new_id):
            yield join.tagged(part, 0, piece)


class _NodesToParts(beam.DoFn):
    """(part, InnerNodes) of a node shard, and its node id table (tag "node_ids")."""

    def process(self, keyed):
        (t, s), groups = keyed
        (shard,) = groups["nodes"]
        (node,) = groups["layout"]
        yield from to_parts.nodes_to_parts(shard, node)
        yield beam.pvalue.TaggedOutput("node_ids", ((t, s), to_parts.node_id_table(shard, node)))


class _WriteNodeIds(beam.DoFn):
    """Writes a shard's node id table to node_ids/<node set>/<node set>-SSSSS-of-NNNNN.parquet
    and, with --layout graphstorm, its raw id mapping (output_format.raw_id_path)."""

    def __init__(self, types: GraphTypes, out: str, num_shards: int):
        self._types = types
        self._out = out
        self._shards = num_shards

    def process(self, keyed):
        (t, s), table = keyed
        name = self._types.ntypes[t]
        path = f"{self._out}/node_ids/{name}/{name}-{s:05d}-of-{self._shards:05d}.parquet"
        with write_output(path) as f:
            pq.write_table(table, f)
        yield path
        if self._types.layout == "graphstorm":
            raw = output_format.raw_id_path(self._out, name, s)
            with write_output(raw) as f:
                pq.write_table(output_format.raw_id_table(table, name), f)
            yield raw


class _WritePart(beam.DoFn):
    """A part with its edges (grouped) and its nodes (a side input by part)."""

    def __init__(self, types: GraphTypes, out: str):
        self._types = types
        self._out = out

    def process(self, keyed, lay, nodes):
        p, groups = keyed
        yield _write_part(self._types, self._out, p, lay, nodes[p], groups["edges"])


class _WriteEdgelessParts(beam.DoFn):
    """Once the parts with edges are written: the parts that have nodes and no edge."""

    def __init__(self, types: GraphTypes, out: str):
        self._types = types
        self._out = out

    def process(self, _, lay, nodes, with_edges):
        for p in sorted(set(range(lay.num_parts)) - set(with_edges)):
            if nodes[p]:
                yield _write_part(self._types, self._out, p, lay, nodes[p], [])


def _write_part(types: GraphTypes, out: str, p: int, lay, nodes, edges) -> int:
    data = layout.assemble_partition(p, types, lay, list(nodes), list(edges))
    layout.write_partition(out, p, data)
    return p


class _Finish(beam.DoFn):
    """Once every part is written: the partition config JSON and the report."""

    def __init__(self, config: PartitionConfig, types: GraphTypes, out: str, settings: dict):
        self._config = config
        self._types = types
        self._out = out
        self._settings = settings

    def process(self, _, lay, cut, class_counts, class_table, written, node_ids):
        config, types = self._config, self._types
        if sorted(written) != list(range(config.num_parts)):
            missing = sorted(set(range(config.num_parts)) - set(written))
            raise UserError(
                f"--num_parts {config.num_parts}: partitions {_ranges(missing)} got no node (the"
                " graph has fewer nodes, or its node sets split unevenly); use fewer parts"
            )
        layout.write_json(
            f"{self._out}/{config.graph_name}.json",
            layout.dgl_config(config.graph_name, types, lay, config.part_method, config.num_hops),
        )
        counts = np.zeros((len(class_table), config.num_parts), dtype=np.int64)
        for (c, p), n in class_counts.items():
            counts[c, p] += n
        names = classes.class_names(
            types.ntypes, types.node_features, config.balance_ntypes, class_table
        )
        report = partition_report(types, lay, cut, names, counts, self._settings)
        layout.write_json(f"{self._out}/{REPORT_NAME}", report)
        yield report


def _ranges(parts: list[int]) -> str:
    if len(parts) > 3:
        return f"{parts[0]}, {parts[1]}, ..., {parts[-1]} ({len(parts)} parts)"
    return ", ".join(map(str, parts))


def _tag_edges(keyed):
    """(part, PartEdges) -> what GroupByPart groups (join.tagged)."""
    return join.tagged(keyed[0], 0, keyed[1])


def _class_part_counts(keyed) -> dict:
    _, groups = keyed
    (info,) = groups["info"]
    (parts,) = groups["parts"]
    return classes.class_part_counts(info.classes, parts)


class WritePartitions(beam.PTransform):
    """WriteInputs -> the report (singleton dict), once the DGL partition folder is written."""

    def __init__(self, config: PartitionConfig, types: GraphTypes, output_dir: str):
        super().__init__()
        self._config = config
        self._types = types
        self._out = output_dir.rstrip("/")

    def _settings(self) -> dict:
        """The run's settings, as the report records them."""
        config = self._config
        lp = config.part_method == "lp"
        return {
            "graph_name": config.graph_name,
            "part_method": config.part_method,
            "num_parts": config.num_parts,
            "seed": config.seed,
            "balance_ntypes": config.balance_ntypes,
            "balance_edges": config.balance_edges,
            "num_hops": config.num_hops,
            "lp_rounds": config.lp_rounds if lp else 0,
            "lp_cluster_rounds": config.lp_cluster_rounds if lp else 0,
            "layout": config.layout,
            "split": {t: [s.train, s.val, s.test] for t, s in sorted(self._types.splits.items())},
            "skipped_features": list(self._types.skipped_features),
        }

    def expand(self, inputs: WriteInputs):
        config, types, out = self._config, self._types, self._out
        new = NewIdsInputs(inputs.edges, inputs.starts, inputs.parts) | "NewIds" >> (
            NumberNodesAndEdges(config, types)
        )
        routed = new.edges | "EdgesToParts" >> beam.ParDo(
            _EdgesToParts(types, config.num_hops), beam.pvalue.AsSingleton(new.layout)
        ).with_outputs("in_edges", "halo", main="edges")
        part_edges = routed.edges
        if config.num_hops > 1:
            hops = (routed.in_edges, routed.halo) | "HaloHops" >> HaloHops(
                config.num_hops, config.num_parts
            )
            hops = hops | "PickleHopEdges" >> beam.Map(_tag_edges)
            part_edges = (part_edges, hops) | "AllPartEdges" >> beam.Flatten()
        part_nodes = (
            {"nodes": inputs.nodes | "KeyNodes" >> beam.Map(key_shard), "layout": new.node_layout}
            | "JoinNodes" >> Join()
            | "NodesToParts" >> beam.ParDo(_NodesToParts()).with_outputs("node_ids", main="parts")
        )
        node_ids = part_nodes.node_ids | "WriteNodeIds" >> beam.ParDo(
            _WriteNodeIds(types, out, config.num_shards)
        )
        # The nodes of a part are a side input (by part), not a second input of the part's
        # group: the local runner copies every input of a multi-input Flatten once more.
        nodes_by_part = beam.pvalue.AsMultiMap(part_nodes.parts)
        with_edges = (
            part_edges
            | "GroupByPart" >> join.Grouped(("edges",))
            | "WriteParts"
            >> beam.ParDo(
                _WritePart(types, out), beam.pvalue.AsSingleton(new.layout), nodes_by_part
            )
        )
        edgeless = (
            with_edges.pipeline
            | "EdgelessOnce" >> beam.Create([None])
            | "WriteEdgelessParts"
            >> beam.ParDo(
                _WriteEdgelessParts(types, out),
                beam.pvalue.AsSingleton(new.layout),
                nodes_by_part,
                beam.pvalue.AsList(with_edges),
            )
        )
        written = (with_edges, edgeless) | "WrittenParts" >> beam.Flatten()
        class_counts = (
            {"info": inputs.info | "KeyInfo" >> beam.Map(key_shard), "parts": inputs.parts}
            | "JoinClasses" >> Join()
            | "ClassParts" >> beam.Map(_class_part_counts)
            | "SumClassParts" >> combiners.CombineAll(combiners.MergeCounts())
        )
        return (
            written.pipeline
            | "Once" >> beam.Create([None])
            | "Finish"
            >> beam.ParDo(
                _Finish(config, types, out, self._settings()),
                beam.pvalue.AsSingleton(new.layout),
                beam.pvalue.AsSingleton(new.cut),
                beam.pvalue.AsSingleton(class_counts),
                beam.pvalue.AsSingleton(inputs.class_table),
                beam.pvalue.AsList(written),
                beam.pvalue.AsList(node_ids),  # the Finish comes after every write
            )
        )
