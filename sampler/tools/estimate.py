"""Predicts the size of the sampler's output from degree statistics (no sampling, no Beam).

The model, op by op in plan order (all expectations are per subgraph):

  * A node set receives "draws": the seed (one node, uniform over the seed set) and the
    targets of every op. A draw along edge set A lands on node v with probability
    in_A(v) / |A| (a node is reached in proportion to its in-degree).
  * An op's frontier is the union of its inputs' nodes. Its expected size is the expected
    number of distinct nodes hit, sum over nodes v of 1 - exp(-rate(v)), evaluated over
    the joint in-degree table of the node set (`DegreeStats.node_sets[..].joint_in`).
  * An op samples min(out_B(v), sample_size) edges per frontier node. A frontier node
    reached along A is weighted by its A-in-degree, so the expected fan-out is the mean
    of min(d, k) over the A-in-degree-weighted out_B histogram (`fanout`); the seed uses
    the uniform histogram (zero degrees included).
  * Backtracking: when B is A reversed (MAG's `written` after `writes`), each sampled
    A-edge x -> v has its reverse v -> x among v's B-edges, drawn with probability
    min(k, d) / d. Those draws return to a node already in the subgraph and add no node.
  * Nodes per node set: distinct nodes over all its draws. Edges per edge set: the sum
    over its ops (edge aggregation). With node aggregation, induced edges are estimated
    as if endpoints were independent (a lower bound on clustered graphs), never below the
    sampled edges.
  * Bytes: the exact tf.Example size of a subgraph of the expected sizes, using per-feature
    value costs measured on the first rows of every table (`example_bytes`), plus 16 bytes
    of TFRecord framing per record.

What the model does not see: locality beyond backtracking (triangles, communities),
which makes real subgraphs somewhat smaller than predicted, and TOP_K / RANDOM_WEIGHTED
edges with weight <= 0 (counted as if they could be drawn).

Link seeds (edge set E from S to T): the seed draws a T node along E and an S node along E's
reversed twin if any (else uniformly); the seed edge is not removed (the probe removes it).
A link example adds `_readout` (one node) and its two edge sets (one edge each).
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from sampler.sample.encode import ID, SAMPLE_ID_KEY, SEED_ID_KEY, SIZE, SOURCE, TARGET
from sampler.sample.link import LABEL, READOUT, READOUT_SOURCE, READOUT_TARGET
from sampler.sample.plan import NODE, SamplingPlan
from sampler.schema import GraphInfo
from sampler.tools.degree_stats import UNIFORM, DegreeStats, Histogram

RECORD_FRAMING = 16  # TFRecord: length (8) + length crc (4) + data crc (4)

# Throughput per vCPU assumed for the worker suggestion (documented in docs/sampling.md,
# "Estimate"; measured on the local FnApiRunner and rounded down for Dataflow's shuffle and
# (de)serialization).
DEFAULT_OUTPUT_MB_PER_VCPU_S = 2.0
DEFAULT_EDGES_PER_VCPU_S = 500_000.0
DEFAULT_INPUT_MB_PER_VCPU_S = 10.0
MACHINES = (  # (name, vCPUs, GB)
    ("n1-standard-4", 4, 15.0),
    ("n1-standard-8", 8, 30.0),
    ("n1-highmem-8", 8, 52.0),
    ("n1-highmem-16", 16, 104.0),
)


# --------------------------------------------------------------------------- histograms


def mean_take(hist: Histogram, k: int) -> float:
    """E[min(d, k)] under a weighted degree histogram."""
    total = sum(w for _, w in hist)
    return sum(w * min(d, k) for d, w in hist) / total if total else 0.0


def mean_back_probability(hist: Histogram, k: int) -> float:
    """E[min(d, k) / d] over the nodes with d > 0: the chance a given out-edge is drawn."""
    live = [(d, w) for d, w in hist if d > 0]
    total = sum(w for _, w in live)
    return sum(w * min(d, k) / d for d, w in live) / total if total else 0.0


# --------------------------------------------------------------------------- model


@dataclasses.dataclass
class Draws:
    """Expected nodes an op (or the seed) adds to a node set, with repeats."""

    op: str
    node_set: str
    count: float
    weight: str  # UNIFORM or the edge set along which the draws arrive
    back: float = 0.0  # draws that return to the frontier of `back_origin`
    back_origin: tuple[str, ...] = ()


@dataclasses.dataclass
class OpEstimate:
    name: str
    edge_set: str
    sample_size: int
    frontier: float  # distinct input nodes
    edges: float  # sampled edges
    back: float  # of which return to a node already present


@dataclasses.dataclass
class Estimate:
    num_seeds: int
    ops: list[OpEstimate]
    nodes: dict[str, float]  # per node set, per subgraph
    edges: dict[str, float]  # per edge set, per subgraph
    set_bytes: dict[str, float]  # "nodes/x" / "edges/y" / "context": bytes per subgraph
    record_bytes: float  # one serialized tf.Example of the expected sizes
    aggregation: str
    method: str = "degree statistics"

    @property
    def bytes_per_subgraph(self) -> float:
        return self.record_bytes + RECORD_FRAMING

    @property
    def total_bytes(self) -> float:
        return self.num_seeds * self.bytes_per_subgraph

    @property
    def total_nodes(self) -> float:
        return sum(self.nodes.values())

    @property
    def total_edges(self) -> float:
        return sum(self.edges.values())

    def to_json(self) -> dict:
        return {
            "num_seeds": self.num_seeds,
            "aggregation": self.aggregation,
            "method": self.method,
            "ops": [dataclasses.asdict(op) for op in self.ops],
            "nodes_per_subgraph": self.nodes,
            "edges_per_subgraph": self.edges,
            "bytes_per_set": self.set_bytes,
            "bytes_per_subgraph": self.bytes_per_subgraph,
            "total_bytes": self.total_bytes,
        }


def distinct_nodes(stats: DegreeStats, node_set: str, draws: list[Draws]) -> float:
    """Expected distinct nodes of `node_set` hit by the union of `draws` (Poisson model)."""
    ns = stats.node_sets[node_set]
    n = ns.count
    if n == 0 or not draws:
        return 0.0
    present = {d.op for d in draws}
    uniform_rate = 0.0
    column_rate = np.zeros(len(ns.in_sets))
    for d in draws:
        forward = d.count
        if d.back and set(d.back_origin) <= present:
            forward = max(d.count - d.back, 0.0)
        if d.weight == UNIFORM:
            uniform_rate += forward / n
        else:
            edges = stats.edge_sets[d.weight].count
            if edges:
                column_rate[ns.in_sets.index(d.weight)] += forward / edges
    total = 0.0
    covered = 0.0
    for vector, nodes in ns.joint_in:
        rate = uniform_rate + float(np.dot(column_rate, vector))
        total += nodes * -math.expm1(-rate)
        covered += nodes
    total += max(n - covered, 0.0) * -math.expm1(-uniform_rate)
    return min(total, float(n))


def _reverses(graph: GraphInfo, a: str, b: str) -> bool:
    """True when edge set b is edge set a read backwards (same table, opposite direction)."""
    ea, eb = graph.edge_sets[a], graph.edge_sets[b]
    return (
        ea.filename == eb.filename
        and ea.reversed != eb.reversed
        and ea.source == eb.target
        and ea.target == eb.source
    )


def _seed_draws(graph: GraphInfo, plan: SamplingPlan) -> list[Draws]:
    """The seed node, or a link seed's two ends (see the module docstring)."""
    if plan.link is None:
        return [Draws(plan.seed_op, plan.seed_set, 1.0, UNIFORM)]
    seed_set = plan.link.edge_set
    twins = [name for name in graph.edge_sets if _reverses(graph, seed_set, name)]
    return [
        Draws(plan.seed_op, plan.link.source, 1.0, twins[0] if twins else UNIFORM),
        Draws(plan.seed_op, plan.link.target, 1.0, seed_set),
    ]


