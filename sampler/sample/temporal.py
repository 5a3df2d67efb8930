"""Temporal (time-respecting) sampling: the rules of a spec's temporal ops, checked against the
schema, and the seed times they are measured against (docs/sampling.md, "Temporal sampling").

An op with a `temporal` message keeps only the edges whose time is at or before (or strictly
before) its seed's time, and, with a window, not before the seed time less the window; with a
`node_time_feature`, an edge whose target node is after the seed's time is not eligible either.
The op's strategy applies among the eligible edges, or `most_recent` picks the sample_size
latest. Every hop is measured against the seed's time. With node aggregation the edges induced
among a subgraph's nodes are filtered by the same rules (`filter_induced`). The temporal fields
are this project's extension of TF-GNN's SamplingSpec (numbers 1000 and above).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from sampler.batches import SampleNodes
from sampler.errors import UserError
from sampler.protos import tensor_pb2

SEED_TIME = "seed_time"  # the context feature of every record of a temporal spec
INT, FLOAT = "int", "float"
_DTYPES = {INT: tensor_pb2.DT_INT64, FLOAT: tensor_pb2.DT_FLOAT}
# Times as the kernels compare them: an int feature's int64 values, a float feature's float32
# values against float64 bounds (float32 -> float64 is exact).
BOUND_DTYPE = {INT: np.int64, FLOAT: np.float64}


@dataclasses.dataclass(frozen=True)
class TemporalRule:
    """One op's eligibility rule and selection."""

    edge_time: str  # feature of the op's edge set
    node_time: str | None  # feature of the op's target node set, or None
    strict: bool  # equal times are not eligible
    window: float | None  # eligible: time >= seed time - window
    most_recent: bool  # the sample_size latest eligible edges, in place of the strategy


@dataclasses.dataclass(frozen=True)
class SeedTime:
    """Where each seed's time comes from: a feature of the seed node set (node seeds) or of
    the seed edge set (link seeds: the seed edge's time), of one kind."""

    node_set: str  # node seeds: the seed node set; link seeds: the seed edge set
    feature: str
    kind: str  # INT or FLOAT
    of_edge: bool = False  # link seeds


def has(message, field: str) -> bool:
    """Whether `message` sets `field`: a spec may be TF-GNN's own class (library users pass
    it), which has none of the extension's fields."""
    return field in message.DESCRIPTOR.fields_by_name and message.HasField(field)


def _time_kind(features: dict, name: str, where: str, what: str) -> str:
    spec = features.get(name)
    if spec is None:
        raise UserError(
            f"{where}: {what} '{name}' is not a feature of it (has: {_names(features)})"
        )
    if spec.kind not in (INT, FLOAT) or spec.width != 1 or spec.shape:
        raise UserError(f"{where}: {what} '{name}' must be a scalar INT64 or FLOAT feature")
    return spec.kind


def _names(features: dict) -> str:
    return ", ".join(sorted(features)) or "no features"


def op_rule(graph, op, edge_set, where: str, link: bool = False) -> tuple[TemporalRule, str]:
    """(rule, time kind) of a SamplingOp with a `temporal` message; UserError naming the field.
    Equal times are eligible by default for node seeds, not for link seeds (`link`)."""
    t = op.temporal
    if not t.edge_time_feature:
        raise UserError(f"{where}: temporal.edge_time_feature is empty")
    kind = _time_kind(
        edge_set.features,
        t.edge_time_feature,
        f"{where} (edge set '{edge_set.name}')",
        "temporal.edge_time_feature",
    )
    node_time = t.node_time_feature or None
    if node_time is not None:
        node_kind = _time_kind(
            graph.node_sets[edge_set.target].features,
            node_time,
            f"{where} (node set '{edge_set.target}')",
            "temporal.node_time_feature",
        )
        if node_kind != kind:
            raise UserError(
                f"{where}: temporal.node_time_feature '{node_time}' is {node_kind} but"
                f" temporal.edge_time_feature '{t.edge_time_feature}' is {kind}"
            )
    window = None
    if t.HasField("window"):
        window = float(t.window)
        if not math.isfinite(window) or window < 0:
            raise UserError(f"{where}: temporal.window must be a finite number >= 0, got {window}")
        if kind == INT and (window != int(window) or window >= 2.0**53):
            raise UserError(
                f"{where}: temporal.window must be a whole number below 2^53 for the INT64"
                f" time '{t.edge_time_feature}', got {window}"
            )
    if t.most_recent and op.HasField("strategy"):
        raise UserError(
            f"{where}: temporal.most_recent picks the latest edges; leave strategy unset"
        )
    strict = bool(t.strictly_before) if t.HasField("strictly_before") else link
    rule = TemporalRule(t.edge_time_feature, node_time, strict, window, t.most_recent)
    return rule, kind


