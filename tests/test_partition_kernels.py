"""Beam-free kernels of the partition stage's jobs, on small inputs checked by hand."""

from __future__ import annotations

import numpy as np

from sampler.partition import classes, new_ids, random_deal
from sampler.partition.graph import EdgeShard, NodeIndex


def test_class_part_counts_by_hand():
    got = classes.class_part_counts(np.array([0, 0, 1, 2, 0]), np.array([1, 1, 0, 3, 2]))
    assert got == {(0, 1): 2, (0, 2): 1, (1, 0): 1, (2, 3): 1}
    # Class and part indices far past any packing base stay apart.
    got = classes.class_part_counts(np.array([2_000_000]), np.array([1_000_003]))
    assert got == {(2_000_000, 1_000_003): 1}


def test_class_indices_values_and_in_degree():
    table = [(0, 0), (1, 0), (1, 5)]
    values = classes.class_values({"m": np.array([[5], [0], [5]])}, "m", 3)
    assert values.tolist() == [5, 0, 5]
    assert classes.class_indices(1, values, table).tolist() == [2, 1, 2]
    assert classes.class_values({}, "m", 2).tolist() == [0, 0]
    assert classes.class_keys(1, values) == [(1, 0), (1, 5)]
    degree = classes.in_degree([np.array([0, 2, 2]), np.array([2])], 4)
    assert degree.tolist() == [1, 0, 3, 0]


def test_deal_group_counts_and_exact_balance():
    cls = np.array([0, 0, 0, 0, 0, 1, 1])
    groups = random_deal.deal_groups(cls, np.zeros(7, np.int64), False)
    assert groups.tolist() == [0] * 5 + [random_deal.BUCKETS] * 2
    counts = random_deal.group_counts(groups, 0, 0)
    assert counts == {(0, 0, 0): 5, (random_deal.BUCKETS, 0, 0): 2}
    parts = random_deal.deal_parts(groups, cls, 0, 0, counts, seed=3, num_parts=2)
    # 5 nodes of class 0 over 2 parts: 2 and 3; 2 nodes of class 1: 1 and 1.
    assert sorted(np.bincount(parts[:5], minlength=2).tolist()) == [2, 3]
    assert np.bincount(parts[5:], minlength=2).tolist() == [1, 1]


def test_edge_ends_by_hand():
    edges = EdgeShard(
        etype=0, shard=0, src=np.array([10, 11, 11]), dst=np.array([0, 1, 0]),
        dst_shard=np.zeros(3, np.int64), features={},
    )  # fmt: skip
    src_layout = new_ids.NodeLayout(0, 0, np.array([0, 1]), np.array([5, 9]), np.array([0, 0]))
    targets = [new_ids.EdgeEnds(0, 0, np.array([0, 2]), np.array([1, 1]), np.array([7, 7]))]
    targets.append(new_ids.EdgeEnds(0, 0, np.array([1]), np.array([0]), np.array([3])))
    ends, counts, cut = new_ids.edge_ends(edges, targets, src_layout, 10, (1, 1, 2))
    assert ends.src_part.tolist() == [0, 1, 1]
    assert ends.src_new.tolist() == [5, 9, 9]
    assert ends.dst_part.tolist() == [1, 0, 1]
    assert ends.dst_new.tolist() == [7, 3, 7]
    assert counts.tolist() == [[[1, 2]]]
    assert cut.tolist() == [2]  # edges 0 (0 -> 1) and 1 (1 -> 0)


def test_lookup_in_a_node_index():
    index = NodeIndex(0, 0, np.array([3, 8, 20], np.uint64), 100)
    ids, found = index.lookup(np.array([8, 4, 20], np.uint64))
    assert found.tolist() == [True, False, True]
    assert ids[found].tolist() == [101, 102]


def test_compact_pickling_round_trips_int64():
    import pickle

    from sampler.partition import clustering as cl
    from sampler.partition.compact import CompactTuple
    from sampler.partition.label_propagation import LPShard

    rng = np.random.default_rng(0)
    big = np.array([-1, 2**40], np.int64)
    state = LPShard(
        3, 100, rng.integers(0, 4, 50), rng.integers(0, 3, 50), rng.integers(0, 900, 50),
        np.r_[0, np.cumsum(rng.integers(0, 5, 50))], rng.integers(0, 64, 0), big, None,
        np.full(50, -1, np.int64),
    )  # fmt: skip
    back = pickle.loads(pickle.dumps(cl.ClusterShard(state, big.copy())))
    for name in ("parts", "classes", "in_degree", "offsets", "nbr_key", "nbr_row", "gain"):
        a, b = getattr(state, name), getattr(back.lp, name)
        assert b.dtype == np.int64 and np.array_equal(a, b), name
    assert back.lp.target is None and back.lp.key == 3 and back.lp.gid_start == 100
    assert np.array_equal(back.labels, big)
    message = pickle.loads(pickle.dumps(CompactTuple((np.arange(5), np.ones((5, 2)), 7))))
    assert type(message) is tuple and message[0].dtype == np.int64 and message[2] == 7
    assert message[1].dtype == np.float64


