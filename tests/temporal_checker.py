"""An independent checker of temporal samples: it reads the records (TFRecord files of
tf.Examples, parsed here feature by feature) and the graph's tables (Parquet, with pyarrow), and
uses none of the sampler's sampling, encoding or reading code.

For every subgraph of a spec whose temporal ops all start at the seed (one hop from the seed
node, every op temporal), it checks that

- the context `seed_time` is the seed node's time in the tables, or with a seeds table's
  times, the time of the seed's row (`X:k` the k-th lowest of seed X's times);
- every edge of a temporal op's edge set is one of the seed's out-edges in the table that is
  eligible: its time <= the seed time (< when strictly before), >= seed time - window, and its
  target's time eligible when the op names a node time;
- 'most recent K' chose exactly the K latest eligible edges (ties: any of the tied, the
  multiset of times must be the K largest);
- 'uniform' picked min(K, eligible) distinct eligible edges;

and, over all subgraphs, `uniform_chi_square` tests that every eligible edge was picked
equally often (each eligible edge of a seed with c > K eligible edges is picked with
probability K / c).

Node-aggregated records (`check_induced`): an edge set's edges are exactly the table's edges
among the record's nodes that are eligible at the seed time under one of the ops on that set
(all of them for a set of no temporal op): no induced edge after the seed time.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import math
import struct

import pyarrow.parquet as pq


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def records(pattern: str) -> list[bytes]:
    """The records of TFRecord files (length, crc, data, crc), by the framing alone."""
    out = []
    for path in sorted(glob.glob(pattern)):
        data = open(path, "rb").read()
        i = 0
        while i < len(data):
            (n,) = struct.unpack_from("<Q", data, i)
            out.append(data[i + 12 : i + 12 + n])
            i += 12 + n + 4
    return out


def _fields(buf: bytes):
    """(field number, wire type, value) of a protobuf message, top level."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 2:
            n, i = _varint(buf, i)
            yield number, wire, buf[i : i + n]
            i += n
        elif wire == 0:
            v, i = _varint(buf, i)
            yield number, wire, v
        elif wire == 5:
            yield number, wire, buf[i : i + 4]
            i += 4
        else:
            raise ValueError(f"wire type {wire}")


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def parse_example(record: bytes) -> dict[str, list]:
    """tf.Example -> {key: values}: Example{1: Features{1: map<string, Feature>}}, Feature
    oneof bytes_list=1, float_list=2, int64_list=3, each a repeated field 1."""
    out = {}
    for _, _, features in _fields(record):
        for _, _, entry in _fields(features):
            key, value = None, []
            for number, _, part in _fields(entry):
                if number == 1:
                    key = part.decode()
                    continue
                for kind, _, lst in _fields(part):
                    for _, wire, v in _fields(lst):
                        if kind == 1:
                            value.append(v)
                        elif kind == 2:
                            if wire == 2:
                                value += list(struct.unpack(f"<{len(v) // 4}f", v))
                            else:
                                value.append(struct.unpack("<f", v)[0])
                        elif wire == 2:  # packed int64
                            j = 0
                            while j < len(v):
                                x, j = _varint(v, j)
                                value.append(_signed(x))
                        else:
                            value.append(_signed(v))
            out[key] = value
    return out


@dataclasses.dataclass(frozen=True)
class Op:
    """A temporal op as the checker sees it. `first_hop`: the op's inputs are the seed alone,
    so its edges are the seed's picks (counted and ranked); other ops' edges are checked for
    eligibility only."""

    edge_set: str
    k: int
    how: str  # "uniform" or "recent"
    edge_time: str
    node_time: str | None = None
    strict: bool = False
    window: float | None = None
    first_hop: bool = True


def _table(path: str) -> dict[str, list]:
    return pq.read_table(path).to_pydict()


def _id(v) -> bytes:
    return v if isinstance(v, bytes) else str(v).encode()


def _before(t, seed_time, strict: bool) -> bool:
    if isinstance(t, float) and math.isnan(t):
        return False
    return t < seed_time if strict else t <= seed_time


