"""The files of the partition stage, written the same way by both runners: each part's DGL
files, the node id tables (and, with --layout graphstorm, the raw id mappings), the DGL
partition JSON and the report (cut_report.json).

sampler/beam/partition/write.py's DoFns and the in-memory runner (sampler/partition/in_memory.py)
call these, so an option of the written files reaches both.
"""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq

from sampler.errors import UserError
from sampler.io.files import write_output
from sampler.partition import classes, layout, output_format
from sampler.partition.graph import GraphTypes
from sampler.partition.report import REPORT_NAME, partition_report


def report_settings(config, types: GraphTypes) -> dict:
    """The run's settings, as the report records them (`config`: a PartitionConfig)."""
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
        "split": {t: [s.train, s.val, s.test] for t, s in sorted(types.splits.items())},
        "skipped_features": list(types.skipped_features),
    }


def write_part(types: GraphTypes, out: str, p: int, lay, nodes, edges) -> int:
    """part<p>/*.dgl from the part's InnerNodes and PartEdges (any order); returns p."""
    data = layout.assemble_partition(p, types, lay, list(nodes), list(edges))
    layout.write_partition(out, p, data)
    return p


def node_ids_path(out: str, name: str, shard: int, num_shards: int) -> str:
    return f"{out}/node_ids/{name}/{name}-{shard:05d}-of-{num_shards:05d}.parquet"


def write_node_ids(types: GraphTypes, out: str, name: str, shard: int, num_shards: int, table):
    """Writes a shard's node id table to node_ids/<node set>/<node set>-SSSSS-of-NNNNN.parquet
    and, with --layout graphstorm, its raw id mapping (output_format.raw_id_path); yields the
    paths written."""
    path = node_ids_path(out, name, shard, num_shards)
    with write_output(path) as f:
        pq.write_table(table, f)
    yield path
    if types.layout == "graphstorm":
        raw = output_format.raw_id_path(out, name, shard)
        with write_output(raw) as f:
            pq.write_table(output_format.raw_id_table(table, name), f)
        yield raw


def check_parts(num_parts: int, written) -> None:
    """UserError when a partition got no node (nothing was written for it)."""
    if sorted(written) != list(range(num_parts)):
        missing = sorted(set(range(num_parts)) - set(written))
        raise UserError(
            f"--num_parts {num_parts}: partitions {_ranges(missing)} got no node (the"
            " graph has fewer nodes, or its node sets split unevenly); use fewer parts"
        )


def _ranges(parts: list[int]) -> str:
    if len(parts) > 3:
        return f"{parts[0]}, {parts[1]}, ..., {parts[-1]} ({len(parts)} parts)"
    return ", ".join(map(str, parts))


def finish(
    config, types: GraphTypes, out: str, lay, cut, class_counts: dict, class_table, settings
) -> dict:
    """Once every part is written: `<graph_name>.json` and the report (returned).

    class_counts: {(class, part): nodes}; class_table: the sorted (node type, value) classes."""
    layout.write_json(
        f"{out}/{config.graph_name}.json",
        layout.dgl_config(config.graph_name, types, lay, config.part_method, config.num_hops),
    )
    counts = np.zeros((len(class_table), config.num_parts), dtype=np.int64)
    for (c, p), n in class_counts.items():
        counts[c, p] += n
    names = classes.class_names(
        types.ntypes, types.node_features, config.balance_ntypes, class_table
    )
    report = partition_report(types, lay, cut, names, counts, settings)
    layout.write_json(f"{out}/{REPORT_NAME}", report)
    return report