def estimate(graph: GraphInfo, plan: SamplingPlan, stats: DegreeStats, num_seeds: int) -> Estimate:
    """Expected nodes, edges and bytes per subgraph and per op (see the module docstring)."""
    produced: dict[str, list[Draws]] = {plan.seed_op: _seed_draws(graph, plan)}
    inputs_of = {plan.seed_op: ()}
    ops = []
    edges = dict.fromkeys(graph.edge_sets, 0.0)
    for op in plan.ops:
        comps = [d for name in op.inputs for d in produced[name] if d.node_set == op.source]
        frontier = distinct_nodes(stats, op.source, comps)
        alone = [distinct_nodes(stats, op.source, [c]) for c in comps]
        fanouts = stats.node_sets[op.source].fanout
        take = 0.0
        if sum(alone) > 0:
            for comp, share in zip(comps, alone, strict=True):
                hist = fanouts.get(comp.weight, {}).get(op.edge_set, [])
                take += share / sum(alone) * mean_take(hist, op.sample_size)
        sampled = frontier * take
        back, origin = 0.0, ()
        for comp in comps:
            if comp.weight != UNIFORM and _reverses(graph, comp.weight, op.edge_set):
                hist = fanouts.get(comp.weight, {}).get(op.edge_set, [])
                back += comp.count * mean_back_probability(hist, op.sample_size)
                origin += inputs_of[comp.op]
        back = min(back, sampled)
        produced[op.name] = [Draws(op.name, op.target, sampled, op.edge_set, back, origin)]
        inputs_of[op.name] = op.inputs
        ops.append(OpEstimate(op.name, op.edge_set, op.sample_size, frontier, sampled, back))
        edges[op.edge_set] += sampled
    nodes = {}
    for name in graph.node_sets:
        draws = [d for ds in produced.values() for d in ds if d.node_set == name]
        nodes[name] = distinct_nodes(stats, name, draws)
    if plan.aggregation == NODE:
        for name, info in graph.edge_sets.items():
            n_target = stats.node_sets[info.target].count
            mean_out = mean_take(stats.edge_sets[name].out_hist, 2**62)
            induced = nodes[info.source] * mean_out * (nodes[info.target] / max(n_target, 1))
            edges[name] = max(edges[name], induced)
    if plan.link is not None:
        nodes[READOUT] = edges[READOUT_SOURCE] = edges[READOUT_TARGET] = 1.0
    set_bytes, record = example_bytes(graph, stats, plan, nodes, edges)
    return Estimate(num_seeds, ops, nodes, edges, set_bytes, record, plan.aggregation)


