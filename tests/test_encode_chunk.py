"""sampler.sample.encode_chunk: a chunk of subgraphs encoded at once.

Every record must be byte for byte what the protobuf encoder (tests/encode_oracle.py) writes
for the same subgraph, and
must decode, with TensorFlow's own tf.train.Example and with tfgnn.parse_example, to the
values the chunk was built from (checked against those inputs, not against our decoder), for
features of every value kind and shape: float, int and bytes; scalar, vector and matrix;
negative and huge ints; long ids and values (multi-byte varint lengths); empty and absent sets.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn
from google.protobuf import text_format
from tensorflow_gnn.proto import graph_schema_pb2

from sampler.batches import NodeBatch, bytes_array
from sampler.protos import sampling_spec_pb2
from sampler.sample import encode_chunk as ec
from sampler.sample import in_memory, link
from sampler.sample.adjacency import make_seeds
from sampler.sample.dense import densify
from sampler.sample.encode import encode_specs, output_schema
from sampler.sample.plan import make_plan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk, chunk_of
from sampler.schema import GraphInfo, load_graph
from sampler.tools import synthetic
from tests.encode_oracle import encode_subgraph

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "feat" value { dtype: DT_FLOAT shape { dim { size: 3 } } } }
  features { key: "grid" value { dtype: DT_DOUBLE shape { dim { size: 2 } dim { size: 2 } } } }
  features { key: "half" value { dtype: DT_HALF } }
  features { key: "year" value { dtype: DT_INT64 } }
  features { key: "small" value { dtype: DT_INT32 shape { dim { size: 2 } } } }
  features { key: "flag" value { dtype: DT_BOOL } }
  features { key: "big" value { dtype: DT_UINT64 shape { dim { size: 3 } } } }
  features { key: "tags" value { dtype: DT_STRING shape { dim { size: 2 } } } }
  features { key: "title" value { dtype: DT_STRING } }
  features { key: "wide" value { dtype: DT_FLOAT shape { dim { size: 5000 } } } }
} }
node_sets { key: "author" value { } }
node_sets { key: "venue" value { features { key: "rank" value { dtype: DT_INT64 } } } }
edge_sets { key: "writes" value { source: "author" target: "paper"
  features { key: "weight" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  features { key: "role" value { dtype: DT_STRING } } } }
edge_sets { key: "cites" value { source: "paper" target: "paper" } }
edge_sets { key: "published" value { source: "paper" target: "venue"
  features { key: "order" value { dtype: DT_INT16 } } } }
"""
PAPER_TABLE_ROWS = 40


def _schema():
    return text_format.Parse(SCHEMA, graph_schema_pb2.GraphSchema())