class Checker:
    """The graph's tables: nodes (id -> row) per node set, out-edges per (edge set, source)."""

    def __init__(self, tables: dict[str, str], edges: dict[str, tuple[str, str, str]]):
        """tables: node set -> Parquet file; edges: edge set -> (file, source set, target set)."""
        self.nodes = {}
        for name, path in tables.items():
            t = _table(path)
            self.nodes[name] = {_id(i): {k: t[k][r] for k in t} for r, i in enumerate(t["#id"])}
        self.out = {}
        self.ends = {}
        for name, (path, source, target) in edges.items():
            t = _table(path)
            out = collections.defaultdict(list)
            for r in range(len(t["#source"])):
                out[_id(t["#source"][r])].append({k: t[k][r] for k in t})
            self.out[name] = out
            self.ends[name] = (source, target)
        # (edge set, seed, seed time) -> [samples, eligible count, k, Counter of picks by edge]
        self.uniform = {}

    def eligible(self, op: Op, source: bytes, seed_time) -> list[dict]:
        """The out-edges of `source` in `op`'s table eligible at `seed_time`."""
        return [r for r in self.out[op.edge_set].get(source, []) if self._ok(op, r, seed_time)]

    def _ok(self, op: Op, row: dict, seed_time) -> bool:
        """Whether one edge (a row of `op`'s table) is eligible at `seed_time`."""
        t = row[op.edge_time]
        ok = _before(t, seed_time, op.strict)
        if op.window is not None:
            ok = ok and t >= seed_time - op.window
        if ok and op.node_time is not None:
            node = self.nodes[self.ends[op.edge_set][1]][_id(row["#target"])]
            ok = _before(node[op.node_time], seed_time, op.strict)
        return ok

    def check_induced(self, record: bytes, rules: dict[str, list[Op]], complete=True) -> None:
        """A node-aggregated record (--edge_aggregation_method node): each edge set of
        `rules` holds the table's edges among the record's nodes that are eligible at its seed
        time under one of the set's ops (every such edge for an empty list), no other edge
        (no induced edge after the seed time) and, when `complete`, none fewer."""
        ex = parse_example(record)
        seed_time = ex["context/seed_time"][0]
        where = f"sample {ex['context/sample_id'][0]!r} (seed time {seed_time})"
        for edge_set, ops in rules.items():
            source, target = self.ends[edge_set]
            src_ids, dst_ids = ex[f"nodes/{source}.#id"], ex[f"nodes/{target}.#id"]
            prefix = f"edges/{edge_set}."
            ends = zip(ex[prefix + "#source"], ex[prefix + "#target"], strict=True)
            got = collections.Counter((src_ids[s], dst_ids[d]) for s, d in ends)
            want = collections.Counter()
            present = set(dst_ids)
            for s in set(src_ids):
                for row in self.out[edge_set].get(s, []):
                    d = _id(row["#target"])
                    if d in present and (not ops or any(self._ok(o, row, seed_time) for o in ops)):
                        want[(s, d)] += 1
            for what, wrong in (("not eligible", got - want), ("missing", want - got)):
                if wrong and (complete or what == "not eligible"):
                    s, d = min(wrong)
                    raise AssertionError(f"{where}: {edge_set} edge {s!r} -> {d!r} is {what}")

    def check(
        self, record: bytes, seed_set: str, seed_time_feature: str, ops: list[Op], table=None
    ) -> None:
        """Raises AssertionError naming the sample on any violation. `table`: the seeds
        table's times ({seed id: [time of each of its rows]}) when it has a time column: the
        sample `X:k` (`X` the k-th time) has the k-th lowest of X's times."""
        ex = parse_example(record)
        seed = ex["context/seed_id"][0]
        seed_time = ex["context/seed_time"][0]
        sample = ex["context/sample_id"][0]
        where = f"sample {sample!r}"
        if table is None:
            truth = self.nodes[seed_set][seed][seed_time_feature]
        else:
            k = int(sample.rsplit(b":", 1)[1]) if b":" in sample else 0
            truth = sorted(table[seed])[k]
        assert seed_time == truth, f"{where}: seed_time {seed_time} != the table's {truth}"
        assert ex[f"nodes/{seed_set}.#id"][0] == seed, f"{where}: the seed is not node 0"
        for op in ops:
            source, target = self.ends[op.edge_set]
            prefix = f"edges/{op.edge_set}."
            src_ids = ex[f"nodes/{source}.#id"]
            dst_ids = ex[f"nodes/{target}.#id"]
            ends = zip(ex[prefix + "#source"], ex[prefix + "#target"], strict=True)
            got = collections.Counter(
                (src_ids[s], dst_ids[d], t)
                for (s, d), t in zip(ends, ex[prefix + op.edge_time], strict=True)
            )
            for (s, d, t), n in got.items():
                pool = collections.Counter(
                    (_id(r["#target"]), r[op.edge_time]) for r in self.eligible(op, s, seed_time)
                )
                assert pool[(d, t)] >= n, (
                    f"{where}: {op.edge_set} edge {s!r} -> {d!r} at {t} is not eligible at"
                    f" seed time {seed_time}"
                )
            if op.node_time is not None:
                for i, node in enumerate(dst_ids):
                    if target == seed_set and i == 0:
                        continue
                    nt = self.nodes[target][node][op.node_time]
                    assert _before(nt, seed_time, op.strict), (
                        f"{where}: node {node!r} of '{target}' at {nt} is after the seed time"
                    )
            if op.first_hop:
                self._first_hop(op, where, seed, seed_time, got)

    def _first_hop(self, op: Op, where: str, seed: bytes, seed_time, got) -> None:
        eligible = self.eligible(op, seed, seed_time)
        picks = [(d, t) for (s, d, t), n in got.items() for _ in range(n) if s == seed]
        want = min(op.k, len(eligible))
        assert len(picks) == want, f"{where}: {op.edge_set}: {len(picks)} edges, want {want}"
        if op.how == "recent":
            latest = sorted((r[op.edge_time] for r in eligible), reverse=True)[: op.k]
            times = sorted((t for _, t in picks), reverse=True)
            assert times == latest, f"{where}: most recent {times} != the latest {latest}"
        elif len(eligible) > op.k:
            tally = self.uniform.setdefault(
                (op.edge_set, seed, seed_time), [0, len(eligible), op.k, collections.Counter()]
            )
            tally[0] += 1
            tally[3].update(picks)

    def uniform_z(self) -> tuple[float, int]:
        """(z-score, degrees of freedom) of Pearson's statistic of the uniform picks: per seed
        with c > k eligible edges and N samples, each edge is picked N k / c times on average,
        and sum (O - E)^2 / (N p (1 - p) c / (c - 1)) is chi-square with c - 1 degrees (the
        picks of a sample are k distinct edges); summed over seeds, z = (X - dof) / sqrt(2 dof)."""
        stat, dof = 0.0, 0
        for n, c, k, counts in self.uniform.values():
            assert len(counts) <= c
            p = k / c
            scale = n * p * (1 - p) * c / (c - 1)
            stat += sum((counts.get(key, 0) - n * p) ** 2 for key in self._keys(counts, c)) / scale
            dof += c - 1
        assert dof > 0, "no seed had more eligible edges than its sample size"
        return (stat - dof) / math.sqrt(2 * dof), dof

    @staticmethod
    def _keys(counts, c: int):
        """The c eligible edges' keys: those picked, then never-picked placeholders."""
        keys = list(counts)
        return keys + [None] * (c - len(keys))

    def check_link(
        self, record: bytes, seed_edge_set: str, seed_time_feature: str, ops, table=None
    ) -> None:
        """A link example: its seed time is its positive's edge's time (ids without escapes,
        one edge per pair), or with `table` ({(source, target): [time of each row]}, a seeds
        table's times) the k-th lowest of its pair's times for `a->b:k`; the seed pair is in
        none of its edge sets that read the seed table, and every edge of a temporal op's set
        is eligible (strictly before by default).
        """
        ex = parse_example(record)
        sample = ex["context/sample_id"][0]
        where = f"sample {sample!r}"
        positive = sample.split(b"#neg")[0]
        pair = positive.split(b":")[0]
        a, b = pair.split(b"->")
        if table is not None:
            k = int(positive.split(b":")[1]) if b":" in positive else 0
            times = [sorted(table[a, b])[k]]
        else:
            edges = self.out[seed_edge_set][a]
            times = [r[seed_time_feature] for r in edges if _id(r["#target"]) == b]
        assert len(times) == 1, f"{where}: the positive {pair!r} is not one edge of the table"
        seed_time = ex["context/seed_time"][0]
        assert seed_time == times[0], f"{where}: seed_time {seed_time} != the edge's {times[0]}"
        sa, sb = ex["context/seed_id"][0].split(b"->")
        source, target = self.ends[seed_edge_set]
        for op in ops:
            s_set, t_set = self.ends[op.edge_set]
            prefix = f"edges/{op.edge_set}."
            src_ids, dst_ids = ex[f"nodes/{s_set}.#id"], ex[f"nodes/{t_set}.#id"]
            ends = zip(ex[prefix + "#source"], ex[prefix + "#target"], strict=True)
            for (s, d), t in zip(ends, ex[prefix + op.edge_time], strict=True):
                u, v = src_ids[s], dst_ids[d]
                if op.edge_set == seed_edge_set:
                    assert (u, v) != (sa, sb), f"{where}: the seed edge {u!r}->{v!r} is visible"
                pool = {
                    (_id(r["#target"]), r[op.edge_time]) for r in self.eligible(op, u, seed_time)
                }
                assert (v, t) in pool, (
                    f"{where}: {op.edge_set} edge {u!r} -> {v!r} at {t} is not eligible at"
                    f" seed time {seed_time}"
                )