def seed_time(
    graph, spec, seed_set: str, kinds: list[tuple[str, str]], link_edge_set: str | None = None
) -> SeedTime | None:
    """The seed time of a spec (None when it has no temporal op nor temporal_seed); `kinds`:
    (op's field, time kind) of every temporal op, which must all be the seed time's kind.
    Link seeds (`link_edge_set`, the seed edge set) take it from their edge."""
    field = "edge_time_feature" if link_edge_set else "node_time_feature"
    if not has(spec, "temporal_seed"):
        if kinds:
            raise UserError(
                f"sampling_spec: {kinds[0][0]} is temporal but temporal_seed.{field}"
                " is not set (the seed's time that eligibility is measured against)"
            )
        return None
    other = "node_time_feature" if link_edge_set else "edge_time_feature"
    if spec.temporal_seed.HasField(other):
        seeds = "link seeds (symmetric_link_seed_op)" if link_edge_set else "node seeds (seed_op)"
        raise UserError(
            f"sampling_spec: temporal_seed.{other} does not apply to {seeds}; set {field}"
        )
    name = getattr(spec.temporal_seed, field)
    if not name:
        raise UserError(f"sampling_spec: temporal_seed.{field} is empty")
    if link_edge_set:
        where = f"sampling_spec: temporal_seed (edge set '{link_edge_set}')"
        features = graph.edge_sets[link_edge_set].features
    else:
        where = f"sampling_spec: temporal_seed (node set '{seed_set}')"
        features = graph.node_sets[seed_set].features
    kind = _time_kind(features, name, where, field)
    for field, other in kinds:
        if other != kind:
            raise UserError(
                f"sampling_spec: {field} is a {other} time but the seed time"
                f" temporal_seed.{field} '{name}' is {kind}: use one kind of time"
            )
    if SEED_TIME in graph.schema.context.features:
        raise UserError(
            f"context: feature '{SEED_TIME}' is written by temporal sampling; remove it from"
            " the schema"
        )
    if link_edge_set:
        return SeedTime(link_edge_set, name, kind, of_edge=True)
    return SeedTime(seed_set, name, kind)


def table_time_kind(plan) -> str | None:
    """The kind of the seeds table's time column a plan reads (its seed time's), or None for
    an untimed plan."""
    return None if plan.seed_time is None else plan.seed_time.kind


def time_features(plan) -> dict[str, tuple[str, ...]]:
    """Node set -> the time features a temporal plan reads of it (the seed time, the ops'
    node times): what the `topology` placement keeps of the node tables."""
    out: dict[str, set[str]] = {}
    if plan.seed_time is not None and not plan.seed_time.of_edge:
        out.setdefault(plan.seed_set, set()).add(plan.seed_time.feature)
    for op in plan.ops:
        if op.temporal is not None and op.temporal.node_time is not None:
            out.setdefault(op.target, set()).add(op.temporal.node_time)
    return {name: tuple(sorted(names)) for name, names in out.items()}


def target_time_features(plan) -> dict[str, tuple[str, ...]]:
    """Edge set -> the node time features of its target set that its temporal ops read: what
    the `sharded` placement joins onto each edge of its adjacency (EdgeBatch.target_times)."""
    out: dict[str, set[str]] = {}
    for op in plan.ops:
        if op.temporal is not None and op.temporal.node_time is not None:
            out.setdefault(op.edge_set, set()).add(op.temporal.node_time)
    return {name: tuple(sorted(names)) for name, names in out.items()}


def with_chunk_seed_times(chunk, plan):
    """A chunk of node seeds' subgraphs assembled from rows (the `sharded` placement) with
    its seed times: each seed is node 0 of its node set, and its time one of its features
    (unless the chunk has its seeds' times from the seeds table already)."""
    if chunk.seed_times is not None:
        return chunk
    part = chunk.node_rows[plan.seed_set]
    first = np.asarray(part.bounds[:-1])
    column = np.asarray(part.batch.features[plan.seed_time.feature])
    index = first if part.index is None else np.asarray(part.index)[first]
    chunk.seed_times = column[index]
    return chunk


def seed_nodes(seeds, table, feature: str):
    """The seeds (sampler.batches.Seeds) found in `table` (their node set's NodeTable, or a
    shard of it) as SampleNodes with each one's time: the seeds table's, else its node's
    `feature`. A seed not in the table has none and is not sampled (the assembly counts it in
    seeds_not_in_node_set)."""
    rows, found = table.lookup(seeds.node)
    if seeds.time is not None:
        times = np.asarray(seeds.time)[found]
    else:
        times = np.asarray(table.rows.features[feature])[rows[found]]
    return SampleNodes(seeds.sample[found], seeds.node[found], times)


