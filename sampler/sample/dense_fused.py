"""The dense sampling's fused stages (issue 33): `dense.sample_chunk_with`'s Steps by the
compiled kernels of sampler/sample/sample_jit.py.

Per op, one kernel goes from the frontier (the op's distinct (sample, row) inputs with
out-edges) to its picks and their targets; per edge set, one kernel goes from the picks to
the ordered, deduplicated (source, target) output positions and adjacency positions, sample
by sample. The step-by-step path (`dense.STEPS`) makes the same records in a dozen numpy
passes; it stays as the reference (tests/test_sampling_compiled.py) and for the link
seeds' exclusions (sampler/sample/link.py), which filter picks between the stages.
"""

from __future__ import annotations

import typing

import numpy as np

from sampler.batches import take_features
from sampler.jit_loader import kernels
from sampler.sample.plan import RANDOM_UNIFORM


def _jit():
    return kernels("sampler.sample.sample_jit")  # compiled (sampler/jit.py)


def _int64(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.int64)


class Picks(typing.NamedTuple):
    """An op's picks per frontier row: row f (sample fs[f], node row fr[f]) picked the
    adjacency positions pos[bounds[f] : bounds[f + 1]], whose targets are (ts, tr)."""

    fs: np.ndarray
    fr: np.ndarray
    bounds: np.ndarray
    pos: np.ndarray
    ts: np.ndarray
    tr: np.ndarray

    def targets(self, adj) -> tuple[np.ndarray, np.ndarray]:
        return self.ts, self.tr


def sample_op(dg, op, parts, sample_keys: np.ndarray, randomness) -> Picks:
    """`dense.sample_op` and its targets: the frontier is the inputs' distinct (sample, row)
    pairs with out-edges, in (sample, row) order; each draws from its own stream."""
    jit = _jit()
    n_rows = len(dg.nodes[op.source].rows)
    adj = dg.adjacency[op.edge_set]
    sample = np.concatenate([p[0] for p in parts])
    row = np.concatenate([p[1] for p in parts])
    bounds, rows = kernels("sampler.sample.assemble_jit").unique_rows(
        _int64(sample), _int64(row), len(sample_keys), n_rows
    )
    fs, fr = jit.live_frontier(bounds, rows, adj.degrees)
    fp = dg.nodes[op.source].rows.fp
    prefix = randomness.stream_prefix(op.key)
    keys = np.ascontiguousarray(sample_keys, dtype=np.uint64)
    if op.strategy == RANDOM_UNIFORM:
        out = jit.pick_uniform(
            fs, fr, adj.starts, adj.degrees, adj.targets, keys, fp, prefix, int(op.sample_size)
        )
        return Picks(fs, fr, *out)
    stream = jit.streams(fs, fr, keys, fp, prefix)
    start = adj.starts[fr]
    rows, pos = kernels("sampler.sample.choose_jit").choose(
        start,
        adj.degrees[fr],
        stream,
        sample_size=op.sample_size,
        strategy=op.strategy,
        weights=adj.weights,
    )
    return Picks(fs, fr, *jit.picks_by_row(_int64(rows), _int64(pos), fs, adj.targets))


class Induced(typing.NamedTuple):
    """Node aggregation's candidates: every out-edge of every member (sample, row)."""

    fs: np.ndarray
    fr: np.ndarray


def induced(graph, dg, members) -> dict:
    return {
        name: [Induced(_int64(members[info.source].sample), members[info.source].row)]
        for name, info in graph.edge_sets.items()
    }


def edge_rows(adj, parts: list, sources, targets):
    """An edge set's rows of a chunk ((2, m) output positions, features, bounds per sample)
    from its picks: `dense._step_edge_rows`, in one kernel."""
    empty = np.zeros(0, np.int64)
    if parts and isinstance(parts[0], Induced):
        (part,) = parts
        fs, fr = part.fs, part.fr
        lo = adj.starts[fr]
        hi = lo + adj.degrees[fr]
        picks, identity = empty, True
    elif parts:
        offsets = np.cumsum([0] + [len(p.pos) for p in parts])
        fs = np.concatenate([p.fs for p in parts])
        fr = np.concatenate([p.fr for p in parts])
        lo = np.concatenate([p.bounds[:-1] + o for p, o in zip(parts, offsets, strict=False)])
        hi = np.concatenate([p.bounds[1:] + o for p, o in zip(parts, offsets, strict=False)])
        picks, identity = np.concatenate([p.pos for p in parts]), False
    else:
        fs = fr = lo = hi = picks = empty
        identity = False
    part_bounds = np.cumsum([0] + [len(p.fs) for p in parts]).astype(np.int64)
    edges, pos, bounds = _jit().chunk_edges(
        fs,
        fr,
        lo,
        hi,
        picks,
        identity,
        part_bounds,
        len(sources.bounds) - 1,
        sources.bounds,
        sources.row,
        sources.local,
        sources.n_rows,
        targets.bounds,
        targets.row,
        targets.local,
        targets.n_rows,
        adj.targets,
        adj.edge_keys,
    )
    return edges, take_features(adj.features, pos), bounds


def _steps():
    from sampler.sample.dense import Steps

    return Steps(sample_op, induced, edge_rows)


FUSED = _steps()
