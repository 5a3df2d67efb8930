"""Message kernels of label propagation and clustering against plain per-neighbour references,
the adjacency cache that pickling goes through, and Join against beam.CoGroupByKey."""

from __future__ import annotations

import pickle

import numpy as np

from sampler.partition import adjacency_cache, clustering, label_propagation
from sampler.partition.label_propagation import LPShard


def _shard(rng, rows: int, num_parts: int, keys: int = 40) -> LPShard:
    degrees = rng.integers(0, 8, rows)
    offsets = np.r_[0, np.cumsum(degrees)].astype(np.int64)
    m = int(offsets[-1])
    return LPShard(
        5, 1000, rng.integers(0, num_parts, rows), rng.integers(0, 3, rows),
        rng.integers(0, 9, rows), offsets, rng.integers(0, keys, m), rng.integers(0, 300, m),
    )  # fmt: skip


def _reference(state: LPShard, values: np.ndarray):
    """[(key, rows, values, counts)]: np.unique of (row, value) per neighbour key."""
    sender = np.repeat(values, np.diff(state.offsets))
    out = []
    for key in np.unique(state.nbr_key):
        mine = state.nbr_key == key
        pairs, counts = np.unique(
            np.stack([state.nbr_row[mine], sender[mine]]), axis=1, return_counts=True
        )
        out.append((int(key), pairs[0], pairs[1], counts))
    return out


def _assert_same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g[0] == w[0]
        for a, b in zip(g[1:], w[1:], strict=True):
            assert a.dtype == np.int64 and np.array_equal(a, b)


def test_messages_match_the_reference_cold_and_cached():
    rng = np.random.default_rng(4)
    for rows in (0, 1, 50, 700):
        state = _shard(rng, rows, num_parts=3)
        labels = rng.integers(0, 10**9, rows)
        lp_want = [
            (k, r, np.stack([v, c], axis=1)) for k, r, v, c in _reference(state, state.parts)
        ]
        cluster_want = _reference(state, labels)
        cached = pickle.loads(pickle.dumps(state))  # known token: the cache's arrays
        adjacency_cache.clear()
        cold = pickle.loads(pickle.dumps(cached))  # unknown token: widened again
        for s in (state, cached, cached, cold):
            got = label_propagation.lp_messages(s, 3)
            assert [m[0] for m in got] == [m[0] for m in lp_want]
            for g, w in zip(got, lp_want, strict=True):
                assert np.array_equal(g[1], w[1]) and np.array_equal(g[2], w[2])
            _assert_same(
                clustering.cluster_messages(clustering.ClusterShard(s, labels)), cluster_want
            )


def test_cluster_messages_of_a_code_space_past_int64(monkeypatch):
    """The way for (pair, label) codes that would not fit an int64: per neighbour key, the
    compiled sum of each (row, label)'s count."""
    rng = np.random.default_rng(6)
    monkeypatch.setattr(clustering, "_INT64_END", 0)
    for rows in (0, 1, 50, 700):
        state = _shard(rng, rows, num_parts=3)
        labels = rng.integers(0, 10**9, rows)
        got = clustering.cluster_messages(clustering.ClusterShard(state, labels))
        _assert_same(got, _reference(state, labels))


def test_a_full_cache_keeps_its_shards_and_round_after_round_they_hit(monkeypatch):
    """Shards visited in turn, more than the budget holds: those cached stay cached and hit
    every round (evicting the least recently used would leave no hit at all); the rest are
    converted again each time, to the same arrays."""
    rng = np.random.default_rng(8)
    shards = [_shard(rng, 400, 3) for _ in range(6)]
    blobs = [pickle.dumps(s) for s in shards]
    adjacency_cache.clear()
    entry = adjacency_cache._Entry(shards[0].adjacency(), ((),))
    monkeypatch.setattr(adjacency_cache, "BUDGET_BYTES", 6 * entry.nbytes)
    builds = []
    order = label_propagation.stable_order

    def counted(*columns):
        builds[-1] += 1
        return order(*columns)

    monkeypatch.setattr(label_propagation, "stable_order", counted)
    for _ in range(4):  # rounds over the six shards
        builds.append(0)
        for blob, shard in zip(blobs, shards, strict=True):
            again = pickle.loads(blob)
            for a, b in zip(again.adjacency(), shard.adjacency(), strict=True):
                assert np.array_equal(a, b)
            label_propagation.by_target(again)
    cached = len(adjacency_cache._CACHE)
    assert 0 < cached < 6
    assert builds[0] == 6 and builds[1:] == [6 - cached] * 3
    adjacency_cache.clear()


