"""The chunk encoder (sampler/sample/encode_chunk.py and its kernels, encode_jit.py) against
the protobuf encoder (tests/encode_oracle.py), byte for byte, on inputs built to hit the
corners: every value kind and the dtypes the kernels read directly or converted first, 0-wide
and 20 kB features, non-contiguous and big-endian tables, rows gathered from a table or given
per chunk, empty subgraphs, absent sets, multi-byte varints (ids, lengths, edge indices past
2**7 and 2**14), records spanning the write buffer's groups, sampled node and link chunks;
and chunks that cannot be written, each a ValueError naming the set.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from google.protobuf import text_format

from sampler.batches import NodeBatch, bytes_array
from sampler.protos import graph_schema_pb2, sampling_spec_pb2
from sampler.sample import encode_chunk as encoder
from sampler.sample import in_memory, link
from sampler.sample.adjacency import make_seeds
from sampler.sample.dense import densify
from sampler.sample.encode import encode_specs
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.plan import make_plan
from sampler.sample.randomness import Randomness
from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.encode_oracle import encode_subgraph

SCHEMA = """
node_sets { key: "paper" value {
  features { key: "f32" value { dtype: DT_FLOAT shape { dim { size: 3 } } } }
  features { key: "f64" value { dtype: DT_DOUBLE shape { dim { size: 2 } dim { size: 2 } } } }
  features { key: "scalar" value { dtype: DT_FLOAT } }
  features { key: "none" value { dtype: DT_FLOAT shape { dim { size: 0 } } } }
  features { key: "inone" value { dtype: DT_INT64 shape { dim { size: 0 } } } }
  features { key: "i64" value { dtype: DT_INT64 shape { dim { size: 2 } } } }
  features { key: "i32" value { dtype: DT_INT32 } }
  features { key: "flag" value { dtype: DT_BOOL } }
  features { key: "u64" value { dtype: DT_UINT64 shape { dim { size: 2 } } } }
  features { key: "tags" value { dtype: DT_STRING shape { dim { size: 2 } } } }
  features { key: "title" value { dtype: DT_STRING } }
  features { key: "wide" value { dtype: DT_FLOAT shape { dim { size: 5000 } } } }
  features { key: "strided" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  features { key: "swapped" value { dtype: DT_FLOAT } }
} }
node_sets { key: "author" value {
  features { key: "h" value { dtype: DT_FLOAT shape { dim { size: 4 } } } }
  features { key: "n" value { dtype: DT_INT64 } }
} }
node_sets { key: "venue" value { } }
edge_sets { key: "writes" value { source: "author" target: "paper"
  features { key: "w" value { dtype: DT_FLOAT shape { dim { size: 2 } } } }
  features { key: "k" value { dtype: DT_INT64 } }
  features { key: "role" value { dtype: DT_STRING } }
  features { key: "d" value { dtype: DT_DOUBLE } } } }
edge_sets { key: "cites" value { source: "paper" target: "paper" } }
edge_sets { key: "at" value { source: "paper" target: "venue" } }
"""
TABLE_ROWS = 60


def _specs():
    return encode_specs(text_format.Parse(SCHEMA, graph_schema_pb2.GraphSchema()))


def _paper_table(rng) -> NodeBatch:
    n = TABLE_ROWS
    strided = rng.normal(size=(n, 4)).astype(np.float32)
    return NodeBatch(
        np.arange(n, dtype=np.uint64),
        bytes_array([b"p%d" % i if i % 7 else b"paper-" + b"x" * 200 for i in range(n)]),
        {
            "f32": rng.normal(size=(n, 3)).astype(np.float32),
            "f64": rng.normal(size=(n, 4)),
            "scalar": rng.normal(size=n).astype(np.float32),
            "none": np.zeros((n, 0), np.float32),
            "inone": np.zeros((n, 0), np.int64),
            "i64": rng.integers(-(2**62), 2**62, (n, 2)),
            "i32": rng.integers(-300, 300, n).astype(np.int32),
            "flag": rng.integers(0, 2, n).astype(bool),
            "u64": rng.integers(0, 2**64, (n, 2), dtype=np.uint64),
            "tags": np.array([[b"", b"a\x00b"], [b"\xff" * 130, b"g"]] * (n // 2), dtype=object),
            "title": bytes_array([b"t" * 300 if i % 3 == 0 else b"t%d" % i for i in range(n)]),
            "wide": rng.normal(size=(n, 5000)).astype(np.float32),  # 20 kB: 3-byte lengths
            "strided": strided[:, ::2],  # not contiguous: gathered by numpy
            "swapped": rng.normal(size=n).astype(">f4"),  # big-endian: gathered by numpy
        },
    )


def _chunk(rng, n: int, max_rows: int, indexed_authors: bool) -> SubgraphChunk:
    """n subgraphs with up to max_rows rows per set; some empty, 'venue' and 'at' absent."""
    papers_per = rng.integers(0, max_rows + 1, n)
    papers_per[rng.random(n) < 0.2] = 0
    authors_per = rng.integers(0, max_rows + 1, n)
    papers = rng.integers(0, TABLE_ROWS, papers_per.sum())
    n_authors = int(authors_per.sum())
    author_batch = NodeBatch(
        np.arange(n_authors, dtype=np.uint64),
        bytes_array([b"a%d" % i for i in range(n_authors)]),
        {
            "h": rng.normal(size=(n_authors, 4)).astype(np.float32),
            "n": rng.integers(-(2**63), 2**63 - 1, n_authors),
        },
    )
    author_index = rng.permutation(n_authors) if indexed_authors else None

    def bounds(per):
        return np.concatenate([[0], np.cumsum(per)]).astype(np.int64)

    def edges(src_per, dst_per, per):
        src = [rng.integers(0, max(s, 1), m) for s, m in zip(src_per, per, strict=True)]
        dst = [rng.integers(0, max(d, 1), m) for d, m in zip(dst_per, per, strict=True)]
        return np.stack([np.concatenate(src), np.concatenate(dst)]).astype(np.int64)

    writes_per = np.where((authors_per > 0) & (papers_per > 0), rng.integers(0, 300, n), 0)
    cites_per = np.where(papers_per > 0, rng.integers(0, 40, n), 0)
    m = int(writes_per.sum())
    return SubgraphChunk(
        bytes_array([b"s%d" % i for i in range(n - 1)] + [b"s" * 150]),
        bytes_array([b"seed%d" % i for i in range(n)]),
        {
            "paper": NodeRowsOfChunk(_paper_table(rng), papers, bounds(papers_per)),
            "author": NodeRowsOfChunk(author_batch, author_index, bounds(authors_per)),
        },
        {
            "writes": (
                edges(authors_per, papers_per, writes_per),
                {
                    "w": rng.normal(size=(m, 2)).astype(np.float32),
                    "k": rng.integers(-5, 2**40, m),
                    "role": bytes_array([b"r%d" % (i % 3) for i in range(m)]),
                    "d": rng.normal(size=m),
                },
                bounds(writes_per),
            ),
            "cites": (edges(papers_per, papers_per, cites_per), {}, bounds(cites_per)),
        },
    )


@pytest.fixture(autouse=True, params=["direct", "buffer"])
def records_written(request, monkeypatch):
    """Every test twice: records written straight into their bytes objects (CPython), and
    written into one buffer then copied (the way without that)."""
    if request.param == "buffer":
        monkeypatch.setattr(encoder, "_DIRECT", None)
    else:
        assert encoder._direct_bytes() is not None
    return request.param


def _same(chunk, specs) -> list[bytes]:
    got = encode_chunk(chunk, specs)
    want = [encode_subgraph(s, specs) for s in chunk.subgraphs(collections.Counter())]
    assert len(got) == len(want) == len(chunk)
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a == b, f"record {i} differs"
    return got


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("indexed_authors", [False, True])
@pytest.mark.parametrize("n, max_rows", [(1, 3), (7, 0), (25, 6)])
def test_chunks_are_the_protobuf_records(seed, indexed_authors, n, max_rows):
    rng = np.random.default_rng([seed, n, max_rows, indexed_authors])
    _same(_chunk(rng, n, max_rows, indexed_authors), _specs())


@pytest.mark.parametrize("group_bytes", [1, 500, 30_000])
def test_records_across_write_groups(monkeypatch, group_bytes):
    """Records written in groups smaller and larger than one record (20 kB rows)."""
    monkeypatch.setattr(encoder, "_DIRECT", None)
    monkeypatch.setattr(encoder, "GROUP_BYTES", group_bytes)
    rng = np.random.default_rng(group_bytes)
    _same(_chunk(rng, 30, 4, True), _specs())


def test_long_edge_indices():
    """Edge indices of 1, 2 and 3 varint bytes (a sample of 20,000 authors)."""
    rng = np.random.default_rng(9)
    chunk = _chunk(rng, 3, 2, False)
    authors = 20_000
    chunk.node_rows["author"] = NodeRowsOfChunk(
        NodeBatch(
            np.arange(authors, dtype=np.uint64),
            bytes_array([b"a%d" % i for i in range(authors)]),
            {"h": np.ones((authors, 4), np.float32), "n": np.arange(authors)},
        ),
        None,
        np.array([0, 0, authors, authors]),
    )
    papers = np.diff(chunk.node_rows["paper"].bounds)
    writes = 3000
    assert papers[1] > 0
    index = np.stack([rng.integers(0, authors, writes), rng.integers(0, max(papers[1], 1), writes)])
    index[0, :4] = [127, 128, 16383, 16384]
    chunk.edge_rows["writes"] = (
        index,
        {
            "w": np.zeros((writes, 2), np.float32),
            "k": np.arange(writes),
            "role": bytes_array([b"r"] * writes),
            "d": np.zeros(writes),
        },
        np.array([0, 0, writes, writes]),
    )
    _same(chunk, _specs())


def test_no_subgraphs():
    assert encode_chunk(_chunk(np.random.default_rng(0), 1, 1, False), _specs())
    empty = SubgraphChunk(bytes_array([]), bytes_array([]), {}, {})
    assert encode_chunk(empty, _specs()) == []


def _mutated(mutate):
    chunk = _chunk(np.random.default_rng(5), 6, 3, True)
    mutate(chunk)
    return chunk


def _set_index(chunk, where, value):
    chunk.edge_rows["cites"][0][where] = value


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda c: c.node_rows["paper"].batch.features.pop("f32"),
         r"node set 'paper': feature 'f32' is missing"),
        (lambda c: c.node_rows["paper"].batch.features.update(f32=np.zeros((TABLE_ROWS, 2))),
         r"node set 'paper': feature 'f32' has shape \(\d+, 2\), expected \(\d+, 3\)"),
        (lambda c: c.node_rows["author"].batch.features.update(n=np.array([b"a"] * 99)),
         r"node set 'author': feature 'n' has dtype \|S1, expected int values"),
        (lambda c: c.node_rows["paper"].index.__setitem__(0, TABLE_ROWS),
         r"node set 'paper': rows outside a table of 60"),
        (lambda c: c.node_rows["paper"].index.__setitem__(0, -1),
         r"node set 'paper': rows outside a table of 60"),
        (lambda c: _set_index(c, (1, 0), 1000),
         r"edge set 'cites': #target index 1000 but the sample's node set has \d+ nodes"),
        (lambda c: _set_index(c, (0, 0), -1),
         r"edge set 'cites': #source index -1 but the sample's node set has \d+ nodes"),
        (lambda c: c.node_rows["author"].batch.ids.__setitem__(0, "a0"),
         r"node set 'author': node ids must be bytes"),
        (lambda c: c.node_rows["paper"].batch.features["tags"].__setitem__(
            (slice(None), 0), "x"),
         r"node set 'paper': feature 'tags' holds a non-bytes value"),
        (lambda c: c.node_rows.update(nope=c.node_rows["author"]),
         r"chunk: sets \['nope'\] not in schema"),
    ],
)  # fmt: skip
def test_chunks_that_cannot_be_written_are_value_errors(mutate, match):
    with pytest.raises(ValueError, match=match):
        encode_chunk(_mutated(mutate), _specs())


def _mag_graph(tmp_path):
    graph = synthetic.generate_mag(300, feature_dim=4, all_node_features=True, edge_weights=True)
    return load_graph(synthetic.write_graph(graph, str(tmp_path), fmt="parquet"))


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_sampled_chunks(tmp_path, aggregation):
    graph = _mag_graph(tmp_path)
    plan = make_plan(graph, synthetic.mag_sampling_spec(), aggregation)
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = make_seeds(mem.node_tables["paper"].rows.ids[:150])
    specs = encode_specs(graph.schema)
    counters = collections.Counter()
    chunks = in_memory.sample_chunks(graph, plan, mem, seeds, Randomness(4), counters, 64)
    assert sum(len(_same(chunk, specs)) for chunk in chunks) == 150


def test_link_chunks(tmp_path):
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
    assert sum(len(_same(chunk, specs)) for chunk in link.sample_link_chunks(*args)) > 100