# --------------------------------------------------------------------------- probe


def _adjusted(y: np.ndarray, x: np.ndarray | None, x_mean: float | None) -> float:
    """Regression estimator of the population mean of y: ȳ + b (X̄ - x̄).

    x is a per-seed covariate whose population mean X̄ is known exactly from the degree
    statistics (the level-1 fan-out of the seed); it removes most of the probe's noise.
    """
    y = np.asarray(y, dtype=np.float64)
    if x is None or x_mean is None or len(y) < 3:
        return float(y.mean()) if len(y) else 0.0
    var = float(np.var(x))
    if var == 0:
        return float(y.mean())
    b = float(np.mean((x - x.mean()) * (y - y.mean()))) / var
    return max(float(y.mean() + b * (x_mean - x.mean())), 0.0)


def calibrate(
    graph: GraphInfo,
    plan: SamplingPlan,
    stats: DegreeStats,
    model: Estimate,
    probe,
    uniform_seeds: bool,
) -> Estimate:
    """The estimate from a probe (`sampler.tools.probe.ProbeResult`), adjusted by the degree model.

    Sizes are the probe's means, corrected with the level-1 fan-out whose exact mean the
    degree statistics give when seeds are the whole seed set (`_adjusted`; not for a temporal
    spec, whose degrees count edges of every time). Bytes are the
    mean exact tf.Example size of the probe's subgraphs.
    """
    from sampler.tools.probe import op_levels

    x = x_mean = None
    timed = plan.seed_time is not None  # degrees count edges of every time: no adjustment
    if uniform_seeds and plan.ops and not timed:
        first = [op.name for op in op_levels(plan)[0]]
        x = sum(probe.op_edges[name] for name in first).astype(np.float64)
        x_mean = sum(op.edges for op in model.ops if op.name in first)
    nodes = {name: _adjusted(v, x, x_mean) for name, v in probe.nodes.items()}
    edges = {name: _adjusted(v, x, x_mean) for name, v in probe.edges.items()}
    ops = []
    for op in model.ops:
        ops.append(
            dataclasses.replace(
                op,
                frontier=_adjusted(probe.op_frontier[op.name], x, x_mean),
                edges=_adjusted(probe.op_edges[op.name], x, x_mean),
            )
        )
    per_set = collections.defaultdict(list)
    records = []
    for i in range(len(probe)):
        sizes = [{name: float(v[i]) for name, v in d.items()} for d in (probe.nodes, probe.edges)]
        set_bytes, record = example_bytes(graph, stats, plan, *sizes)
        records.append(record)
        for key, value in set_bytes.items():
            per_set[key].append(value)
    set_bytes = {key: _adjusted(np.array(v), x, x_mean) for key, v in per_set.items()}
    record = _adjusted(np.array(records), x, x_mean)
    method = f"probe of {len(probe)} seeds, adjusted by degree statistics"
    if timed:
        method = f"probe of {len(probe)} seeds sampled by time (the degree model ignores time)"
    return Estimate(
        model.num_seeds, ops, nodes, edges, set_bytes, record, model.aggregation, method
    )


