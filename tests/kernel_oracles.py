"""Oracles of the compiled kernels: the same results computed another way, in numpy or plain
Python, for the tests only (the product runs one implementation per kernel: the compiled one).

Each is what the product ran before its kernel was compiled (tests/test_kernel_digests.py
pins the records those made), kept here to compare the kernels with on inputs built for the
corners (tests/test_tables_jit.py, tests/test_compiled_kernels.py, tests/test_lp_kernels.py).
"""

from __future__ import annotations

import struct

import google_crc32c
import numpy as np

from sampler import ids
from sampler.arrays import expand_ranges, sorted_unique_index
from sampler.sample.adjacency import _adjacency
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K
from sampler.sample.randomness import draw

# --------------------------------------------------------------------------- tables


def fingerprint_numpy(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """`ids_jit.fingerprints`: one pass over the rows per byte position of the longest id."""
    offsets = offsets.astype(np.int64)
    lengths = offsets[1:] - offsets[:-1]
    starts = offsets[:-1]
    h = np.full(len(starts), np.uint64(0xCBF29CE484222325), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for pos in range(int(lengths.max()) if len(lengths) else 0):
            live = np.flatnonzero(lengths > pos)
            byte = data[starts[live] + pos].astype(np.uint64)
            h[live] = (h[live] ^ byte) * np.uint64(0x100000001B3)
    return ids.combine(h, lengths.astype(np.uint64))


def lookup_numpy(table: np.ndarray, fps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`NodeTable.lookup` (`ids_jit.find_sorted`) by numpy's binary search."""
    pos = np.searchsorted(table, fps)
    if len(table) == 0:
        return np.zeros(len(fps), np.int64), np.zeros(len(fps), bool)
    pos_c = np.minimum(pos, len(table) - 1)
    return pos_c, (pos < len(table)) & (table[pos_c] == fps)


def build_adjacency_numpy(edges, weight_feature: str | None = None):
    """`adjacency.build_adjacency` by numpy's lexsort."""
    n = len(edges)
    content = ids.row_fingerprint(edges.features, n)
    order = np.lexsort((content, edges.dst, edges.src))
    src, dst = edges.src[order], edges.dst[order]
    # Rank among parallel edges (same source and target) so each edge has a key.
    new_pair = np.ones(n, dtype=bool)
    new_pair[1:] = (src[1:] != src[:-1]) | (dst[1:] != dst[:-1])
    pair_start = (
        np.maximum.accumulate(np.where(new_pair, np.arange(n), 0)) if n else np.zeros(0, int)
    )
    rank = (np.arange(n) - pair_start).astype(np.uint64)
    edge_keys = ids.combine(src, dst, rank)
    nodes, starts = sorted_unique_index(src)
    return _adjacency(edges, order, weight_feature, nodes, starts, dst, edge_keys)


def edge_facts_numpy(graph, dense_graph) -> dict[str, int]:
    """`dense.edge_facts` from the edge list of each CSR (every edge's source row and target
    row) and `graph_checks.edge_shape_counts`."""
    from sampler.graph_checks import edge_shape_counts

    out = {}
    for name, info in graph.edge_sets.items():
        adj = dense_graph.adjacency[name]
        src = np.repeat(np.arange(len(adj.degrees)), adj.degrees)
        dst = adj.targets[expand_ranges(adj.starts, adj.degrees)[1]]
        loops, parallel = edge_shape_counts(src, dst, info.source == info.target)
        out[f"edges_with_missing_endpoint/{name}"] = dense_graph.dropped_edges.get(name, 0)
        out[f"self_loops/{name}"] = loops
        out[f"parallel_edges/{name}"] = parallel
    return out


def frame_python(buf: bytes, pos: int, left: int):
    """`tfrecord_jit.frame`: up to `left` whole records from buf[pos:], one checksum call each."""
    starts: list[int] = []
    size = len(buf)
    while left:
        if pos + 12 > size:
            break
        end = pos + 12 + struct.unpack_from("<Q", buf, pos)[0]
        if end + 4 > size:
            break
        starts.append(pos + 12)
        pos = end + 4
        left -= 1
    ends = [*starts[1:], pos + 12]  # each record's data ends 4 bytes before the next header
    crc = google_crc32c.value
    data_crcs = [crc(buf[a : b - 16]) for a, b in zip(starts, ends[: len(starts)], strict=True)]
    local = np.array(starts, np.int64)
    lengths = _words(buf, local - 12, 8)
    expected = [_masked(crc(struct.pack("<Q", int(n)))) for n in lengths.tolist()]
    header_ok = np.array(expected, np.int64).reshape(-1) == _words(buf, local - 4, 4)
    data_ok = np.array([_masked(c) for c in data_crcs], np.int64).reshape(-1) == _words(
        buf, local + lengths, 4
    )
    return local, lengths, header_ok, data_ok, pos


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _words(buf: bytes, at: np.ndarray, size: int) -> np.ndarray:
    data = np.frombuffer(buf, dtype=np.uint8)
    raw = np.ascontiguousarray(data[at[:, None] + np.arange(size)])
    return raw.view("<u4" if size == 4 else "<u8").reshape(-1).astype(np.int64)


# --------------------------------------------------------------------------- choose


def _floyd(stream: np.ndarray, degree: np.ndarray, k: int) -> np.ndarray:
    """Uniform k-subsets of range(degree) per row, without replacement: (rows, k)."""
    chosen = np.empty((len(degree), k), dtype=np.int64)
    for i in range(k):
        j = degree - k + i
        t = np.minimum((draw(stream, i) * (j + 1)).astype(np.int64), j)
        if i:
            taken = (chosen[:, :i] == t[:, None]).any(axis=1)
            t = np.where(taken, j, t)
        chosen[:, i] = t
    return chosen


def _top_by_score(rows: np.ndarray, positions: np.ndarray, score: np.ndarray, k: int):
    """Per row, the k positions with the highest score (ties: lower position first)."""
    order = np.lexsort((positions, -score, rows))
    rows_s = rows[order]
    first = np.ones(len(rows_s), dtype=bool)
    first[1:] = rows_s[1:] != rows_s[:-1]
    group_start = np.maximum.accumulate(np.where(first, np.arange(len(rows_s)), 0))
    keep = (np.arange(len(rows_s)) - group_start) < k
    return rows_s[keep], positions[order][keep]


def choose_numpy(start, degree, stream, *, sample_size: int, strategy: str, weights):
    """`choose_jit.choose` in numpy passes over the whole frontier: (row index, position)."""
    k = sample_size
    if strategy == RANDOM_UNIFORM:
        small = degree <= k
        rows_a, pos_a = expand_ranges(start[small], degree[small])
        rows_a = np.flatnonzero(small)[rows_a]
        big = np.flatnonzero(~small)
        if not len(big):  # sample_size at or above every degree: no draws, whatever k is
            return rows_a, pos_a
        picks = _floyd(stream[big], degree[big], k) + start[big][:, None]
        return np.concatenate([rows_a, np.repeat(big, k)]), np.concatenate([pos_a, picks.ravel()])
    rows, positions = expand_ranges(start, degree)
    weight = weights[positions]
    if strategy == TOP_K:
        score = weight
    elif strategy == RANDOM_WEIGHTED:
        # Efraimidis-Spirakis: the k largest log(u)/w; weight <= 0 is never sampled.
        u = draw(stream[rows], positions - start[rows])
        with np.errstate(divide="ignore", invalid="ignore"):
            score = np.where(weight > 0, np.log(np.maximum(u, 2.0**-60)) / weight, -np.inf)
        ok = np.isfinite(score)
        rows, positions, score = rows[ok], positions[ok], score[ok]
    else:
        raise ValueError(f"unsupported strategy {strategy}")
    return _top_by_score(rows, positions, score, k)


def row_fingerprint_numpy(columns: dict, n: int) -> np.ndarray:
    """`ids.row_fingerprint`, each word combined in numpy passes (`ids_jit.combine_words`)."""
    h = np.zeros(n, dtype=np.uint64)
    for name in sorted(columns) if n else []:
        col = columns[name]
        if col.dtype == object:
            flat = col.reshape(n, -1)
            for j in range(flat.shape[1]):
                h = ids.combine(h, ids.fingerprint(flat[:, j].tolist()))
        else:
            raw = np.ascontiguousarray(col).reshape(n, -1).view(np.uint8)
            words = np.zeros((n, (raw.shape[1] + 7) // 8 * 8), dtype=np.uint8)
            words[:, : raw.shape[1]] = raw
            for word in words.view(np.uint64).T:
                h = ids.combine(h, word)
    return h


# --------------------------------------------------------------------------- sampling


def unique_edges_numpy(s, src, dst, ekey) -> np.ndarray:
    """`assemble_jit.unique_edges`'s indices: the edges by (sample, source index, target
    index, edge key), each (sample, edge key) once (where it repeats its predecessor)."""
    order = np.lexsort((ekey, dst, src, s))
    s, ekey = s[order], ekey[order]
    first = np.ones(len(s), dtype=bool)
    first[1:] = (s[1:] != s[:-1]) | (ekey[1:] != ekey[:-1])
    return order[first]


class MembersNumpy:
    """`dense.Members` from (sample, row) pairs: the distinct pairs by sample then row, and
    their output positions (the seed first, then by row)."""

    def __init__(self, sample, row, n_rows: int, n_samples: int, seed_row):
        self.n_rows = max(int(n_rows), 1)
        keys = np.unique(np.asarray(sample, np.int64) * self.n_rows + np.asarray(row, np.int64))
        self.keys = keys
        self.sample, self.row = keys // self.n_rows, keys % self.n_rows
        self.bounds = np.searchsorted(self.sample, np.arange(n_samples + 1))
        is_seed = np.zeros(len(keys), bool)
        if seed_row is not None:
            is_seed = self.row == np.asarray(seed_row)[self.sample]
        self.order = np.lexsort((self.row, ~is_seed, self.sample))
        self.local = np.empty(len(keys), np.int64)
        self.local[self.order] = np.arange(len(keys)) - self.bounds[self.sample[self.order]]

    def find(self, sample, row) -> tuple[np.ndarray, np.ndarray]:
        q = np.asarray(sample, np.int64) * self.n_rows + np.asarray(row, np.int64)
        pos = np.minimum(np.searchsorted(self.keys, q), max(len(self.keys) - 1, 0))
        found = self.keys[pos] == q if len(self.keys) else np.zeros(len(q), bool)
        return np.where(found, self.local[pos] if len(self.keys) else 0, 0), found


def sample_chunk_numpy(graph, plan, dg, seeds, randomness, counters):
    """`dense.sample_chunk_columns` step by step in numpy passes over the whole chunk (what
    the product ran before its sampling was compiled): the same SubgraphChunk."""
    from sampler.batches import take_features
    from sampler.sample.plan import NODE
    from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk

    seed_rows, found = dg.nodes[plan.seed_set].lookup(seeds.node)
    counters["seeds_not_in_node_set"] += int((~found).sum())
    seeds, seed_rows = seeds.take(np.flatnonzero(found)), seed_rows[found]
    n = len(seeds)
    produced = {plan.seed_op: (np.arange(n), seed_rows)}
    picked: dict[str, list] = {}
    for op in plan.ops:
        parts = [produced[name] for name in op.inputs]
        frontier = MembersNumpy(
            np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            len(dg.nodes[op.source].rows), n, None,
        )  # fmt: skip
        adj = dg.adjacency[op.edge_set]
        s, r = frontier.sample, frontier.row
        live = np.flatnonzero(adj.degrees[r] > 0)
        s, r = s[live], r[live]
        stream = randomness.stream(op.key, seeds.sample[s], dg.nodes[op.source].rows.fp[r])
        rows, pos = choose_numpy(
            adj.starts[r], adj.degrees[r], stream,
            sample_size=op.sample_size, strategy=op.strategy, weights=adj.weights,
        )  # fmt: skip
        picked.setdefault(op.edge_set, []).append((s[rows], r[rows], pos))
        produced[op.name] = (s[rows], adj.targets[pos])
    members = {}
    for name, table in dg.nodes.items():
        parts = [produced[op] for op in produced if plan.output_set(op) == name]
        s = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        r = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        seed_row = seed_rows if name == plan.seed_set else None
        members[name] = MembersNumpy(s, r, len(table.rows), n, seed_row)
    if plan.aggregation == NODE:
        picked = {}
        for name, info in graph.edge_sets.items():
            adj, m = dg.adjacency[name], members[info.source]
            rows, pos = expand_ranges(adj.starts[m.row], adj.degrees[m.row])
            picked[name] = [(m.sample[rows], m.row[rows], pos)]
    edge_rows = {}
    for name, info in graph.edge_sets.items():
        adj = dg.adjacency[name]
        parts = picked.get(name, [])
        s, src_row, pos = (
            np.concatenate([p[k] for p in parts]) if parts else np.zeros(0, np.int64)
            for k in range(3)
        )
        src, _ = members[info.source].find(s, src_row)
        dst, ok = members[info.target].find(s, adj.targets[pos])
        s, src, dst, pos = s[ok], src[ok], dst[ok], pos[ok]
        chosen = unique_edges_numpy(s, src, dst, adj.edge_keys[pos])
        s, src, dst, pos = s[chosen], src[chosen], dst[chosen], pos[chosen]
        bounds = np.searchsorted(s, np.arange(n + 1))
        edge_rows[name] = (np.stack([src, dst]), take_features(adj.features, pos), bounds)
    node_rows = {
        name: NodeRowsOfChunk(dg.nodes[name].rows, m.row[m.order], m.bounds)
        for name, m in members.items()
    }
    return SubgraphChunk(seeds.sample_id, seeds.seed_id, node_rows, edge_rows)


# --------------------------------------------------------------------------- temporal


def temporal_picks(
    fs, fr, starts, degrees, targets, times, lo, hi, node_times, streams, k, how, weights=None
):
    """`temporal_dense.sample_op`'s picks in plain Python, row by row: (pick bounds per
    frontier row, positions). `how`: 'uniform', 'recent', TOP_K or RANDOM_WEIGHTED; `streams`:
    each frontier row's stream key; `node_times` None when the op has none."""
    bounds, out = [0], []
    for f in range(len(fr)):
        s, r = int(fs[f]), int(fr[f])
        row = range(int(starts[r]), int(starts[r] + degrees[r]))
        elig = []
        for e in row:
            t = times[e]
            ok = lo[s] <= t <= hi[s]
            if ok and node_times is not None:
                ok = node_times[targets[e]] <= hi[s]
            if ok:
                elig.append(e)
        stream = np.array([streams[f]], np.uint64)
        if how == "recent":
            got = sorted(elig, key=lambda e: (-times[e], e))[:k]
        elif how == "uniform" and len(elig) <= k:
            got = list(elig)
        elif how == "uniform":  # Floyd's over the eligible list
            got, c = [], len(elig)
            for step in range(k):
                j = c - k + step
                t = min(int(draw(stream, step)[0] * float(j + 1)), j)
                got.append(elig[j] if elig[t] in got else elig[t])
        elif how == TOP_K:
            w = [float(weights[e]) for e in elig]
            order = sorted(range(len(elig)), key=lambda i: (np.isnan(w[i]), -w[i], elig[i]))
            got = [elig[i] for i in order[:k]]
        elif how == RANDOM_WEIGHTED:
            scored = []
            for e in elig:
                u = draw(stream, e - int(starts[r]))[0]
                w = np.float64(weights[e])
                if w > 0:
                    score = np.log(np.maximum(u, 2.0**-60)) / w
                    if np.isfinite(score):
                        scored.append((-score, e))
            got = [e for _, e in sorted(scored)[:k]]
        else:
            raise ValueError(how)
        out += got
        bounds.append(len(out))
    return np.array(bounds, np.int64), np.array(out, np.int64)
