"""Prints one sampled subgraph readably, and can draw it as a PNG.

  python -m pipelines.show --samples 'out/samples-*' [--index N | --seed_id ID]
      [--graph_schema S] [--max_items 10] [--png out.png]

Prints the context (seed and sample id), every node set with its node ids and features
(long vectors truncated), and every edge set as `src_id -> dst_id` lines; the seed is
marked `*` (for a link-prediction record, the seed edge: both endpoints). Records holding a set
the schema lacks (a link record's `_readout` with the input graph's schema) are refused. --index counts records over all files in sorted order (default 0);
--seed_id finds the first subgraph with that seed (or sample) id. --png also draws it
(nodes coloured by node set, the seed as a red star; needs matplotlib, the `plot` extra).

Exit code: 0 success, 1 runtime failure, 2 bad flags or inputs.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from pipelines import cli
from pipelines.outputs import tool_outputs
from pipelines.toolkit import ToolFailure, run_tool, writing_to
from sampler.sample.link import LABEL, READOUT, READOUT_SOURCE, READOUT_TARGET
from sampler.sample.subgraph import Subgraph
from sampler.tools import render
from sampler.tools.sample_stats import (
    default_schema,
    find_subgraph,
    iter_records,
    load_specs,
    sample_files,
)


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="python -m pipelines.show",
        description=__doc__,
        epilog=cli.guide("show"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--samples", required=True, help="A path, glob or base@N pattern.")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--index", type=int, help="Position over all records (default 0).")
    which.add_argument("--seed_id", help="Seed id (or sample id) of the subgraph to show.")
    parser.add_argument("--graph_schema", help="Schema of the samples (default: beside them).")
    parser.add_argument("--max_items", type=int, default=10, help="Nodes/edges listed per set.")
    parser.add_argument("--png", help="Also draw the subgraph into this PNG file.")
    args = parser.parse_args(argv)
    if args.index is not None and args.index < 0:
        parser.error("--index must be >= 0")
    if args.max_items < 0:
        parser.error("--max_items must be >= 0")
    return args


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def format_value(value, limit: int = 4) -> str:
    """A feature value on one line: scalars as is, vectors truncated after `limit` values."""
    array = np.asarray(value)
    if array.dtype == object:
        items = [_text(v) if isinstance(v, bytes) else str(v) for v in array.reshape(-1)]
    elif array.dtype.kind == "f":
        items = [f"{v:.4g}" for v in array.reshape(-1)]
    else:
        items = [str(v) for v in array.reshape(-1)]
    if array.ndim == 0:
        return items[0]
    shown = items[:limit]
    more = f", ... {len(items)} values" if len(items) > limit else ""
    return "[" + ", ".join(shown) + more + "]"


@dataclasses.dataclass(frozen=True)
class Seed:
    """What a record was sampled for: `what` (one line) and the nodes `*` marks, as
    (node set, index in the subgraph)."""

    what: str
    marked: frozenset[tuple[str, int]]
    node_set: str | None  # the set of the node drawn as the seed (the source of a seed edge)


def find_seed(subgraph: Subgraph, edge_ends: dict[str, tuple[str, str]]) -> Seed:
    """A link record's seed edge (its `_readout` node, whose `_readout/source` and
    `_readout/target` edges give the endpoints); else the seed node: node 0 of the set whose
    first id is the seed id."""
    readout = subgraph.node_sets.get(READOUT)
    source_edges = subgraph.edge_sets.get(READOUT_SOURCE)
    target_edges = subgraph.edge_sets.get(READOUT_TARGET)
    if readout is not None and source_edges is not None and target_edges is not None:
        if len(source_edges.source) and len(target_edges.source):
            ends = []
            for name, rows in ((READOUT_SOURCE, source_edges), (READOUT_TARGET, target_edges)):
                node_set = edge_ends[name][0]
                ends.append((node_set, int(rows.source[0])))
            (src_set, s), (dst_set, t) = ends
            src = _text(subgraph.node_sets[src_set].ids[s])
            dst = _text(subgraph.node_sets[dst_set].ids[t])
            label = readout.features.get(LABEL)
            label_text = f" (label {format_value(label[0])})" if label is not None else ""
            what = (
                f"seed edge {src} -> {dst}{label_text}; * marks its endpoints: node {s} of"
                f" '{src_set}' and node {t} of '{dst_set}'"
            )
            return Seed(what, frozenset(ends), src_set)
    seed_set = next(
        (
            name
            for name, rows in subgraph.node_sets.items()
            if len(rows.ids) and rows.ids[0] == subgraph.seed_id
        ),
        None,
    )
    if seed_set is None:
        return Seed("no node has the seed id", frozenset(), None)
    return Seed(f"* marks the seed: node 0 of '{seed_set}'", frozenset({(seed_set, 0)}), seed_set)


def format_subgraph(
    subgraph: Subgraph, edge_ends: dict[str, tuple[str, str]], seed: Seed, max_items: int
) -> list[str]:
    lines = [
        f"seed_id: {_text(subgraph.seed_id)}   sample_id: {_text(subgraph.sample_id)}"
        f"   ({seed.what})"
    ]
    for name, rows in subgraph.node_sets.items():
        n = len(rows.ids)
        lines.append(f"node set {name}: {n} nodes")
        for i in range(min(n, max_items)):
            mark = "*" if (name, i) in seed.marked else " "
            features = "  ".join(
                f"{feature}={format_value(values[i])}" for feature, values in rows.features.items()
            )
            lines.append(f"  {mark} [{i}] {_text(rows.ids[i])}  {features}".rstrip())
        if n > max_items:
            lines.append(f"    ... {n - max_items} more")
    for name, rows in subgraph.edge_sets.items():
        source, target = edge_ends[name]
        m = len(rows.source)
        lines.append(f"edge set {name} ({source} -> {target}): {m} edges")
        src_ids, dst_ids = subgraph.node_sets[source].ids, subgraph.node_sets[target].ids
        for j in range(min(m, max_items)):
            s, t = int(rows.source[j]), int(rows.target[j])
            src = _text(src_ids[s]) + ("*" if (source, s) in seed.marked else "")
            dst = _text(dst_ids[t]) + ("*" if (target, t) in seed.marked else "")
            features = "  ".join(
                f"{feature}={format_value(values[j])}" for feature, values in rows.features.items()
            )
            lines.append(f"    {src} -> {dst}  {features}".rstrip())
        if m > max_items:
            lines.append(f"    ... {m - max_items} more")
    return lines


def main_body(argv) -> int:
    args = parse_args(argv)
    schema = args.graph_schema or default_schema(args.samples)
    specs = load_specs(schema)
    if args.png:  # before anything is drawn: never over an input, a link or a FIFO
        tool_outputs.check("--png", args.png, args.png, [*sample_files(args.samples), schema])
    seed_id = args.seed_id.encode() if args.seed_id is not None else None
    index = (
        args.index
        if seed_id is None and args.index is not None
        else (0 if seed_id is None else None)
    )
    if args.index is None and seed_id is None and next(iter_records(args.samples), None) is None:
        print(f"samples: {args.samples} hold no record (0 subgraphs): nothing to show")
        return 0  # a finished output with no record is readable: 0 records
    path, in_file, position, subgraph = find_subgraph(args.samples, specs, index, seed_id)
    edge_ends = {name: (e.source, e.target) for name, e in specs.edge_sets.items()}
    seed = find_seed(subgraph, edge_ends)
    print(f"subgraph {position} (record {in_file} of {path})")
    for line in format_subgraph(subgraph, edge_ends, seed, args.max_items):
        print(line)
    if args.png:
        try:
            with writing_to("--png", args.png):
                render.draw_subgraph(subgraph, edge_ends, seed.node_set, args.png)
        except render.PlotsUnavailable as e:
            raise ToolFailure(str(e)) from e
        print(f"png: {args.png}")
    return 0


def main(argv=None) -> int:
    return run_tool(main_body, argv)


if __name__ == "__main__":
    raise SystemExit(main())