def test_packed_arrays_round_trip_narrowed():
    from sampler.partition.compact import pack_arrays, unpack_arrays

    arrays = (
        np.array([-5, 2**40], np.int64),  # not narrowable
        np.arange(300, dtype=np.int64).reshape(100, 3),  # int16
        np.zeros(0, np.int64),
        np.array([0.5, -1.0]),
        np.array([True, False]),
    )
    packed = pack_arrays(arrays)
    assert type(packed) is bytes
    assert len(packed) < sum(a.nbytes for a in arrays)  # the int64 arrays were narrowed
    back = unpack_arrays(packed)
    assert len(back) == len(arrays)
    for a, b in zip(arrays, back, strict=True):
        assert b.dtype == a.dtype and b.shape == a.shape and np.array_equal(a, b)
        assert b.flags.writeable


def test_narrowed_dataclasses_pickle_to_equal_fields():
    import dataclasses
    import pickle

    from sampler.partition.graph import EdgeShard
    from sampler.partition.layout import PartEdges

    n = 1000
    big = np.arange(n, dtype=np.int64)
    big[1] = 2**35  # one array that cannot be narrowed
    edges = EdgeShard(1, 2, np.arange(n), big, np.zeros(n, np.int64), {"w": np.ones(n)}, 40)
    part = PartEdges(0, False, *(np.arange(n) % k for k in (n, 7, 3, 4, 5)))
    for obj in (edges, part):
        back = pickle.loads(pickle.dumps(obj))
        assert type(back) is type(obj)
        assert len(pickle.dumps(obj)) < len(pickle.dumps(dataclasses.astuple(obj)))
        for field in dataclasses.fields(obj):
            a, b = getattr(obj, field.name), getattr(back, field.name)
            if isinstance(a, np.ndarray):
                assert b.dtype == a.dtype and np.array_equal(a, b), field.name
            elif isinstance(a, dict):
                assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
            else:
                assert a == b, field.name


def test_local_ids_table_is_the_binary_search():
    from sampler.partition.layout import _local_ids

    rng = np.random.default_rng(3)
    first, inner = 100, 50
    halo = np.unique(np.r_[rng.integers(0, 100, 30), rng.integers(150, 400, 40)])
    ids = np.r_[rng.choice(halo, 200), rng.integers(first, first + inner, 100)]
    rng.shuffle(ids)

    def search(x):
        mine = (x >= first) & (x < first + inner)
        return np.where(mine, x - first, inner + np.searchsorted(halo, x)).astype(np.int64)

    local = _local_ids(first, inner, halo)
    assert np.array_equal(local(ids), search(ids))
    unknown = np.r_[ids, 399 if 399 not in halo else 398, 10_000, -1]  # neither: search's
    assert np.array_equal(local(unknown), search(unknown))
    assert np.array_equal(local(np.zeros(0, np.int64)), np.zeros(0, np.int64))
    # HALO ids far beyond the part (global new ids of a large graph): no table, same answers
    far = np.r_[halo, 10**8]
    sparse = _local_ids(first, inner, far)
    x = np.r_[ids, 10**8]
    want = np.where(
        (x >= first) & (x < first + inner), x - first, inner + np.searchsorted(far, x)
    ).astype(np.int64)
    assert np.array_equal(sparse(x), want)


def test_edge_shape_counts_of_ranked_edges_are_those_of_the_input():
    from sampler.graph_checks import edge_shape_counts
    from sampler.partition.graph import rank_edges

    rng = np.random.default_rng(5)
    src, dst = rng.integers(0, 6, 200), rng.integers(0, 6, 200)
    feats = {"w": rng.integers(0, 3, 200).astype(np.float32)}
    ranked = rank_edges(0, 0, src, dst, np.zeros(200, np.int64), feats)
    for same_set in (True, False):
        want = edge_shape_counts(src, dst, same_set)
        assert want[1] > 0 and (want[0] > 0) == same_set
        assert edge_shape_counts(ranked.src, ranked.dst, same_set) == want
