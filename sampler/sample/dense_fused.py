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


def _stacked(parts: list) -> tuple[np.ndarray, np.ndarray]:
    """Parts (bounds per sample, rows) as unique_parts' (P, n + 1) bounds and their rows."""
    offsets = np.cumsum([0] + [len(p[1]) for p in parts[:-1]])
    bounds = np.stack([p[0] + o for p, o in zip(parts, offsets, strict=True)])
    return np.ascontiguousarray(bounds, dtype=np.int64), _int64(
        np.concatenate([p[1] for p in parts])
    )


def seed_part(n_samples: int, seed_rows: np.ndarray):
    """A part: (bounds per sample, node rows); sample s produced rows[bounds[s]:bounds[s+1]]."""
    return np.arange(n_samples + 1, dtype=np.int64), _int64(seed_rows)


class Picks(typing.NamedTuple):
    """An op's picks per frontier row: row f (sample fs[f], node row fr[f]) picked the
    adjacency positions pos[bounds[f] : bounds[f + 1]], whose targets are the node rows
    tr[bounds[f] : bounds[f + 1]]; fbounds: the frontier rows of each sample."""

    fs: np.ndarray
    fr: np.ndarray
    fbounds: np.ndarray
    bounds: np.ndarray
    pos: np.ndarray
    tr: np.ndarray

    def targets(self, adj) -> tuple[np.ndarray, np.ndarray]:
        """The op's part: (bounds per sample, target rows)."""
        return self.bounds[self.fbounds], self.tr


def sample_op(dg, op, parts, sample_keys: np.ndarray, randomness) -> Picks:
    """`dense.sample_op` and its targets: the frontier is the inputs' distinct (sample, row)
    pairs with out-edges, in (sample, row) order; each draws from its own stream."""
    jit = _jit()
    n_rows = len(dg.nodes[op.source].rows)
    adj = dg.adjacency[op.edge_set]
    bounds, rows = jit.unique_parts(*_stacked(parts), n_rows)
    fs, fr, fbounds = jit.live_frontier(bounds, rows, adj.degrees)
    fp = dg.nodes[op.source].rows.fp
    prefix = randomness.stream_prefix(op.key)
    keys = np.ascontiguousarray(sample_keys, dtype=np.uint64)
    if op.strategy == RANDOM_UNIFORM:
        out = jit.pick_uniform(
            fs, fr, adj.starts, adj.degrees, adj.targets, keys, fp, prefix, int(op.sample_size)
        )
        return Picks(fs, fr, fbounds, *out)
    stream = jit.streams(fs, fr, keys, fp, prefix)
    rows, pos = kernels("sampler.sample.choose_jit").choose(
        adj.starts[fr],
        adj.degrees[fr],
        stream,
        sample_size=op.sample_size,
        strategy=op.strategy,
        weights=adj.weights,
    )
    out = jit.picks_by_row(_int64(rows), _int64(pos), len(fs), adj.targets)
    return Picks(fs, fr, fbounds, *out)


class Members:
    """dense._Members from parts: a node set's distinct (sample, row) pairs in a chunk and
    their output positions (the seed first, then by row)."""

    def __init__(self, parts: list, n_rows: int, n_samples: int, seed_row):
        self.n_rows = n_rows
        if parts:
            self.bounds, self.row = _jit().unique_parts(*_stacked(parts), n_rows)
        else:
            self.bounds, self.row = np.zeros(n_samples + 1, np.int64), np.zeros(0, np.int64)
        has_seed = seed_row is not None
        seed = _int64(seed_row) if has_seed else np.zeros(n_samples, np.int64)
        self.local, self.order = kernels("sampler.sample.assemble_jit").member_positions(
            self.bounds, self.row, seed, has_seed
        )

    @property
    def sample(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.bounds) - 1), np.diff(self.bounds))


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
