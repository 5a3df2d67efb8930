"""The SamplingSpec of TF-GNN's OGBN-MAG example, for the graphs of sampler.tools.synthetic."""

from __future__ import annotations

from google.protobuf import text_format

from sampler.errors import UserError
from sampler.io import files
from sampler.protos import sampling_spec_pb2


def mag_sampling_spec(seed_set: str = "paper") -> sampling_spec_pb2.SamplingSpec:
    """The sampling spec of TF-GNN's OGBN-MAG example (all RANDOM_UNIFORM)."""
    if seed_set != "paper":
        raise UserError(f"the MAG sampling spec starts at node set 'paper', not '{seed_set}'")
    spec = sampling_spec_pb2.SamplingSpec()
    spec.seed_op.op_name = "seed"
    spec.seed_op.node_set_name = seed_set
    ops = [
        ("seed->paper", ["seed"], "cites", 32),
        ("paper->author", ["seed", "seed->paper"], "written", 8),
        ("author->paper", ["paper->author"], "writes", 16),
        ("author->institution", ["paper->author"], "affiliated_with", 16),
        ("paper->field_of_study", ["seed", "seed->paper", "author->paper"], "has_topic", 16),
    ]
    for op_name, inputs, edge_set, sample_size in ops:
        op = spec.sampling_ops.add()
        op.op_name = op_name
        op.input_op_names.extend(inputs)
        op.edge_set_name = edge_set
        op.sample_size = sample_size
        op.strategy = sampling_spec_pb2.RANDOM_UNIFORM
    return spec


def temporal_mag_sampling_spec(window: int | None = None) -> sampling_spec_pb2.SamplingSpec:
    """`mag_sampling_spec` sampled by time, for a graph generated with `edge_years`: each seed
    paper's `year` is its time; `cites`, `written` and `writes` keep only edges whose `year` is
    at or before it (and, with `window`, not more than `window` years before)."""
    spec = mag_sampling_spec()
    spec.temporal_seed.node_time_feature = "year"
    for op in spec.sampling_ops:
        if op.edge_set_name in ("cites", "written", "writes"):
            op.temporal.edge_time_feature = "year"
            if window is not None:
                op.temporal.window = window
    return spec


def write_sampling_spec(spec: sampling_spec_pb2.SamplingSpec, path: str) -> str:
    """Writes `spec` as text_format to `path`; returns path."""
    files.write_text(path, text_format.MessageToString(spec))
    return path