# --------------------------------------------------------------------------- bytes


def varint_len(n: int) -> int:
    n = max(int(n), 0)
    length = 1
    while n >= 0x80:
        n >>= 7
        length += 1
    return length


def mean_index_varint(n: float) -> float:
    """Mean varint bytes of indices spread evenly over [0, n)."""
    n = int(round(n))
    if n <= 0:
        return 1.0
    total, lo, length = 0, 0, 1
    while lo < n:
        hi = min(n, 1 << (7 * length))
        total += (hi - lo) * length
        lo, length = hi, length + 1
    return total / n


def _list_feature(kind: str, data: float) -> float:
    """Size of a Feature message whose list holds `data` bytes of values."""
    data = max(data, 0.0)
    if kind in ("float", "int"):  # packed: one field holding every value
        payload = 0.0 if data == 0 else 1 + varint_len(round(data)) + data
    else:  # bytes: `data` already counts each value's tag and length
        payload = data
    return 1 + varint_len(round(payload)) + payload


def _entry(key: str, feature: float) -> float:
    """Size of one map<string, Feature> entry inside Features."""
    key_len = len(key.encode())
    inner = 1 + varint_len(key_len) + key_len + 1 + varint_len(round(feature)) + feature
    return 1 + varint_len(round(inner)) + inner


def _bytes_value(length: float) -> float:
    return 1 + varint_len(round(length)) + length