def _paper_table(rng) -> NodeBatch:
    n = PAPER_TABLE_ROWS
    long_title = b"t" * 300  # a 2-byte varint length
    return NodeBatch(
        np.arange(n, dtype=np.uint64),
        bytes_array(
            [b"p%d" % i if i % 7 else b"paper-" + b"x" * 200 + b"%d" % i for i in range(n)]
        ),  # fmt: skip
        {
            "feat": rng.normal(size=(n, 3)).astype(np.float32),
            "grid": rng.normal(size=(n, 4)).astype(np.float32),
            "half": rng.normal(size=n).astype(np.float32),
            "year": rng.integers(-(2**40), 2**40, n),
            "small": rng.integers(-300, 300, (n, 2)),
            "flag": rng.integers(0, 2, n),
            "big": np.stack(
                [np.full(n, -1), np.full(n, 2**63 - 1), rng.integers(0, 2**20, n)], axis=1
            ),
            "tags": np.array([[b"", b"a\x00b"], [b"\xff" * 130, b"gnn"]] * (n // 2), dtype=object),
            "title": bytes_array([long_title if i % 3 == 0 else b"t%d" % i for i in range(n)]),
            "wide": rng.normal(size=(n, 5000)).astype(np.float32),  # 20 kB: 3-byte lengths
        },
    )


def _chunk(rng) -> SubgraphChunk:
    """Five subgraphs: rows gathered from a table (paper) or given per chunk (author, venue);
    subgraph 2 is empty; 'cites' has no edges in subgraph 4; 'published' is absent."""
    paper_counts = np.array([3, 1, 0, 5, 2])
    author_counts = np.array([2, 0, 0, 3, 1])
    venue_counts = np.array([1, 1, 0, 0, 1])
    n = len(paper_counts)
    papers = rng.integers(0, PAPER_TABLE_ROWS, paper_counts.sum())
    authors = sum(author_counts)
    author_batch = NodeBatch(
        np.arange(authors, dtype=np.uint64), bytes_array([b"a%d" % i for i in range(authors)]), {}
    )
    venues = sum(venue_counts)
    venue_batch = NodeBatch(
        np.arange(venues, dtype=np.uint64),
        bytes_array([b"v%d" % i for i in range(venues)]),
        {"rank": np.array([-5, 0, 2**62])},
    )
    bounds = {
        name: np.concatenate([[0], np.cumsum(c)])
        for name, c in (("paper", paper_counts), ("author", author_counts),
                        ("venue", venue_counts))
    }  # fmt: skip

    def edges(src_counts, dst_counts, per_sample):
        src, dst = [], []
        for i, m in enumerate(per_sample):
            src.append(rng.integers(0, max(src_counts[i], 1), m))
            dst.append(rng.integers(0, max(dst_counts[i], 1), m))
        return np.stack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64)

    writes_per = np.array([4, 0, 0, 200, 1])  # 200 > 127: multi-byte packed lengths
    cites_per = np.array([2, 1, 0, 3, 0])
    writes = edges(author_counts, paper_counts, writes_per)
    m = writes.shape[1]
    return SubgraphChunk(
        bytes_array([b"s%d" % i for i in range(n - 1)] + [b"s" * 150]),
        bytes_array([b"seed%d" % i for i in range(n)]),
        {
            "paper": NodeRowsOfChunk(_paper_table(rng), papers, bounds["paper"]),
            "author": NodeRowsOfChunk(author_batch, None, bounds["author"]),
            "venue": NodeRowsOfChunk(venue_batch, None, bounds["venue"]),
        },
        {
            "writes": (
                writes,
                {
                    "weight": rng.normal(size=(m, 2)).astype(np.float32),
                    "role": bytes_array([b"r%d" % (i % 3) for i in range(m)]),
                },
                np.concatenate([[0], np.cumsum(writes_per)]),
            ),
            "cites": (
                edges(paper_counts, paper_counts, cites_per),
                {},
                np.concatenate([[0], np.cumsum(cites_per)]),
            ),
        },
    )


def test_chunk_records_are_those_of_encode_subgraph():
    rng = np.random.default_rng(0)
    chunk, specs = _chunk(rng), encode_specs(_schema())
    expected = [encode_subgraph(s, specs) for s in chunk.subgraphs(collections.Counter())]
    assert ec.encode_chunk(chunk, specs) == expected


def _feature_values(example: tf.train.Example, key: str) -> list:
    feature = example.features.feature[key]
    return list(getattr(feature, feature.WhichOneof("kind")).value)


def test_chunk_records_decode_to_the_chunk_values():
    """Independent decoding: TensorFlow's tf.train.Example, compared with the chunk's inputs."""
    rng = np.random.default_rng(1)
    chunk, schema = _chunk(rng), _schema()
    records = ec.encode_chunk(chunk, encode_specs(schema))
    assert len(records) == len(chunk)
    paper = chunk.node_rows["paper"]
    for i, record in enumerate(records):
        example = tf.train.Example.FromString(record)
        # canonical: TensorFlow re-serializes it to the same bytes
        assert example.SerializeToString(deterministic=True) == record
        assert _feature_values(example, "context/sample_id") == [chunk.sample_ids[i]]
        assert _feature_values(example, "context/seed_id") == [chunk.seed_ids[i]]
        lo, hi = paper.bounds[i], paper.bounds[i + 1]
        rows = paper.index[lo:hi]
        assert _feature_values(example, "nodes/paper.#size") == [hi - lo]
        assert _feature_values(example, "nodes/paper.#id") == paper.batch.ids[rows].tolist()
        for name, column in paper.batch.features.items():
            got = _feature_values(example, f"nodes/paper.{name}")
            want = column[rows].ravel()
            if want.dtype.kind == "f":
                assert np.array_equal(np.array(got, np.float32), want), name
            else:
                assert got == want.tolist(), name
        for name, (index, features, bounds) in chunk.edge_rows.items():
            lo, hi = bounds[i], bounds[i + 1]
            assert _feature_values(example, f"edges/{name}.#size") == [hi - lo]
            assert _feature_values(example, f"edges/{name}.#source") == index[0, lo:hi].tolist()
            assert _feature_values(example, f"edges/{name}.#target") == index[1, lo:hi].tolist()
            for feature, column in features.items():
                got = _feature_values(example, f"edges/{name}.{feature}")
                want = column[lo:hi].ravel()
                if want.dtype.kind == "f":
                    assert np.array_equal(np.array(got, np.float32), want)
                else:
                    assert got == want.tolist()
        # the absent edge set: size 0 and empty lists, as TF-GNN requires
        assert _feature_values(example, "edges/published.#size") == [0]
        assert _feature_values(example, "edges/published.order") == []


def test_tfgnn_parses_a_chunk():
    rng = np.random.default_rng(2)
    chunk, schema = _chunk(rng), _schema()
    records = ec.encode_chunk(chunk, encode_specs(schema))
    spec = tfgnn.create_graph_spec_from_schema_pb(output_schema(schema))
    graph = tfgnn.parse_example(spec, tf.constant(records))
    paper = chunk.node_rows["paper"]
    assert graph.node_sets["paper"].sizes.numpy().ravel().tolist() == np.diff(paper.bounds).tolist()
    flat = graph.merge_batch_to_components()
    papers = flat.node_sets["paper"]
    rows = paper.index
    assert papers["grid"].shape[1:] == (2, 2)
    assert np.array_equal(
        papers["grid"].numpy().reshape(-1, 4), paper.batch.features["grid"][rows].astype(np.float64)
    )
    assert (
        papers["big"].numpy().view(np.int64).tolist() == paper.batch.features["big"][rows].tolist()
    )
    assert (
        papers["flag"].numpy().tolist() == paper.batch.features["flag"][rows].astype(bool).tolist()
    )
    assert papers["tags"].numpy().tolist() == paper.batch.features["tags"][rows].tolist()
    assert papers["wide"].numpy().tolist() == paper.batch.features["wide"][rows].tolist()
    writes = flat.edge_sets["writes"]
    assert writes["role"].numpy().tolist() == chunk.edge_rows["writes"][1]["role"].tolist()


def test_framed_bytes_match_protobuf():
    values = [b"", b"a", b"x" * 127, b"y" * 128, b"z" * 20000]
    data, framed = ec.framed_bytes(bytes_array(values))
    assert data.tobytes() == tf.train.BytesList(value=values).SerializeToString()
    assert framed.tolist() == [
        len(tf.train.BytesList(value=[v]).SerializeToString()) for v in values
    ]


def _mag_graph(tmp_path) -> GraphInfo:
    graph = synthetic.generate_mag(300, feature_dim=4, all_node_features=True, edge_weights=True)
    return load_graph(synthetic.write_graph(graph, str(tmp_path), fmt="parquet"))


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_sampled_chunks_encode_like_subgraphs(tmp_path, aggregation):
    graph = _mag_graph(tmp_path)
    plan = make_plan(graph, synthetic.mag_sampling_spec(), aggregation)
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(mem.node_tables["paper"].rows.ids[:150])
    specs = encode_specs(graph.schema)
    counters = collections.Counter()
    chunks = list(in_memory.sample_chunks(graph, plan, mem, seeds, Randomness(4), counters, 64))
    assert len(chunks) == 3
    new = [r for chunk in chunks for r in ec.encode_chunk(chunk, specs)]
    old = [
        encode_subgraph(s, specs)
        for s in in_memory.sample_in_memory(graph, plan, mem, seeds, Randomness(4), counters, 64)
    ]
    assert new == old and len(new) == 150


def test_link_chunks_encode_like_subgraphs(tmp_path):
    graph = _mag_graph(tmp_path)
    spec = text_format.Parse(
        """symmetric_link_seed_op { op_name: "seed" }
        sampling_ops { op_name: "c" input_op_names: "seed" edge_set_name: "cites"
          sample_size: 4 strategy: RANDOM_UNIFORM }""",
        sampling_spec_pb2.SamplingSpec(),
    )
    plan = make_plan(graph, spec, "edge", "cites")
    nodes, adjacency = in_memory.load_tables(graph, plan)
    mem = densify(graph, nodes, adjacency)
    seeds = link.make_link_seeds(*link.edge_pairs(adjacency["cites"]))
    specs = encode_specs(link.link_output_schema(graph.schema, plan))
    args = (graph, plan, mem, seeds, Randomness(2), collections.Counter(), 2, False, 100)
    new = [r for chunk in link.sample_link_chunks(*args) for r in ec.encode_chunk(chunk, specs)]
    old = [encode_subgraph(s, specs) for s in link.sample_links_in_memory(*args)]
    assert new == old and len(new) > 100


def _mutated(mutate):
    rng = np.random.default_rng(3)
    chunk = _chunk(rng)
    mutate(chunk)
    return chunk


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda c: c.node_rows["paper"].batch.features.pop("year"),
         r"node set 'paper': feature 'year' is missing"),
        (lambda c: c.node_rows["paper"].batch.features.update(
            feat=np.zeros((PAPER_TABLE_ROWS, 2), np.float32)),
         r"node set 'paper': feature 'feat' has shape \(\d+, 2\), expected \(\d+, 3\)"),
        (lambda c: c.node_rows["venue"].batch.features.update(rank=np.array([b"a"] * 3)),
         r"node set 'venue': feature 'rank' has dtype \|S1, expected int values"),
        (lambda c: c.edge_rows["cites"][0].__setitem__((1, 0), 3),
         r"edge set 'cites': #target index 3 but the sample's node set has 3 nodes"),
        (lambda c: c.node_rows["author"].batch.ids.__setitem__(0, "a0"),
         r"node set 'author': node ids must be bytes"),
        (lambda c: c.node_rows.update(nope=c.node_rows["author"]), r"not in schema"),
    ],
)  # fmt: skip
def test_bad_chunks_are_value_errors(mutate, match):
    with pytest.raises(ValueError, match=match):
        ec.encode_chunk(_mutated(mutate), encode_specs(_schema()))


