"""sampler.sample.temporal.seed_nodes: the seed frontier of a temporal spec on the `sharded`
placement (each seed's time from the seeds table, else from its node's row)."""

import numpy as np

from sampler import ids
from sampler.batches import NodeBatch, bytes_array
from sampler.node_table import build_node_table
from sampler.sample.adjacency import make_seeds
from sampler.sample.temporal import seed_nodes


def _table():
    names = [b"a", b"b", b"c"]
    times = np.array([10, 20, 30], np.int64)
    return build_node_table(NodeBatch(ids.fingerprint(names), bytes_array(names), {"t": times}))


def _times(nodes):
    return sorted(zip(nodes.node.tolist(), nodes.time.tolist(), strict=True))


def test_a_seeds_time_is_its_nodes_and_a_seed_not_in_the_table_is_dropped():
    seeds = make_seeds(bytes_array([b"c", b"x", b"a", b"c"]))
    got = seed_nodes(seeds, _table(), "t")
    fp = dict(zip([b"a", b"c"], ids.fingerprint([b"a", b"c"]).tolist(), strict=True))
    assert _times(got) == sorted([(fp[b"a"], 10), (fp[b"c"], 30), (fp[b"c"], 30)])
    assert set(got.sample.tolist()) <= set(seeds.sample.tolist())


def test_the_seeds_tables_times_come_before_the_nodes():
    seeds = make_seeds(bytes_array([b"b", b"y"]), np.array([5, 6], np.int64))
    got = seed_nodes(seeds, _table(), "t")
    assert got.time.tolist() == [5]
    assert got.node.tolist() == ids.fingerprint([b"b"]).tolist()