def example_bytes(
    graph: GraphInfo,
    stats: DegreeStats,
    plan: SamplingPlan,
    nodes: dict[str, float],
    edges: dict[str, float],
) -> tuple[dict[str, float], float]:
    """({set: bytes}, bytes of the whole tf.Example) for a subgraph of the given sizes."""
    out = {}
    seed_id = stats.node_sets[plan.seed_set].id_bytes
    if plan.link is not None:  # `<source id>-><target id>`, and a link example's readout
        seed_id += 2 + stats.node_sets[plan.link.target].id_bytes
        out.update(_readout_bytes(seed_id))
    out["context"] = sum(
        _entry(key, _list_feature("bytes", _bytes_value(seed_id)))
        for key in (SEED_ID_KEY, SAMPLE_ID_KEY)
    )
    for name, info in graph.node_sets.items():
        n = nodes.get(name, 0.0)
        ns = stats.node_sets[name]
        prefix = f"nodes/{name}."
        size = _entry(prefix + SIZE, _list_feature("int", varint_len(round(n))))
        size += _entry(prefix + ID, _list_feature("bytes", n * _bytes_value(ns.id_bytes)))
        for feature, spec in info.features.items():
            per_row = ns.feature_bytes.get(feature, 4.0 * spec.width)
            size += _entry(prefix + feature, _list_feature(spec.kind, n * per_row))
        out[f"nodes/{name}"] = size
    for name, info in graph.edge_sets.items():
        m = edges.get(name, 0.0)
        es = stats.edge_sets[name]
        prefix = f"edges/{name}."
        size = _entry(prefix + SIZE, _list_feature("int", varint_len(round(m))))
        for key, end in ((SOURCE, info.source), (TARGET, info.target)):
            data = m * mean_index_varint(nodes.get(end, 0.0))
            size += _entry(prefix + key, _list_feature("int", data))
        for feature, spec in info.features.items():
            per_row = es.feature_bytes.get(feature, 4.0 * spec.width)
            size += _entry(prefix + feature, _list_feature(spec.kind, m * per_row))
        out[f"edges/{name}"] = size
    features = sum(out.values())
    record = 1 + varint_len(round(features)) + features
    return out, record


def _readout_bytes(seed_id: float) -> dict[str, float]:
    """A link example's `_readout` node (`#id`: the sample id, `label`) and its two edges."""
    prefix = f"nodes/{READOUT}."
    node = _entry(prefix + SIZE, _list_feature("int", 1))
    node += _entry(prefix + ID, _list_feature("bytes", _bytes_value(seed_id)))
    out = {f"nodes/{READOUT}": node + _entry(prefix + LABEL, _list_feature("int", 1))}
    for name in (READOUT_SOURCE, READOUT_TARGET):  # one edge; its ends mostly index 0
        keys = (f"edges/{name}.{k}" for k in (SIZE, SOURCE, TARGET))
        out[f"edges/{name}"] = sum(_entry(key, _list_feature("int", 1)) for key in keys)
    return out


# --------------------------------------------------------------------------- workers


@dataclasses.dataclass
class WorkerSuggestion:
    machine_type: str
    num_workers: int
    vcpu_seconds: float
    memory_gb_per_worker: float
    target_seconds: float


def suggest_workers(
    est: Estimate,
    input_bytes: int,
    target_seconds: float,
    num_shards: int = 32,
    output_mb_per_vcpu_s: float = DEFAULT_OUTPUT_MB_PER_VCPU_S,
    edges_per_vcpu_s: float = DEFAULT_EDGES_PER_VCPU_S,
    input_mb_per_vcpu_s: float = DEFAULT_INPUT_MB_PER_VCPU_S,
) -> WorkerSuggestion:
    """Workers and machine type for a target wall time, from a simple throughput model.

    vCPU-seconds = output MB / output rate + sampled edges / edge rate + input MB / read rate.
    Memory: the largest element a worker holds is one node shard's adjacency and node table,
    about 4x the input bytes / num_shards once decoded into numpy; twice that must fit.
    """
    sampled = est.num_seeds * sum(op.edges for op in est.ops)
    vcpu_seconds = (
        est.total_bytes / 1e6 / output_mb_per_vcpu_s
        + sampled / edges_per_vcpu_s
        + input_bytes / 1e6 / input_mb_per_vcpu_s
    )
    shard_gb = 4.0 * input_bytes / max(num_shards, 1) / 1e9
    need_gb = 2.0 * shard_gb
    machine = next(((n, c, g) for n, c, g in MACHINES if g / c * 2 >= need_gb), MACHINES[-1])
    name, vcpus, gb = machine
    workers = max(1, math.ceil(vcpu_seconds / (max(target_seconds, 1.0) * vcpus)))
    return WorkerSuggestion(name, workers, vcpu_seconds, gb, target_seconds)