def output_schema(schema, seed: SeedTime | None):
    """`schema` with the scalar context feature `seed_time` when the spec is temporal."""
    if seed is None:
        return schema
    out = type(schema)()
    out.CopyFrom(schema)
    out.context.features[SEED_TIME].dtype = _DTYPES[seed.kind]
    return out


def bounds(seed_times: np.ndarray, rule: TemporalRule, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """(lowest, highest) eligible time per seed: a time t is eligible when lo <= t <= hi;
    strictly before: hi is the seed time less one step (int) or the next float below."""
    dtype = BOUND_DTYPE[kind]
    seed = np.ascontiguousarray(seed_times, dtype=dtype)
    if kind == INT:
        hi = seed - 1 if rule.strict else seed.copy()
        if rule.window is None:
            lo = np.full(len(seed), np.iinfo(np.int64).min, np.int64)
        else:
            lo = seed - np.int64(rule.window)
        return lo, hi
    # float32 times compared as float64: below the seed time means at most the float32 below it.
    hi = seed.copy()
    if rule.strict:
        hi = np.nextafter(seed.astype(np.float32), np.float32(-np.inf)).astype(np.float64)
    lo = np.full(len(seed), -np.inf) if rule.window is None else seed - rule.window
    return lo, hi


def induced_rules(plan) -> dict[str, tuple[TemporalRule, ...]]:
    """Edge set -> the rules of the ops that sample it, for the edge sets whose every op is
    temporal: node aggregation keeps an induced edge of such a set only if one of these
    rules finds it eligible. A set that an untimed op samples, or that no op samples, keeps
    every induced edge (as an untimed op may pick any edge)."""
    rules: dict[str, list[TemporalRule]] = {}
    untimed: set[str] = set()
    for op in plan.ops:
        if op.temporal is None:
            untimed.add(op.edge_set)
        elif op.temporal not in rules.setdefault(op.edge_set, []):
            rules[op.edge_set].append(op.temporal)
    return {name: tuple(r) for name, r in rules.items() if name not in untimed}


def filter_induced(chunk, plan):
    """A chunk of node-aggregated subgraphs (every edge among their nodes) without the
    induced edges that `induced_rules` finds ineligible at their sample's seed time: an
    edge's time, and with a node time its target's, against the bounds of each rule. The
    edges kept stay in their order. Every placement calls it on its chunks (one code, the
    same bytes)."""
    rules = induced_rules(plan)
    if plan.seed_time is None or not rules:
        return chunk
    kind = plan.seed_time.kind
    for name, set_rules in rules.items():
        if name not in chunk.edge_rows:
            continue
        edges, features, per_sample = chunk.edge_rows[name]
        per_sample = np.asarray(per_sample, np.int64)
        rows = np.arange(per_sample[0], per_sample[-1])
        sample = np.searchsorted(per_sample, rows, side="right") - 1
        seed = np.asarray(chunk.seed_times)[sample]
        keep = induced_eligible(
            set_rules,
            seed,
            kind,
            lambda rule, f=features, r=rows: np.asarray(f[rule.edge_time])[r],
            lambda rule, n=name, e=edges, r=rows, s=sample: _target_times(
                chunk, plan, n, rule, e[1, r], s
            ),
        )
        if keep.all():
            continue
        kept = rows[keep]
        counts = np.bincount(sample[keep], minlength=len(per_sample) - 1)
        new_bounds = np.zeros(len(per_sample), np.int64)
        np.cumsum(counts, out=new_bounds[1:])
        kept_features = {f: np.asarray(col)[kept] for f, col in features.items()}
        chunk.edge_rows[name] = (edges[:, kept], kept_features, new_bounds)
    return chunk


def induced_eligible(rules, seed, kind: str, edge_times, target_times) -> np.ndarray:
    """Which induced edges one of `rules` finds eligible at their sample's `seed` time: the
    edge's time (`edge_times(rule)`, one per edge) within the rule's bounds and, for a rule
    with a node time, its target's (`target_times(rule)`) at or before the upper bound. The
    rule of node aggregation (filter_induced) and of estimate's probe."""
    keep = np.zeros(len(seed), bool)
    for rule in rules:
        lo, hi = bounds(seed, rule, kind)
        times = edge_times(rule)
        ok = (times >= lo) & (times <= hi)
        if rule.node_time is not None:
            ok &= target_times(rule) <= hi
        keep |= ok
    return keep


def _target_times(chunk, plan, edge_set: str, rule: TemporalRule, local, sample) -> np.ndarray:
    """The node time `rule.node_time` of each edge's target: node `local` of its sample's
    nodes of the target set."""
    target = next(op.target for op in plan.ops if op.edge_set == edge_set)
    part = chunk.node_rows[target]
    at = np.asarray(part.bounds, np.int64)[sample] + local
    if part.index is not None:
        at = np.asarray(part.index)[at]
    return np.asarray(part.batch.features[rule.node_time])[at]
