"""A probe: the real sampling kernels run for a few seeds, streaming over the edge tables.

Degree statistics cannot see locality (communities, triangles): on clustered graphs the
neighbourhoods of a subgraph overlap, so there are fewer distinct nodes than a model of
independent draws predicts. The probe measures it. Ops are grouped into levels (an op's
level is one more than its inputs'); each level reads the edge tables its ops use once
(id columns, plus `weight` for TOP_K / RANDOM_WEIGHTED), keeps the out-edges of the
level's frontier nodes only, and applies `sampler.sample.sampling.sample_frontier` to them, so a
probe subgraph has exactly the sizes the pipeline gives that seed with the same --seed.
Memory is proportional to the probe's neighbourhoods, not to the graph. With node
aggregation, one more pass collects the induced edges. Link seeds (`run_link_probe`): the
seed op yields both ends of each seed edge, whose pair is dropped from its own subgraph as
`sampler.sample.link` does; negatives are probed as pairs with a uniform target (`mixed`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

import numpy as np

from sampler import ids
from sampler.batches import EdgeBatch, SampledEdges, SampleNodes
from sampler.errors import UserError
from sampler.features import NUMPY_DTYPE
from sampler.io import graph_tables
from sampler.sample import link, temporal
from sampler.sample.adjacency import Adjacency, build_adjacency, make_seeds
from sampler.sample.plan import NODE, WEIGHT_FEATURE, SamplingPlan
from sampler.sample.randomness import Randomness
from sampler.sample.sampling import all_out_edges, sample_frontier, sample_frontier_temporal
from sampler.schema import GraphInfo


@dataclasses.dataclass
class ProbeResult:
    """Per probe seed (same order in every array): sizes of its subgraph."""

    sample_ids: list[bytes]
    nodes: dict[str, np.ndarray]  # node set -> nodes per subgraph
    edges: dict[str, np.ndarray]  # edge set -> edges per subgraph
    op_frontier: dict[str, np.ndarray]  # op -> distinct input nodes
    op_edges: dict[str, np.ndarray]  # op -> sampled edges

    def __len__(self) -> int:
        return len(self.sample_ids)


def op_levels(plan: SamplingPlan) -> list[list]:
    """The ops grouped by depth: level 1 reads only the seed op, and so on."""
    depth = {plan.seed_op: 0}
    for op in plan.ops:
        depth[op.name] = 1 + max(depth[name] for name in op.inputs)
    levels = collections.defaultdict(list)
    for op in plan.ops:
        levels[depth[op.name]].append(op)
    return [levels[d] for d in sorted(levels)]


def _out_edges(
    graph: GraphInfo,
    wanted: dict[str, np.ndarray],
    weighted: set[str],
    progress: Callable[[str, int], None],
    times: dict[str, str] | None = None,
) -> dict[str, Adjacency]:
    """Adjacency of every edge set in `wanted`, restricted to the wanted source nodes, with
    the weights of `weighted` sets and the time feature `times` names (edge set -> feature)."""
    times = times or {}
    parts: dict[str, list[EdgeBatch]] = collections.defaultdict(list)
    for pattern in sorted({graph.edge_sets[name].filename for name in wanted}):
        users = [n for n in wanted if graph.edge_sets[n].filename == pattern]
        specs = {}
        for name in users:
            info = graph.edge_sets[name]
            if name in weighted:
                specs[WEIGHT_FEATURE] = info.features[WEIGHT_FEATURE]
            if name in times:
                specs[times[name]] = info.features[times[name]]
        rows = 0
        columns = ("#source", "#target", *specs)
        for path, fmt in graph_tables.table_files(pattern, columns, f"edge set '{users[0]}'"):
            info = graph.edge_sets[users[0]]
            reader_info = dataclasses.replace(info, features=specs, reversed=False)
            for batch, _ in graph_tables.read_edge_file(path, fmt, reader_info):
                rows += len(batch)
                progress(graph_tables.display(pattern), rows)
                for name in users:
                    own = _own_features(graph, name, weighted, times)
                    reversed_ = graph.edge_sets[name].reversed
                    src, dst = (batch.dst, batch.src) if reversed_ else (batch.src, batch.dst)
                    nodes = wanted[name]
                    if not len(nodes):
                        continue
                    pos = np.minimum(np.searchsorted(nodes, src), len(nodes) - 1)
                    keep = np.flatnonzero(nodes[pos] == src)
                    if len(keep):
                        feats = {k: v[keep] for k, v in batch.features.items() if k in own}
                        parts[name].append(EdgeBatch(src[keep], dst[keep], feats))
    out = {}
    for name in wanted:
        specs = _own_features(graph, name, weighted, times)
        edges = EdgeBatch.concat(parts[name], specs)
        out[name] = build_adjacency(edges, WEIGHT_FEATURE if name in weighted else None)
    return out


def _own_features(graph, name: str, weighted: set[str], times: dict[str, str]) -> dict:
    """The features the probe reads of edge set `name`: its weight, its time."""
    features = graph.edge_sets[name].features
    wanted = [WEIGHT_FEATURE] if name in weighted else []
    wanted += [times[name]] if name in times else []
    return {f: features[f] for f in wanted}


def seed_times(graph, plan: SamplingPlan, seeds, progress) -> np.ndarray | None:
    """The seed time of each probe seed (the seed node's time feature, read in one pass over
    the seed node set's table); a seed not in its table gets the lowest time."""
    if plan.seed_time is None:
        return None
    dtype = temporal.BOUND_DTYPE[plan.seed_time.kind]
    lowest = np.iinfo(np.int64).min if dtype == np.int64 else -np.inf
    return node_values(graph, plan.seed_set, plan.seed_time.feature, seeds.node, progress, lowest)


def node_values(graph, name: str, feature: str, fps: np.ndarray, progress, missing):
    """The scalar `feature` of node set `name` for each of `fps`, read in one pass over its
    table; `missing` for a node not in the table."""
    info = graph.node_sets[name]
    spec = info.features[feature]
    wanted = np.unique(fps)
    found_fps, values, rows = [], [], 0
    for path, fmt in graph_tables.table_files(
        info.filename, ("#id", feature), f"node set '{name}'"
    ):
        reader = dataclasses.replace(info, features={feature: spec})
        for batch in graph_tables.read_node_file(path, fmt, reader):
            rows += len(batch)
            progress(graph_tables.display(info.filename), rows)
            pos = np.minimum(np.searchsorted(wanted, batch.fp), len(wanted) - 1)
            keep = np.flatnonzero(wanted[pos] == batch.fp)
            found_fps.append(batch.fp[keep])
            values.append(np.asarray(batch.features[feature])[keep])
    dtype = NUMPY_DTYPE[spec.kind]
    out = np.full(len(fps), missing).astype(dtype)
    if found_fps:
        fp, value = np.concatenate(found_fps), np.concatenate(values)
        order = np.argsort(fp, kind="stable")
        fp, value = fp[order], value[order]
        pos = np.minimum(np.searchsorted(fp, fps), max(len(fp) - 1, 0))
        found = fp[pos] == fps if len(fp) else np.zeros(len(fps), bool)
        out[found] = value[pos[found]]
    return out


def _edge_node_times(graph, plan, op, adjacency: Adjacency, progress) -> np.ndarray | None:
    """The time of each edge's target for an op with temporal.node_time_feature (a target
    not in its node set is never eligible: its edge is dropped by the run), else None."""
    if op.temporal is None or op.temporal.node_time is None:
        return None
    never = np.iinfo(np.int64).max if plan.seed_time.kind == temporal.INT else np.nan
    feature = op.temporal.node_time
    return node_values(graph, op.target, feature, adjacency.targets, progress, never)


def _induced_time_features(rules: dict) -> dict[str, str]:
    """Edge set -> the edge time feature its induced rules read (one per set: the probe
    reads one time feature per edge set; a set whose rules read two is refused)."""
    out = {}
    for name, set_rules in rules.items():
        features = {rule.edge_time for rule in set_rules}
        if len(features) > 1:
            raise UserError(
                f"estimate: the temporal ops of edge set '{name}' read different time features"
                f" ({', '.join(sorted(features))}); with --edge_aggregation_method node the"
                " probe reads one per edge set"
            )
        out[name] = features.pop()
    return out


def _eligible(graph, plan, name: str, rules, found: SampledEdges, seed, progress) -> np.ndarray:
    """Which induced edges `found` of edge set `name` one of its `rules` finds eligible at
    their sample's `seed` time, as the runs decide it (temporal.induced_eligible)."""
    kind = plan.seed_time.kind
    never = np.iinfo(np.int64).max if kind == temporal.INT else np.nan
    target = graph.edge_sets[name].target
    return temporal.induced_eligible(
        rules,
        seed,
        kind,
        lambda rule: np.asarray(found.features[rule.edge_time]),
        lambda rule: node_values(graph, target, rule.node_time, found.dst, progress, never),
    )


def _unique_edges(sample: np.ndarray, edge_key: np.ndarray) -> np.ndarray:
    """The sample of every distinct (sample, edge) pair: an edge counts once per subgraph."""
    if not len(sample):
        return sample
    return np.unique(np.stack([sample, edge_key]), axis=1)[0]


def run_probe(
    graph: GraphInfo,
    plan: SamplingPlan,
    seed_ids: np.ndarray,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
    times: np.ndarray | None = None,
) -> ProbeResult:
    """Samples the subgraphs of `seed_ids` (object array of bytes) and returns their sizes;
    `times`: each seed's time from the seeds table (a temporal spec), else its node's."""
    seeds = make_seeds(seed_ids, times)
    nodes = {plan.seed_set: SampleNodes(seeds.sample, seeds.node)}
    if seeds.time is None:
        times = seed_times(graph, plan, seeds, progress or (lambda table, rows: None))
    else:
        times = seeds.time
    return _probe(graph, plan, seeds.sample, seeds.sample_id, nodes, seed, progress, None, times)


def run_link_probe(
    graph: GraphInfo,
    plan: SamplingPlan,
    source: np.ndarray,
    target: np.ndarray,
    seed: int = 0,
    progress: Callable[[str, int], None] | None = None,
    keep_seed_edges: bool = False,
    times: np.ndarray | None = None,
) -> ProbeResult:
    """The sizes of the link examples of (source fp, target fp) pairs: the seed op yields both
    endpoints, and each example's pair is dropped from its own subgraph (`sampler.sample.link`)
    unless `keep_seed_edges`. The `_readout` sets count one node and one edge each. `times`:
    each pair's seed time, for a temporal spec (`probe_pairs`)."""
    seeds = link.make_link_seeds(source, target, times)
    order = np.argsort(seeds.sample)
    seeds = seeds.take(order)
    ends = {plan.link.source: [SampleNodes(seeds.sample, seeds.source)]}
    ends.setdefault(plan.link.target, []).append(SampleNodes(seeds.sample, seeds.target))
    nodes = {name: SampleNodes.concat(parts) for name, parts in ends.items()}
    exclusions = link._Exclusions(graph, plan, seeds.source, seeds.target, not keep_seed_edges)

    def excluded(edge_set, sample, u, v):
        return exclusions.mask(edge_set, np.searchsorted(seeds.sample, sample), u, v)

    sample_ids = [f"{s:016x}".encode() for s in seeds.sample.tolist()]
    result = _probe(
        graph, plan, seeds.sample, sample_ids, nodes, seed, progress, excluded, seeds.time
    )
    ones = np.ones(len(seeds), np.int64)
    result.nodes[link.READOUT] = ones
    result.edges[link.READOUT_SOURCE] = result.edges[link.READOUT_TARGET] = ones
    return result


def probe_pairs(graph, plan, input_seeds: str | None, count: int, progress=None):
    """(source fps, target fps, number of seed edges, seed times or None) of `count` seed
    edges drawn uniformly (a pure function of the rows): the rows of `input_seeds` or of the
    seed edge set. A temporal spec's seed times: the seeds table's `seed_time` column, else
    each drawn edge row's time, or for `input_seeds` the time of the pair's edge (a pair that
    is no edge is left out: the run dead-letters it)."""
    timed = plan.seed_time is not None
    feature = plan.seed_time.feature if timed else None
    info = graph.edge_sets[plan.link.edge_set]
    lookup = False
    if input_seeds:
        source, target, times = graph_tables.read_seed_pairs(
            input_seeds, None, temporal.table_time_kind(plan)
        )
        lookup = timed and times is None
        batches = [(source, target, times)]
    else:
        features = {feature: info.features[feature]} if timed else {}
        columns = ("#source", "#target", *features)
        batches = (
            (batch.src, batch.dst, batch.features[feature] if timed else None)
            for path, fmt in graph_tables.table_files(
                info.filename, columns, f"edge set '{info.name}'"
            )
            for batch, _ in graph_tables.read_edge_file(
                path, fmt, dataclasses.replace(info, features=features)
            )
        )
    keys, source, target, rows = (np.zeros(0, np.uint64),) * 3 + (0,)
    times = None
    for src, dst, time in batches:
        row = np.arange(rows, rows + len(src), dtype=np.uint64)
        rows += len(src)
        keys = np.concatenate([keys, ids.mix(ids.combine(src, dst, row))])
        source, target = np.concatenate([source, src]), np.concatenate([target, dst])
        if time is not None:
            times = np.asarray(time) if times is None else np.concatenate([times, time])
        keep = np.argsort(keys, kind="stable")[:count]
        keys, source, target = keys[keep], source[keep], target[keep]
        times = None if times is None else times[keep]
        if progress is not None:
            progress(input_seeds or graph_tables.display(info.filename), rows)
    if lookup:
        times, found = _pair_times(graph, plan, source, target, progress)
        source, target, times = source[found], target[found], times[found]
    return source, target, rows, times


def _pair_times(graph, plan, source, target, progress):
    """(time, found) of each (source fp, target fp) pair: the time of an edge of the seed
    edge set between them, read in one pass over its table."""
    info = graph.edge_sets[plan.link.edge_set]
    feature = plan.seed_time.feature
    features = {feature: info.features[feature]}
    wanted = np.unique(ids.combine(source, target))
    found_keys, values, rows = [], [], 0
    for path, fmt in graph_tables.table_files(
        info.filename, ("#source", "#target", feature), f"edge set '{info.name}'"
    ):
        for batch, _ in graph_tables.read_edge_file(
            path, fmt, dataclasses.replace(info, features=features)
        ):
            rows += len(batch)
            if progress is not None:
                progress(graph_tables.display(info.filename), rows)
            key = ids.combine(batch.src, batch.dst)
            pos = np.minimum(np.searchsorted(wanted, key), max(len(wanted) - 1, 0))
            keep = np.flatnonzero(wanted[pos] == key) if len(wanted) else pos[:0]
            found_keys.append(key[keep])
            values.append(np.asarray(batch.features[feature])[keep])
    dtype = NUMPY_DTYPE[info.features[feature].kind]
    out = np.zeros(len(source), dtype)
    found = np.zeros(len(source), bool)
    if found_keys:
        key, value = np.concatenate(found_keys), np.concatenate(values)
        order = np.argsort(key, kind="stable")
        key, value = key[order], value[order]
        pairs = ids.combine(source, target)
        pos = np.minimum(np.searchsorted(key, pairs), max(len(key) - 1, 0))
        found = key[pos] == pairs if len(key) else found
        out[found] = value[pos[found]]
    return out, found


def mixed(positives: ProbeResult, negatives: ProbeResult, k: int) -> ProbeResult:
    """One probe of positives and negatives in the proportion 1 : k (negatives repeated)."""
    parts = [positives] + [negatives] * (k if len(negatives) else 0)

    def cat(attr):
        names = getattr(positives, attr)
        return {n: np.concatenate([getattr(p, attr)[n] for p in parts]) for n in names}

    sample_ids = [i for p in parts for i in p.sample_ids]
    return ProbeResult(sample_ids, *(cat(a) for a in ("nodes", "edges", "op_frontier", "op_edges")))


def _probe(graph, plan, keys, sample_ids, seed_nodes, seed, progress, excluded=None, times=None):
    """Samples from `seed_nodes` (node set -> the seed op's (sample, node)) level by level;
    `excluded(edge set, sample, source, target)` marks edges to drop (link seeds); `times`:
    each seed's time (in the order of `keys`), for temporal ops."""
    report = progress or (lambda table, rows: None)
    order = np.argsort(keys)
    keys = keys[order]
    times = None if times is None else times[order]
    count = len(keys)
    time_features = {op.edge_set: op.temporal.edge_time for op in plan.ops if op.temporal}

    def per_sample(sample: np.ndarray) -> np.ndarray:
        if not len(sample):
            return np.zeros(count, np.int64)
        return np.bincount(np.searchsorted(keys, sample), minlength=count)

    produced: dict[str, SampleNodes] = {}
    sampled: dict[str, list[SampledEdges]] = collections.defaultdict(list)
    op_frontier, op_edges = {}, {}
    weighted = plan.weighted_edge_sets()
    for level in op_levels(plan):
        frontiers = {
            op.name: SampleNodes.concat(
                [seed_nodes[op.source] if n == plan.seed_op else produced[n] for n in op.inputs]
            ).unique()
            for op in level
        }
        wanted = collections.defaultdict(list)
        for op in level:
            wanted[op.edge_set].append(frontiers[op.name].node)
        wanted = {name: np.unique(np.concatenate(v)) for name, v in wanted.items()}
        adjacency = _out_edges(graph, wanted, weighted, report, time_features)
        for op in level:
            frontier = frontiers[op.name]
            if op.temporal is not None:
                edges = sample_frontier_temporal(
                    adjacency[op.edge_set],
                    frontier,
                    times[np.searchsorted(keys, frontier.sample)],
                    op=op,
                    kind=plan.seed_time.kind,
                    randomness=Randomness(seed),
                    edge_node_times=_edge_node_times(
                        graph, plan, op, adjacency[op.edge_set], report
                    ),
                )
            else:
                edges = sample_frontier(
                    adjacency[op.edge_set],
                    frontier,
                    sample_size=op.sample_size,
                    strategy=op.strategy,
                    op_key=op.key,
                    randomness=Randomness(seed),
                )
            if excluded is not None:
                edges = edges.take(~excluded(op.edge_set, edges.sample, edges.src, edges.dst))
            produced[op.name] = SampleNodes(edges.sample, edges.dst)
            sampled[op.edge_set].append(edges)
            op_frontier[op.name] = per_sample(frontiers[op.name].sample)
            op_edges[op.name] = per_sample(edges.sample)
    present: dict[str, SampleNodes] = {}
    for name in graph.node_sets:
        parts = [found for op, found in produced.items() if plan.output_set(op) == name]
        parts += [seed_nodes[name]] if name in seed_nodes else []
        present[name] = SampleNodes.concat(parts).unique()
    nodes = {name: per_sample(rows.sample) for name, rows in present.items()}
    if plan.aggregation == NODE:
        wanted = {
            name: np.unique(present[info.source].node) for name, info in graph.edge_sets.items()
        }
        rules = temporal.induced_rules(plan) if times is not None else {}
        adjacency = _out_edges(graph, wanted, set(), report, _induced_time_features(rules))
        edges = {}
        for name, info in graph.edge_sets.items():
            found = all_out_edges(adjacency[name], present[info.source])
            target = present[info.target]
            pairs = np.sort(ids.combine(target.sample, target.node))
            wanted_pairs = ids.combine(found.sample, found.dst)
            pos = np.minimum(np.searchsorted(pairs, wanted_pairs), max(len(pairs) - 1, 0))
            keep = pairs[pos] == wanted_pairs if len(pairs) else np.zeros(len(found), bool)
            if excluded is not None:
                keep &= ~excluded(name, found.sample, found.src, found.dst)
            if name in rules:  # as temporal.filter_induced keeps them in the runs
                seed = times[np.searchsorted(keys, found.sample)]
                keep &= _eligible(graph, plan, name, rules[name], found, seed, report)
            edges[name] = per_sample(_unique_edges(found.sample[keep], found.edge_key[keep]))
    else:
        edges = {}
        for name in graph.edge_sets:
            parts = sampled.get(name, [])
            if not parts:
                edges[name] = np.zeros(count, np.int64)
                continue
            edges[name] = per_sample(
                _unique_edges(
                    np.concatenate([p.sample for p in parts]),
                    np.concatenate([p.edge_key for p in parts]),
                )
            )
    return ProbeResult([sample_ids[i] for i in order], nodes, edges, op_frontier, op_edges)
