"""What the `sharded` placement moves and holds per sample. The assembly holds a bucket's node
rows as each piece's distinct rows and an index (sampler.sample.assemble), gathering them only
per chunk: a node that many samples of a bucket hold (a field of study, a hub paper) is one row
there, not one copy of its features each. An op's targets cross to their shards once per
(sample, node), not once per edge that reached the node."""

from __future__ import annotations

import collections

import numpy as np

from sampler import shards
from sampler.batches import SampleNodes, Seeds, SharedNodeRows, bytes_array
from sampler.beam.sample.sharded import SplitSampleNodes
from sampler.sample import in_memory
from sampler.sample.assemble import assembled, chunks_of
from sampler.sample.plan import make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic


def test_a_node_that_every_sample_holds_is_one_row_until_a_chunk_is_gathered(tmp_path):
    graph = synthetic.generate_mag(30, seed=2, feature_dim=4)
    info = load_graph(synthetic.write_graph(graph, str(tmp_path / "g"), fmt="parquet"))
    plan = make_plan(info, synthetic.mag_sampling_spec())
    table = in_memory.load_tables(info, plan)[0]["paper"]
    papers = table.rows
    n = len(papers.fp) - 1  # samples 1..n: seed paper i and the shared paper 0
    sample = np.arange(1, n + 1, dtype=np.uint64)
    seeds = Seeds(
        sample,
        bytes_array([b"s%d" % i for i in range(n)]),
        papers.ids[1:],
        papers.fp[1:],
    )
    requests = SampleNodes(
        np.concatenate([sample, sample]),
        np.concatenate([papers.fp[1:], np.repeat(papers.fp[0], n)]),
    )
    rows, missing = SharedNodeRows.looked_up(table, requests)
    assert missing == 0 and len(rows.sample) == 2 * n and len(rows.rows) == n + 1
    by_bucket = dict(shards.by_bucket(rows.sample, 2))
    parts = [rows.take(by_bucket[b]) for b in (0, 1)]  # each bucket's part holds paper 0 too
    assert [len(p.rows) for p in parts] == [len(by_bucket[b]) // 2 + 1 for b in (0, 1)]
    out = assembled(info, plan, seeds, {"paper": parts}, {}, collections.Counter())
    held, row, bounds = out.node_rows["paper"]
    assert len(held.fp) == n + 2 and len(row) == 2 * n  # each paper's features once a part
    (chunk,) = chunks_of(out.seeds, out.node_rows, out.edge_rows, np.arange(n), 512)
    gathered = chunk.node_rows["paper"].rows()
    for i in range(n):  # its seed first, then the shared paper
        members = gathered.fp[
            chunk.node_rows["paper"].bounds[i] : chunk.node_rows["paper"].bounds[i + 1]
        ]
        assert members.tolist() == [out.seeds.node[i], papers.fp[0]]
        first = chunk.node_rows["paper"].bounds[i]
        for name, column in gathered.features.items():
            j = int(np.searchsorted(papers.fp, members[0]))
            assert np.array_equal(column[first], papers.features[name][j])


def test_an_ops_targets_cross_to_their_shards_once_per_sample_and_node():
    sample = np.array([1, 1, 1, 2, 2, 1, 3], np.uint64)
    node = np.array([5, 5, 9, 5, 5, 9, 7], np.uint64)
    time = np.array([10, 10, 10, 20, 20, 10, 30], np.int64)
    got = list(SplitSampleNodes(4).process(SampleNodes(sample, node, time)))
    pairs = sorted(
        (int(s), int(n), int(t))
        for _, p in got
        for s, n, t in zip(p.sample, p.node, p.time, strict=True)
    )
    assert pairs == [(1, 5, 10), (1, 9, 10), (2, 5, 20), (3, 7, 30)]
    for shard, piece in got:
        assert all(s == shard for s, _ in shards.by_shard(piece.node, 4))


def test_split_index_keeps_each_keys_rows_in_input_order_on_both_sides_of_16_bits():
    """shards.split_index sorts keys that fit 16 bits by radix: the same rows, same order."""
    rng = np.random.default_rng(5)
    for num in (1, 185, 2**15, 2**15 + 1, 70000):
        keys = rng.integers(0, num, 5000)
        got = shards.split_index(keys, num)
        assert [k for k, _ in got] == sorted(set(keys.tolist()))
        for key, rows in got:
            np.testing.assert_array_equal(rows, np.flatnonzero(keys == key))


def test_buckets_give_their_pages_back_only_where_bundles_do_not(tmp_path, monkeypatch):
    """An SDK worker whose bundles give their freed pages back when they end (the local
    runner's forked workers: pipelines.runtime.worker_buffers) keeps them between its buckets,
    which reuse them; any other gives them back after each bucket."""
    from apache_beam.runners.worker import bundle_processor

    from sampler.beam.packing import packed
    from sampler.beam.sample import sharded

    graph = synthetic.generate_mag(30, seed=2, feature_dim=4)
    info = load_graph(synthetic.write_graph(graph, str(tmp_path / "g"), fmt="parquet"))
    plan = make_plan(info, synthetic.mag_sampling_spec())
    seeds = Seeds(np.array([7], np.uint64), bytes_array([b"s"]), bytes_array([b"p"]),
                  np.array([3], np.uint64))  # fmt: skip
    trims = []
    monkeypatch.setattr(sharded, "release_free_memory", lambda: trims.append(1))
    process = bundle_processor.BundleProcessor.process_bundle
    for bundles_trim, want in [(False, 2), (True, 0)]:

        def trimmed(*args, **kwargs):
            return process(*args, **kwargs)

        trimmed._trims = bundles_trim
        monkeypatch.setattr(bundle_processor.BundleProcessor, "process_bundle", trimmed)
        trims.clear()
        fn = sharded.Assemble(info, plan, None)
        fn.setup()
        for bucket in (0, 1):
            list(fn.process((bucket, [packed((sharded.SEEDS, "", seeds))])))
        assert len(trims) == want
