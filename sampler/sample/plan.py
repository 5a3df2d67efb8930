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


@dataclasses.dataclass(frozen=True)
class SamplingPlan:
    seed_op: str
    seed_set: str
    ops: tuple[Op, ...]  # in a valid execution order
    aggregation: str  # EDGE or NODE

    def output_set(self, op_name: str) -> str:
        """The node set an op's sampled nodes belong to."""
        if op_name == self.seed_op:
            return self.seed_set
        return next(op.target for op in self.ops if op.name == op_name)

    def weighted_edge_sets(self) -> set[str]:
        return {op.edge_set for op in self.ops if op.strategy != RANDOM_UNIFORM}


def load_sampling_spec(path: str) -> sampling_spec_pb2.SamplingSpec:
    return parse_pbtxt(path, sampling_spec_pb2.SamplingSpec())


def make_plan(graph: GraphInfo, spec, aggregation: str = EDGE) -> SamplingPlan:
    """Checks the spec against the schema; every error names the offending field."""
    if aggregation not in (EDGE, NODE):
        raise UserError(f"--edge_aggregation_method must be 'edge' or 'node', not '{aggregation}'")
    if spec.WhichOneof("seed_type") != "seed_op":
        raise UserError(
            "sampling_spec: seed_op is required (symmetric_link_seed_op is unsupported)"
        )
    seed = spec.seed_op
    if not seed.op_name:
        raise UserError("sampling_spec: seed_op.op_name is empty")
    if seed.node_set_name not in graph.node_sets:
        raise UserError(
            f"sampling_spec: seed_op.node_set_name '{seed.node_set_name}' is not a node set"
            f" of the schema (has: {', '.join(graph.node_sets)})"
        )
    produces = {seed.op_name: seed.node_set_name}
    ops = []
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
            if produces[name] != edge_set.source:
                raise UserError(
                    f"{where}: input op '{name}' yields '{produces[name]}' nodes but edge set"
                    f" '{edge_set.name}' starts at '{edge_set.source}'"
                )
        if op.sample_size <= 0:
            raise UserError(f"{where}: sample_size must be > 0, got {op.sample_size}")
        if op.strategy not in STRATEGIES:
            raise UserError(f"{where}: strategy {op.strategy} is not supported")
        strategy = STRATEGIES[op.strategy]
        if strategy != RANDOM_UNIFORM:
            weight = edge_set.features.get(WEIGHT_FEATURE)
            if weight is None or weight.kind == "bytes" or weight.width != 1:
                raise UserError(
                    f"{where}: strategy {strategy} (the default when strategy is unset) needs a"
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
            )
        )
        produces[op.op_name] = edge_set.target
    return SamplingPlan(seed.op_name, seed.node_set_name, tuple(ops), aggregation)
