"""A validated sampling plan: the SamplingSpec checked against the GraphSchema.

`seed_op` plus `sampling_ops` form a DAG. Each op samples from the union of its
input ops' nodes (without duplicates) along one edge set.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids
from sampler.errors import UserError
from sampler.protos import sampling_spec_pb2
from sampler.sample import temporal
from sampler.sample.temporal import SeedTime, TemporalRule
from sampler.schema import GraphInfo, parse_pbtxt

RANDOM_UNIFORM = "RANDOM_UNIFORM"
TOP_K = "TOP_K"
RANDOM_WEIGHTED = "RANDOM_WEIGHTED"
STRATEGIES = {
    sampling_spec_pb2.RANDOM_UNIFORM: RANDOM_UNIFORM,
    sampling_spec_pb2.TOP_K: TOP_K,
    sampling_spec_pb2.RANDOM_WEIGHTED: RANDOM_WEIGHTED,
}
WEIGHT_FEATURE = "weight"
EDGE = "edge"
NODE = "node"


@dataclasses.dataclass(frozen=True)
class Op:
    name: str
    inputs: tuple[str, ...]
    edge_set: str
    source: str
    target: str
    sample_size: int
    strategy: str
    key: np.uint64  # fingerprint of the op name: part of every random draw
    temporal: TemporalRule | None = None  # a time-respecting op (sampler.sample.temporal)


@dataclasses.dataclass(frozen=True)
class LinkSeed:
    """A `symmetric_link_seed_op`: seeds are edges of `edge_set` (from `source` to `target`)."""

    edge_set: str
    source: str  # node set of the seed edges' sources
    target: str  # node set of the seed edges' targets


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    seed_op: str
    seed_set: str  # for a link seed: the source node set
    ops: tuple[Op, ...]  # in a valid execution order
    aggregation: str  # EDGE or NODE
    link: LinkSeed | None = None  # set for a symmetric_link_seed_op
    seed_time: SeedTime | None = None  # set for a temporal spec

    def output_set(self, op_name: str) -> str:
        """The node set an op's sampled nodes belong to."""
        if op_name == self.seed_op:
            return self.seed_set
        return next(op.target for op in self.ops if op.name == op_name)

    def weighted_edge_sets(self) -> set[str]:
        return {
            op.edge_set
            for op in self.ops
            if op.strategy != RANDOM_UNIFORM and not (op.temporal and op.temporal.most_recent)
        }


def load_sampling_spec(path: str) -> sampling_spec_pb2.SamplingSpec:
    return parse_pbtxt(path, sampling_spec_pb2.SamplingSpec())


def _link_seed(graph: GraphInfo, spec, seed_edge_set: str | None) -> LinkSeed:
    if not spec.symmetric_link_seed_op.op_name:
        raise UserError("sampling_spec: symmetric_link_seed_op.op_name is empty")
    if not seed_edge_set:
        raise UserError(
            "sampling_spec: symmetric_link_seed_op needs --seed_edge_set, the edge set whose"
            " edges are the seeds (the op names none)"
        )
    if seed_edge_set not in graph.edge_sets:
        raise UserError(
            f"--seed_edge_set '{seed_edge_set}' is not an edge set of the schema"
            f" (has: {', '.join(graph.edge_sets)})"
        )
    info = graph.edge_sets[seed_edge_set]
    return LinkSeed(seed_edge_set, info.source, info.target)


