"""Tables to a graph, compiled: the kernels of the id fingerprints, the fingerprint lookups of
densify, the CSR build and the TFRecord framing give exactly what their oracles give
(tests/kernel_oracles.py: the numpy and Python code they replaced).

Each kernel is compared with its oracle (and the fingerprints with an independent
pure-Python FNV-1a + splitmix64) on the edge cases: nothing, ids of 0, 63, 64 and 65 bytes,
unicode, duplicates, fingerprints that share their top bits (one crowded directory entry),
a hub with thousands of edges (the stable-sort branch), parallel and fully equal edges (the
order of ties), and targets missing from the node set.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from sampler import ids, ids_jit, node_table
from sampler.batches import EdgeBatch, NodeBatch, bytes_array
from sampler.node_table import build_node_table
from sampler.sample import adjacency, adjacency_jit, dense
from tests import kernel_oracles as oracles
from tests.test_long_ids import reference


def _buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int32)[arr.offset : arr.offset + n + 1]
    data = arr.buffers()[2]
    return (np.frombuffer(data, np.uint8) if data is not None else np.zeros(1, np.uint8)), offsets


EDGE_IDS = [b"", b"a", b"\x00", "é".encode(), "日本語".encode(), b"x" * 63, b"y" * 64, b"z" * 65]
EDGE_IDS += [b"\xff" * 200, b"a", b"", b"y" * 64]  # duplicates


@pytest.mark.parametrize(
    "values", [EDGE_IDS, [], [b""], [b""] * 3, [b"n%d" % i for i in range(999)]]
)
def test_fingerprints_compiled_numpy_and_reference_agree(values):
    arr = pa.array(values, pa.binary())
    want = np.array([reference(v) for v in values], np.uint64)
    if values:
        data, offsets = _buffers(arr)
        np.testing.assert_array_equal(ids_jit.fingerprints(data, offsets), want)
        np.testing.assert_array_equal(oracles.fingerprint_numpy(data, offsets), want)
        sliced = arr.slice(1)  # offsets that do not start at 0
        np.testing.assert_array_equal(ids_jit.fingerprints(*_buffers(sliced)), want[1:])
    np.testing.assert_array_equal(ids.fingerprint(arr), want)


@pytest.mark.parametrize("n", [0, 1, 700])
def test_row_fingerprint_compiled_is_numpy(n):
    rng = np.random.default_rng(n)
    columns = {
        "f": rng.standard_normal((n, 3)).astype(np.float32),  # 12 bytes: a padded word
        "i": rng.integers(-5, 5, n),
        "b": bytes_array([b"x%d" % (i % 7) for i in range(n)]),
        "v": np.repeat(rng.integers(0, 2, (n, 1)).astype(np.int8), 9, axis=1),  # 9 bytes
    }
    want = oracles.row_fingerprint_numpy(columns, n)
    np.testing.assert_array_equal(ids.row_fingerprint(columns, n), want)
    if n > 1:
        assert len(np.unique(want)) > 1


@pytest.mark.parametrize(
    "table",
    [
        np.array([7], np.uint64),
        np.sort(ids.mix(np.arange(5000, dtype=np.uint64))),
        np.arange(0, 3000, 3, dtype=np.uint64),  # all share their top bits: one entry
        np.array([0, 1, 2**63, 2**64 - 2, 2**64 - 1], np.uint64),
    ],
)
def test_find_sorted_is_numpy_search(table):
    rng = np.random.default_rng(1)
    query = np.concatenate(
        [
            table,
            table[::-1],
            table + np.uint64(1),
            table - np.uint64(1),
            rng.integers(0, 2**63, 500, dtype=np.int64).astype(np.uint64) * np.uint64(2),
            np.array([0, 2**64 - 1, 2**63], np.uint64),
        ]
    )
    for q in (query, query[:0], np.repeat(table[:1], 4)):
        got_pos, got_found = ids_jit.find_sorted(table, q)
        want_pos, want_found = oracles.lookup_numpy(table, q)
        np.testing.assert_array_equal(got_pos, want_pos)
        np.testing.assert_array_equal(got_found, want_found)
        rows = node_table.NodeTable(NodeBatch(table, bytes_array([b""] * len(table)), {}), 0)
        got_pos, got_found = rows.lookup(q)  # ids_jit.find_sorted_into numpy's arrays
        np.testing.assert_array_equal(got_pos, want_pos)
        np.testing.assert_array_equal(got_found, want_found)


def _edges(rng, n_edges: int, n_nodes: int, hub: int = 0) -> EdgeBatch:
    nodes = ids.mix(np.arange(n_nodes, dtype=np.uint64))
    src = nodes[rng.integers(0, n_nodes, n_edges)]
    dst = nodes[rng.integers(0, n_nodes, n_edges)]
    if hub:
        src[:hub] = nodes[0]  # a hub: one bucket far above the insertion sort's size
        dst[: hub // 2] = nodes[1]  # its parallel edges
    weight = rng.integers(0, 3, n_edges).astype(np.float64)  # equal contents: ties
    return EdgeBatch(src, dst, {"weight": weight})


@pytest.mark.parametrize(
    "n_edges,n_nodes,hub", [(0, 1, 0), (1, 1, 0), (300, 4, 0), (5000, 800, 2000)]
)
def test_csr_sort_is_lexsort(n_edges, n_nodes, hub):
    edges = _edges(np.random.default_rng(n_edges), n_edges, n_nodes, hub)
    content = ids.row_fingerprint(edges.features, n_edges)
    got, src, dst = adjacency_jit.csr_sort(edges.src, edges.dst, content)
    want = np.lexsort((content, edges.dst, edges.src))
    np.testing.assert_array_equal(got, want)  # the same order, ties in input order included
    np.testing.assert_array_equal(src, edges.src[want])
    np.testing.assert_array_equal(dst, edges.dst[want])
    _check_pairs(edges.src, edges.dst)


def _check_pairs(src: np.ndarray, dst: np.ndarray) -> None:
    """csr_sort_pairs: the (src, dst) that np.lexsort((dst, src)) orders (edges without
    features: no order or content comes back)."""
    want = np.lexsort((dst, src))
    s, d = adjacency_jit.csr_sort_pairs(src, dst)
    np.testing.assert_array_equal(s, src[want])
    np.testing.assert_array_equal(d, dst[want])


@pytest.mark.parametrize(
    "n_edges,hubs",
    [(4096, 600), (131_071, 3000), (131_072, 3000), (280_000, 3000), (280_000, 270_000)],
)
def test_csr_sort_is_lexsort_in_passes(n_edges, hubs):
    """Both sides of the first pass's second bit (from 2**17 edges) and of the second passes'
    largest bucket (2**18 edges: a larger one is sorted whole): sources that share their top
    bits (one crowded first bucket), two hubs, parallel edges of hubs and of small sources,
    equal contents (ties in input order)."""
    rng = np.random.default_rng(n_edges)
    nodes = ids.mix(np.arange(n_edges // 4, dtype=np.uint64))
    crowded = np.uint64(7 << 53) + np.arange(64, dtype=np.uint64) * np.uint64(1 << 40)
    nodes[:64] = crowded  # one first bucket, split among second buckets
    src = nodes[rng.integers(0, len(nodes), n_edges)]
    dst = nodes[rng.integers(0, len(nodes), n_edges)]
    src[:hubs] = crowded[rng.integers(0, 2, hubs)]  # 2 hubs in 1 first bucket
    dst[: hubs // 2] = nodes[5]  # parallel edges of the hubs
    dst[n_edges - n_edges // 10 :] = nodes[rng.integers(0, 3, n_edges // 10)]  # parallels
    content = rng.integers(0, 3, n_edges).astype(np.uint64)  # equal contents: ties
    rows = rng.permutation(n_edges)
    src, dst, content = src[rows], dst[rows], content[rows]
    got, s, d = adjacency_jit.csr_sort(src, dst, content)
    want = np.lexsort((content, dst, src))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(s, src[want])
    np.testing.assert_array_equal(d, dst[want])
    _check_pairs(src, dst)


def test_edge_facts_compiled_is_the_edge_list_count():
    """Self-loops and parallel edges of a CSR: rows without edges, runs in canonical order and
    out of it (counted as the edge list would), starts in any order, one set or two."""
    from sampler.schema import EdgeSetInfo, GraphInfo, NodeSetInfo

    starts = np.array([5, 0, 9, 9, 3], np.int64)
    degrees = np.array([4, 3, 0, 6, 2], np.int64)
    targets = np.array([1, 1, 1, 0, 4, 0, 0, 4, 0, 3, 3, 0, 3, 2, 3], np.int64)
    adj = dense.DenseAdjacency(starts, degrees, targets, targets.astype(np.uint64), {}, None)
    graph = GraphInfo(
        None,
        "",
        {n: NodeSetInfo(n, {}, None) for n in ("a", "b")},
        {
            "same": EdgeSetInfo("same", "a", "a", {}, "", False),
            "two": EdgeSetInfo("two", "a", "b", {}, "", False),
        },
    )
    dg = dense.DenseGraph({}, {"same": adj, "two": adj}, {"two": 3})
    got = dense.edge_facts(graph, dg)
    assert got == oracles.edge_facts_numpy(graph, dg)
    assert got["self_loops/same"] == 11 and got["self_loops/two"] == 0
    assert got["parallel_edges/same"] == 7


@pytest.mark.parametrize(
    "n_edges,n_nodes,hub", [(0, 1, 0), (1, 1, 0), (300, 4, 0), (5000, 800, 2000)]
)
@pytest.mark.parametrize("featured", [True, False])
def test_build_adjacency_compiled_is_numpy(n_edges, n_nodes, hub, featured):
    """With a feature (csr_sort) and without any (csr_sort_pairs), parallel edges included."""
    edges = _edges(np.random.default_rng(n_edges + 1), n_edges, n_nodes, hub)
    weight = "weight" if featured else None
    if not featured:
        edges = EdgeBatch(edges.src, edges.dst, {})
    got = adjacency.build_adjacency(edges, weight)
    want = oracles.build_adjacency_numpy(edges, weight)
    fields = ("nodes", "starts", "degrees", "targets", "edge_keys")
    for field in (*fields, "weights") if featured else fields:
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype, field
        np.testing.assert_array_equal(a, b, err_msg=field)
    assert got.features.keys() == want.features.keys()
    if featured:
        np.testing.assert_array_equal(got.features["weight"], want.features["weight"])
    else:
        assert got.weights is None and want.weights is None and got.target_times == {}


def test_densify_compiled_is_numpy_with_missing_endpoints(monkeypatch):
    rng = np.random.default_rng(5)
    edges = _edges(rng, 4000, 600, hub=900)
    present = np.unique(np.concatenate([edges.src, edges.dst]))[::2]  # half the nodes missing
    rows = NodeBatch(present, bytes_array([b"%d" % i for i in range(len(present))]), {})
    table = build_node_table(rows)
    adj = adjacency.build_adjacency(edges, "weight")
    got, got_dropped = dense.dense_adjacency(adj, table, table)
    monkeypatch.setattr(
        node_table.NodeTable, "lookup", lambda self, fps: oracles.lookup_numpy(self.rows.fp, fps)
    )
    want, want_dropped = dense.dense_adjacency(adj, table, table)
    assert got_dropped == want_dropped > 0
    for field in ("starts", "degrees", "targets", "edge_keys", "weights"):
        np.testing.assert_array_equal(getattr(got, field), getattr(want, field), err_msg=field)


def test_crc32c_compiled_is_google_crc32c():
    import google_crc32c

    from sampler.io import tfrecord_jit

    rng = np.random.default_rng(9)
    buf = np.frombuffer(rng.bytes(300), np.uint8)
    for lo, hi in [(0, 0), (0, 1), (3, 10), (5, 13), (1, 17), (0, 300), (7, 250)]:
        want = google_crc32c.value(buf[lo:hi].tobytes())
        assert int(tfrecord_jit.crc32c(buf, lo, hi, tfrecord_jit._TABLES)) == want, (lo, hi)


def _tfrecords(rng, sizes) -> bytes:
    from sampler.io import tfrecord

    return tfrecord.frame([rng.bytes(int(n)) for n in sizes])


@pytest.mark.parametrize("left", [1, 3, 1000])
def test_frame_compiled_is_python(left):
    from sampler.io import tfrecord

    rng = np.random.default_rng(left)
    whole = _tfrecords(rng, [0, 1, 7, 8, 9, 100, 0, 3000, 5])
    huge = b"\xff" * 8 + b"\0" * 20  # a length of 2**64 - 1
    broken = bytearray(whole)
    broken[12 + 4 + 12] ^= 1  # record 1's data
    broken[12 + 4 + 16 + 1 + 8] ^= 1  # record 2's length checksum
    cases = [
        b"",
        whole,
        whole[:-1],
        whole[:11],
        whole[:12],
        whole[:40],
        whole + huge,
        bytes(broken),
    ]
    for buf in cases:
        for pos in (0, 12 + 4 + 4, len(buf)):
            if pos > len(buf):
                continue
            got = tfrecord._frame(buf, pos, left)
            want = oracles.frame_python(buf, pos, left)
            assert len(got) == len(want) == 5
            for a, b in zip(got[:4], want[:4], strict=True):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)
            assert got[4] == want[4]


@pytest.mark.parametrize("damage", ["none", "data", "truncated", "length"])
def test_record_framer_reads_the_same_either_way(monkeypatch, damage):
    import io

    from sampler.errors import UserError
    from sampler.io import tfrecord

    rng = np.random.default_rng(4)
    sizes = rng.integers(0, 60, 3000)
    buf = bytearray(_tfrecords(rng, sizes))
    if damage == "data":
        buf[12 + 2] ^= 1  # record 0's data (or its data checksum if empty)
        buf[len(buf) // 2] ^= 1
    elif damage == "truncated":
        del buf[-3:]
    elif damage == "length":
        buf[len(buf) // 3 : len(buf) // 3 + 8] = b"\x01" * 8

    def read(step):
        monkeypatch.setattr(tfrecord, "_frame", step)
        monkeypatch.setattr(tfrecord, "_READ_CHUNK", 4096)  # many refills
        bad, out = [], []
        try:
            for index, data in tfrecord.records("f", io.BytesIO(bytes(buf)), bad.append):
                out.append((index, data))
        except UserError as e:
            out.append(str(e))
        return out, bad

    compiled = tfrecord._frame
    want = read(oracles.frame_python)
    assert read(compiled) == want
    records, bad = want
    ended = bool(records) and isinstance(records[-1], str)
    assert ended == (damage in ("truncated", "length")), records[-1:]
    assert bool(bad) == (damage == "data")
    assert (len(records) == len(sizes) and not ended) == (damage == "none")