def test_messages_by_sort_when_the_counting_bins_would_outgrow_the_shard(monkeypatch):
    monkeypatch.setattr(label_propagation, "DENSE_COUNTS", 0)
    monkeypatch.setattr(label_propagation, "DENSE_SLACK", 0)
    rng = np.random.default_rng(6)
    state = _shard(rng, 200, num_parts=3)
    assert label_propagation._counts_by_target(state, np.zeros(1, np.int64), 3) is None
    want = [(k, r, np.stack([v, c], axis=1)) for k, r, v, c in _reference(state, state.parts)]
    got = label_propagation.lp_messages(state, 3)
    assert [m[0] for m in got] == [m[0] for m in want]
    for g, w in zip(got, want, strict=True):
        assert np.array_equal(g[1], w[1]) and np.array_equal(g[2], w[2])


def test_adjacency_pickles_once_per_process_and_only_for_the_same_arrays():
    import dataclasses

    rng = np.random.default_rng(5)
    state = _shard(rng, 30, num_parts=2)
    back = pickle.loads(pickle.dumps(state))
    assert back.adjacency_token == state.adjacency_token is not None
    assert back.nbr_key is pickle.loads(pickle.dumps(back)).nbr_key  # taken from the cache
    assert back.nbr_row is state.nbr_row and not state.nbr_row.flags.writeable
    for name in ("offsets", "nbr_key", "nbr_row"):
        assert np.array_equal(getattr(back, name), getattr(state, name))
    moved = dataclasses.replace(back, parts=back.parts + 1)  # same adjacency, same token
    assert pickle.loads(pickle.dumps(moved)).adjacency_token == state.adjacency_token
    rewired = dataclasses.replace(back, nbr_row=back.nbr_row[::-1].copy())
    again = pickle.loads(pickle.dumps(rewired))
    assert again.adjacency_token != state.adjacency_token
    assert np.array_equal(again.nbr_row, state.nbr_row[::-1])


def test_message_counts_and_column_sums_match_add_at():
    rng = np.random.default_rng(6)
    messages = [
        (rng.integers(0, 20, m), np.stack([rng.integers(0, 4, m), rng.integers(1, 9, m)], 1))
        for m in (0, 5, 40)
    ]
    want = np.zeros(20 * 4)
    for rows, part_count in messages:
        np.add.at(want, rows * 4 + part_count[:, 0], part_count[:, 1])
    got = label_propagation.message_counts(messages, 20, 4)
    assert got.dtype == np.float64 and np.array_equal(got, want.reshape(20, 4))
    labels, columns = rng.integers(0, 9, 60), rng.random((60, 3))
    pieces = clustering.label_pieces(labels, columns, 4)
    unique, inverse = np.unique(labels, return_inverse=True)
    sums = np.zeros((len(unique), 3))
    np.add.at(sums, inverse, columns)
    got_labels, got_sums = clustering.sum_pieces([(p[1], p[2]) for p in pieces])
    assert np.array_equal(got_labels, unique) and np.allclose(got_sums, sums)
    for _, piece_labels, piece_sums in pieces:
        assert np.array_equal(piece_sums, sums[np.searchsorted(unique, piece_labels)])