def make_plan(
    graph: GraphInfo, spec, aggregation: str = EDGE, seed_edge_set: str | None = None
) -> SamplingPlan:
    """Checks the spec against the schema; every error names the offending field.

    A `symmetric_link_seed_op` takes its edge set from `seed_edge_set` (--seed_edge_set); its
    op yields both endpoints, each in its node set."""
    if aggregation not in (EDGE, NODE):
        raise UserError(f"--edge_aggregation_method must be 'edge' or 'node', not '{aggregation}'")
    link = None
    if spec.WhichOneof("seed_type") == "symmetric_link_seed_op":
        link = _link_seed(graph, spec, seed_edge_set)
        seed_op, seed_set = spec.symmetric_link_seed_op.op_name, link.source
        produces = {seed_op: (link.source, link.target)}
    elif spec.WhichOneof("seed_type") != "seed_op":
        raise UserError("sampling_spec: seed_op or symmetric_link_seed_op is required")
    else:
        if seed_edge_set:
            raise UserError("--seed_edge_set needs a symmetric_link_seed_op in the sampling spec")
        seed = spec.seed_op
        if not seed.op_name:
            raise UserError("sampling_spec: seed_op.op_name is empty")
        if seed.node_set_name not in graph.node_sets:
            raise UserError(
                f"sampling_spec: seed_op.node_set_name '{seed.node_set_name}' is not a node set"
                f" of the schema (has: {', '.join(graph.node_sets)})"
            )
        seed_op, seed_set = seed.op_name, seed.node_set_name
        produces = {seed_op: (seed_set,)}
    ops = []
    kinds = []  # (field, time kind) of each temporal op
    for i, op in enumerate(spec.sampling_ops):
        where = f"sampling_spec: sampling_ops[{i}] '{op.op_name}'"
        if not op.op_name:
            raise UserError(f"sampling_spec: sampling_ops[{i}].op_name is empty")
        if op.op_name in produces:
            raise UserError(f"{where}: op_name is already used by an earlier op")
        if op.edge_set_name not in graph.edge_sets:
            raise UserError(f"{where}: edge_set_name '{op.edge_set_name}' is not an edge set")
        edge_set = graph.edge_sets[op.edge_set_name]
        if not op.input_op_names:
            raise UserError(f"{where}: input_op_names is empty")
        for name in op.input_op_names:
            if name not in produces:
                raise UserError(f"{where}: input_op_names '{name}' is not defined by an earlier op")
            if edge_set.source not in produces[name]:
                raise UserError(
                    f"{where}: input op '{name}' yields {_set_names(produces[name])} nodes"
                    f" but edge set '{edge_set.name}' starts at '{edge_set.source}'"
                )
        if op.sample_size <= 0:
            raise UserError(f"{where}: sample_size must be > 0, got {op.sample_size}")
        if op.strategy not in STRATEGIES:
            raise UserError(f"{where}: strategy {op.strategy} is not supported")
        strategy = STRATEGIES[op.strategy]
        rule = None
        if temporal.has(op, "temporal"):
            rule, kind = temporal.op_rule(graph, op, edge_set, where, link is not None)
            kinds.append((f"sampling_ops[{i}] '{op.op_name}' temporal", kind))
        if strategy != RANDOM_UNIFORM and not (rule and rule.most_recent):
            weight = edge_set.features.get(WEIGHT_FEATURE)
            unset = "" if op.HasField("strategy") else " (the default when strategy is unset)"
            if weight is None or weight.kind == "bytes" or weight.width != 1:
                raise UserError(
                    f"{where}: strategy {strategy}{unset} needs a"
                    f" scalar numeric '{WEIGHT_FEATURE}' feature on edge set '{edge_set.name}'"
                )
        ops.append(
            Op(
                name=op.op_name,
                inputs=tuple(dict.fromkeys(op.input_op_names)),
                edge_set=edge_set.name,
                source=edge_set.source,
                target=edge_set.target,
                sample_size=int(op.sample_size),
                strategy=strategy,
                key=ids.fingerprint_one(op.op_name),
                temporal=rule,
            )
        )
        produces[op.op_name] = (edge_set.target,)
    link_set = link.edge_set if link is not None else None
    seed_time = temporal.seed_time(graph, spec, seed_set, kinds, link_set)
    return SamplingPlan(seed_op, seed_set, tuple(ops), aggregation, link, seed_time)


def _set_names(names) -> str:
    """'a' or 'a' and 'b': each node set once (a link seed op on `cites` yields 'paper')."""
    return " and ".join(f"'{n}'" for n in dict.fromkeys(names))