def test_beam_chunk_batches_match_subgraph_batches(tmp_path):
    """sampler.beam.sample.sharded.encoded_chunk_batches: one batch per chunk, the records
    of the subgraphs and their counts."""
    from sampler.beam.sample.sharded import SizeCounters, encoded_chunk_batches

    graph = _mag_graph(tmp_path)
    plan = make_plan(graph, synthetic.mag_sampling_spec(), "edge")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(mem.node_tables["paper"].rows.ids[:100])
    specs = encode_specs(graph.schema)
    kernel = in_memory.NodeSeedSampling()
    args = (graph, plan, mem, seeds, Randomness(1))
    old_counts, new_counts = collections.Counter(), collections.Counter()
    old_sizes, new_sizes = SizeCounters(), SizeCounters()
    old = []
    for subgraph in kernel.sample(*args, old_counts, 40):
        old_sizes.add(subgraph)
        old.append(encode_subgraph(subgraph, specs))
    chunks = kernel.sample_chunks(*args, new_counts, 40)
    batches = list(encoded_chunk_batches(7, chunks, specs, new_sizes, new_counts))
    assert [(b, c) for b, c, _ in batches] == [(7, 0), (7, 1), (7, 2)]
    assert [r for _, _, batch in batches for r in batch] == old
    assert new_counts == old_counts and new_counts["subgraphs"] == 100
    assert new_sizes._sums == old_sizes._sums and new_sizes._sums["output_nodes/paper"] > 100


def test_chunk_of_subgraphs_encodes_like_the_subgraphs():
    """sampler.sample.subgraph.chunk_of (the `topology` placement's filled subgraphs): the
    records of the subgraphs, one set absent from some of them."""
    rng = np.random.default_rng(7)
    chunk, specs = _chunk(rng), encode_specs(_schema())
    subgraphs = list(chunk.subgraphs(collections.Counter()))
    del subgraphs[1].node_sets["venue"], subgraphs[3].edge_sets["cites"]
    want = [encode_subgraph(s, specs) for s in subgraphs]
    assert ec.encode_chunk(chunk_of(subgraphs), specs) == want
    assert ec.encode_chunk(chunk_of([]), specs) == []