def test_first_max_is_lexsorts_first_per_row():
    rng = np.random.default_rng(7)
    rows = np.sort(rng.integers(0, 30, 400))
    score = rng.integers(0, 4, 400).astype(np.float64)  # many ties
    order = np.lexsort((-score, rows))
    want = order[np.r_[True, rows[order][1:] != rows[order][:-1]]]
    assert np.array_equal(clustering._first_max(rows, score), want)


def test_join_groups_like_cogroupbykey():
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from sampler.beam import join
    from sampler.beam.join import Join

    def canonical(keyed):
        key, groups = keyed
        return key, {tag: sorted(map(repr, values)) for tag, values in groups.items()}

    with beam.Pipeline() as p:
        a = p | "A" >> beam.Create([((0, 1), np.arange(3)), ((0, 2), "x"), ((0, 1), 7)])
        b = p | "B" >> beam.Create([((0, 1), b"y"), ((5, 5), None)])
        c = p | "C" >> beam.Create([((0, 2), 1.5)])
        inputs = {"a": a, **join.many("bc", [b, c])}
        got = inputs | "Join" >> Join() | "Got" >> beam.Map(canonical)
        want = (
            {"a": a, "bc": (b, c) | beam.Flatten()}
            | beam.CoGroupByKey()
            | "Want" >> beam.Map(canonical)
        )
        expected = [
            ((0, 1), {"a": sorted([repr(np.arange(3)), repr(7)]), "bc": [repr(b"y")]}),
            ((0, 2), {"a": [repr("x")], "bc": [repr(1.5)]}),
            ((5, 5), {"a": [], "bc": [repr(None)]}),
        ]
        assert_that(got, equal_to(expected), label="Join")
        assert_that(want, equal_to(expected), label="CoGroupByKey")


def test_groups_coder_round_trip_and_size():
    import pickle

    from sampler.beam.join import Groups, GroupsCoder

    groups = Groups({"a": [np.arange(4)], "b": []})
    groups.nbytes = len(pickle.dumps(np.arange(4), pickle.HIGHEST_PROTOCOL))
    coder = GroupsCoder()
    back = coder.decode(coder.encode(groups))
    assert isinstance(back, Groups) and back.nbytes == groups.nbytes
    assert list(back) == ["a", "b"] and np.array_equal(back["a"][0], np.arange(4))
    assert coder.get_impl().estimate_size(groups) == groups.nbytes
    assert coder.get_impl().decode(coder.get_impl().encode(groups)).nbytes == groups.nbytes


def test_arrays_coder_pickles_and_sizes_shards_by_their_arrays():
    import apache_beam as beam

    from sampler.beam.partition.sized import ArraysCoder, nbytes
    from sampler.partition.graph import EdgeShard, NodeShard
    from sampler.partition.new_ids import EdgesWithEnds

    for t in (NodeShard, EdgeShard, EdgesWithEnds):
        assert isinstance(beam.coders.registry.get_coder(t), ArraysCoder)
    impl = ArraysCoder().get_impl()
    value = {"a": np.arange(1000, dtype=np.int64), "b": [np.zeros(10, np.float32), b"xy"]}
    back = impl.decode(impl.encode(value))
    assert np.array_equal(back["a"], value["a"]) and back["b"][1] == b"xy"
    assert impl.estimate_size(value) == nbytes(value)
    assert 8040 <= nbytes(value) <= len(impl.encode(value)) + 400


def test_stable_order_is_lexsort():
    rng = np.random.default_rng(8)
    a, b, c = rng.integers(0, 5, 300), rng.integers(0, 3, 300), rng.integers(0, 4, 300)
    assert np.array_equal(label_propagation.stable_order(a, b, c), np.lexsort((c, b, a)))
    big = np.array([2**62, 0, 2**62, 1])  # no int64 code: lexsort itself
    assert np.array_equal(label_propagation.stable_order(big, big), np.lexsort((big, big)))
    negative = np.array([3, -1, 3, 0])
    assert np.array_equal(label_propagation.stable_order(negative), np.lexsort((negative,)))
    assert len(label_propagation.stable_order(np.zeros(0, np.int64))) == 0
