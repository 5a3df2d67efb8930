"""Link prediction (symmetric_link_seed_op): golden graphs computed by hand, no leakage,
negatives (deterministic, uniform), and the records in TF-GNN's structured readout convention.

Golden graph 1 (homogeneous): node set n = {a, b, c, d}; edge set e: a->b, a->c, b->c, b->d,
c->a; edge set r reads e's table reversed: b->a, c->a, c->b, d->b, a->c. Seed edge a->b of e.
The pair (a, b) is removed from e and r in both directions (one node set), so
  edge aggregation, ops seed->e and seed->r (sample_size 10 >= every degree):
    e from {a, b}: a->c, b->c, b->d (a->b dropped);  r from {a, b}: a->c (b->a dropped)
  node aggregation, every edge among {a, b, c, d} except a->b, b->a:
    e: a->c, b->c, b->d, c->a;  r: c->a, c->b, d->b, a->c
Golden graph 2 (heterogeneous): writes author->paper: u1->p1, u1->p2, u2->p1; written is its
reverse. Seed u1->p1 of writes; ops seed->writes (from u1) and seed->written (from p1):
  edge: writes u1->p2; written p1->u2.   node: writes u1->p2, u2->p1; written p2->u1, p1->u2.
"""

from __future__ import annotations

import collections
import glob

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_gnn as tfgnn
from google.protobuf import text_format
from tensorflow_gnn.proto import graph_schema_pb2

from pipelines import sample as sample_cli
from sampler.sample import in_memory, link
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from tests.test_golden import write, write_text

HOMO_SCHEMA = """
node_sets { key: "n" value { metadata { filename: "n.csv" } } }
edge_sets { key: "e" value { source: "n" target: "n" metadata { filename: "e.csv" } } }
edge_sets { key: "r" value { source: "n" target: "n"
  metadata { filename: "e.csv" extra { key: "edge_type" value: "reversed" } } } }
"""
HOMO_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "out" input_op_names: "seed" edge_set_name: "e" sample_size: 10
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "in" input_op_names: "seed" edge_set_name: "r" sample_size: 10
  strategy: RANDOM_UNIFORM }
"""
HETERO_SCHEMA = """
node_sets { key: "author" value { metadata { filename: "author.csv" } } }
node_sets { key: "paper" value { metadata { filename: "paper.csv" } } }
edge_sets { key: "writes" value { source: "author" target: "paper"
  metadata { filename: "writes.csv" } } }
edge_sets { key: "written" value { source: "paper" target: "author"
  metadata { filename: "writes.csv" extra { key: "edge_type" value: "reversed" } } } }
"""
HETERO_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "w" input_op_names: "seed" edge_set_name: "writes" sample_size: 10
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "wb" input_op_names: "seed" edge_set_name: "written" sample_size: 10
  strategy: RANDOM_UNIFORM }
"""

# (nodes per set, edges per set as (source id, target id), readout (source id, target id))
HOMO_EXPECTED = {
    "edge": (
        {"n": {"a", "b", "c", "d"}},
        {"e": {("a", "c"), ("b", "c"), ("b", "d")}, "r": {("a", "c")}},
    ),
    "node": (
        {"n": {"a", "b", "c", "d"}},
        {
            "e": {("a", "c"), ("b", "c"), ("b", "d"), ("c", "a")},
            "r": {("c", "a"), ("c", "b"), ("d", "b"), ("a", "c")},
        },
    ),
}
HETERO_EXPECTED = {
    "edge": (
        {"author": {"u1", "u2"}, "paper": {"p1", "p2"}},
        {"writes": {("u1", "p2")}, "written": {("p1", "u2")}},
    ),
    "node": (
        {"author": {"u1", "u2"}, "paper": {"p1", "p2"}},
        {"writes": {("u1", "p2"), ("u2", "p1")}, "written": {("p2", "u1"), ("p1", "u2")}},
    ),
}


def write_homo(d):
    write(d, "n", "csv", {"#id": ["a", "b", "c", "d"]}, {})
    pairs = [("a", "b"), ("a", "c"), ("b", "c"), ("b", "d"), ("c", "a")]
    write(d, "e", "csv", {"#source": [p[0] for p in pairs], "#target": [p[1] for p in pairs]}, {})
    return write_text(d / "schema.pbtxt", HOMO_SCHEMA), write_text(d / "spec.pbtxt", HOMO_SPEC)


def write_hetero(d):
    write(d, "author", "csv", {"#id": ["u1", "u2"]}, {})
    write(d, "paper", "csv", {"#id": ["p1", "p2"]}, {})
    pairs = [("u1", "p1"), ("u1", "p2"), ("u2", "p1")]
    write(
        d, "writes", "csv", {"#source": [p[0] for p in pairs], "#target": [p[1] for p in pairs]}, {}
    )
    return write_text(d / "schema.pbtxt", HETERO_SCHEMA), write_text(d / "spec.pbtxt", HETERO_SPEC)


def run_cli(tmp_path, schema, spec, seed_edge_set, *extra, seeds=None, name="out"):
    out = tmp_path.parent / f"{tmp_path.name}-{name}"
    argv = [
        "--graph_schema", schema, "--sampling_spec", spec, "--seed_edge_set", seed_edge_set,
        "--output_samples", str(out / "samples@2"), *extra,
    ]  # fmt: skip
    if "InMemory" not in extra:  # (it refuses the Beam pipeline's flags)
        argv += ["--num_shards", "3", "--num_buckets", "2"]
    if seeds is not None:
        write(
            tmp_path,
            "seeds",
            "csv",
            {"#source": [s for s, _ in seeds], "#target": [t for _, t in seeds]},
            {},
        )
        argv += ["--input_seeds", str(tmp_path / "seeds.csv")]
    assert sample_cli.main(argv) == 0
    records = [
        r.numpy()
        for f in sorted(glob.glob(str(out / "samples-*")))
        for r in tf.data.TFRecordDataset(f)
    ]
    schema_pb = text_format.Parse(
        (out / "schema.pbtxt").read_text(), graph_schema_pb2.GraphSchema()
    )
    return records, schema_pb, out


def decoded(records, schema_pb):
    specs = encode_specs(schema_pb)
    return {s.sample_id.decode(): s for s in (decode_subgraph(r, specs) for r in records)}


def summary(sub, source_set, target_set):
    """(nodes, edges, readout ids, label) of a decoded link example, as plain Python."""
    ids = {k: [x.decode() for x in v.ids] for k, v in sub.node_sets.items()}
    nodes = {k: set(v) for k, v in ids.items() if k != link.READOUT}
    edges = {}
    for name, es in sub.edge_sets.items():
        if name.startswith("_readout"):
            continue
        info_src, info_dst = EDGE_ENDS[name]
        edges[name] = {
            (ids[info_src][s], ids[info_dst][t])
            for s, t in zip(es.source.tolist(), es.target.tolist(), strict=True)
        }
    src = sub.edge_sets[link.READOUT_SOURCE]
    dst = sub.edge_sets[link.READOUT_TARGET]
    assert src.target.tolist() == [0] and dst.target.tolist() == [0]
    readout = (ids[source_set][src.source[0]], ids[target_set][dst.source[0]])
    assert ids[source_set][0] == readout[0], "the source endpoint is node 0 of its set"
    if target_set != source_set:
        assert ids[target_set][0] == readout[1], "the target endpoint is node 0 of its set"
    label = int(sub.node_sets[link.READOUT].features[link.LABEL][0])
    return nodes, edges, readout, label


EDGE_ENDS = {
    "e": ("n", "n"),
    "r": ("n", "n"),
    "writes": ("author", "paper"),
    "written": ("paper", "author"),
}


@pytest.mark.parametrize("aggregation", ["edge", "node"])
@pytest.mark.parametrize("runner", ["InMemory", "beam"])
def test_golden_homogeneous(tmp_path, aggregation, runner):
    schema, spec = write_homo(tmp_path)
    extra = ["--edge_aggregation_method", aggregation]
    if runner == "InMemory":
        extra += ["--runner", "InMemory"]
    records, schema_pb, _ = run_cli(tmp_path, schema, spec, "e", *extra, seeds=[("a", "b")])
    subs = decoded(records, schema_pb)
    assert list(subs) == ["a->b"]
    nodes, edges, readout, label = summary(subs["a->b"], "n", "n")
    assert (nodes, edges) == HOMO_EXPECTED[aggregation]
    assert readout == ("a", "b") and label == 1


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_golden_heterogeneous(tmp_path, aggregation):
    schema, spec = write_hetero(tmp_path)
    extra = ["--edge_aggregation_method", aggregation, "--runner", "InMemory"]
    records, schema_pb, _ = run_cli(tmp_path, schema, spec, "writes", *extra, seeds=[("u1", "p1")])
    subs = decoded(records, schema_pb)
    nodes, edges, readout, label = summary(subs["u1->p1"], "author", "paper")
    assert (nodes, edges) == HETERO_EXPECTED[aggregation]
    assert readout == ("u1", "p1") and label == 1


def test_keep_seed_edges_keeps_them(tmp_path):
    schema, spec = write_homo(tmp_path)
    extra = ["--runner", "InMemory", "--keep_seed_edges"]
    records, schema_pb, _ = run_cli(tmp_path, schema, spec, "e", *extra, seeds=[("a", "b")])
    _, edges, _, _ = summary(decoded(records, schema_pb)["a->b"], "n", "n")
    expected = HOMO_EXPECTED["edge"][1]
    assert edges == {"e": expected["e"] | {("a", "b")}, "r": expected["r"] | {("b", "a")}}


def test_default_seeds_are_every_edge_same_records_on_beam_and_in_memory(tmp_path):
    schema, spec = write_hetero(tmp_path)
    flags = ["--negatives_per_seed", "2"]
    beam_records, schema_pb, out = run_cli(tmp_path, schema, spec, "writes", *flags, name="b")
    mem_records, _, _ = run_cli(
        tmp_path, schema, spec, "writes", *flags, "--runner", "InMemory", name="m"
    )
    assert sorted(beam_records) == sorted(mem_records)
    subs = decoded(beam_records, schema_pb)
    positives = sorted(k for k in subs if "#neg" not in k)
    assert positives == ["u1->p1", "u1->p2", "u2->p1"]
    assert len(subs) == 9
    import json

    summary_json = json.loads((out / "run_summary.json").read_text())
    assert summary_json["samples"]["seeds_in"] == 3
    assert summary_json["samples"]["balanced"]


def random_graph(d, n=60, m=400, seed=1):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, n, m)
    dst = rng.integers(0, n, m)
    names = [f"v{i}" for i in range(n)]
    write(d, "n", "csv", {"#id": names}, {})
    write(
        d, "e", "csv", {"#source": [names[i] for i in src], "#target": [names[i] for i in dst]}, {}
    )
    spec = HOMO_SPEC.replace("sample_size: 10", "sample_size: 2")
    spec += """sampling_ops { op_name: "hop2" input_op_names: "out" input_op_names: "in"
      edge_set_name: "e" sample_size: 3 strategy: RANDOM_UNIFORM }"""
    return write_text(d / "schema.pbtxt", HOMO_SCHEMA), write_text(d / "spec.pbtxt", spec)


@pytest.mark.parametrize("aggregation", ["edge", "node"])
def test_seed_edge_never_in_its_subgraph(tmp_path, aggregation):
    """Every edge is a seed; degrees are small, so without the rule the seed edge (the source's
    own out-edge, sampled with probability >= 2/degree) would be in most subgraphs."""
    schema, spec = random_graph(tmp_path)
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation, "e")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = link.seeds_from_adjacency(mem, plan)
    specs = encode_specs(link.link_output_schema(graph.schema, plan))
    leaks = {False: 0, True: 0}
    for keep in (False, True):
        for sub in link.sample_links_in_memory(
            graph, plan, mem, seeds, Randomness(0), collections.Counter(), 1, keep
        ):
            ids = sub.node_sets["n"].ids
            a = ids[sub.edge_sets[link.READOUT_SOURCE].source[0]]
            b = ids[sub.edge_sets[link.READOUT_TARGET].source[0]]
            pairs = set()
            for name in ("e", "r"):
                es = sub.edge_sets[name]
                pairs |= {(ids[s], ids[t]) for s, t in zip(es.source, es.target, strict=True)}
            leaks[keep] += (a, b) in pairs or (b, a) in pairs
            assert len(specs.node_sets)  # encodable below
    assert leaks[False] == 0
    assert leaks[True] > 0.5 * len(seeds)


def test_negatives_deterministic_and_uniform(tmp_path):
    schema, spec = random_graph(tmp_path, n=20, m=300)
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), "edge", "e")
    mem = in_memory.load_dense_graph(graph, plan)
    seeds = link.seeds_from_adjacency(mem, plan)

    def negatives(seed, chunk_size):
        counters = collections.Counter()
        out = {}
        for sub in link.sample_links_in_memory(
            graph, plan, mem, seeds, Randomness(seed), counters, 10, chunk_size=chunk_size
        ):
            label = int(sub.node_sets[link.READOUT].features[link.LABEL][0])
            b = sub.node_sets["n"].ids[sub.edge_sets[link.READOUT_TARGET].source[0]]
            if label == 0:
                out[sub.sample_id] = b
            else:
                assert b"#neg" not in sub.sample_id
        return out, counters

    first, counters = negatives(0, 512)
    again, _ = negatives(0, 7)  # other chunks: same negatives
    other, _ = negatives(1, 512)
    assert first == again
    assert first != other
    assert len(first) == 10 * len(seeds) == counters["negatives"]
    assert 0 < counters["negatives_that_are_edges"] < len(first)
    counts = collections.Counter(first.values())
    observed = np.array([counts.get(f"v{i}".encode(), 0) for i in range(20)], float)
    expected = len(first) / 20
    chi2 = float(((observed - expected) ** 2 / expected).sum())
    assert chi2 < 43.8  # chi-square, 19 degrees of freedom, p = 0.001


def test_records_parse_with_tfgnn_and_structured_readout(tmp_path):
    schema, spec = write_hetero(tmp_path)
    records, _, out = run_cli(
        tmp_path, schema, spec, "writes", "--runner", "InMemory", "--negatives_per_seed", "1"
    )
    graph_spec = tfgnn.create_graph_spec_from_schema_pb(
        tfgnn.read_schema(str(out / "schema.pbtxt"))
    )
    assert len(records) == 6
    for record in records:
        graph = tfgnn.parse_single_example(graph_spec, tf.constant(record))
        sample_id = graph.context["sample_id"].numpy()[0].decode()
        seed = graph.context["seed_id"].numpy()[0].decode()
        src_id, dst_id = seed.split("->")
        source = tfgnn.structured_readout(graph, "source", feature_name="#id")
        target = tfgnn.structured_readout(graph, "target", feature_name="#id")
        assert source.numpy().tolist() == [src_id.encode()]
        assert target.numpy().tolist() == [dst_id.encode()]
        label = graph.node_sets["_readout"]["label"].numpy().tolist()
        assert label == ([0] if "#neg" in sample_id else [1])


def test_spec_errors(tmp_path):
    schema, spec = write_homo(tmp_path)
    out = str(tmp_path.parent / f"{tmp_path.name}-err" / "s")
    base = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", out]
    assert sample_cli.main(base) == 2  # no --seed_edge_set
    assert sample_cli.main([*base, "--seed_edge_set", "nope"]) == 2


def test_validate_and_estimate(tmp_path, capsys):
    from pipelines import estimate, validate

    schema, spec = write_hetero(tmp_path)
    write(tmp_path, "seeds", "csv", {"#source": ["u1"], "#target": ["p1"]}, {})
    flags = ["--graph_schema", schema, "--sampling_spec", spec, "--seed_edge_set", "writes"]
    assert validate.main([*flags, "--input_seeds", str(tmp_path / "seeds.csv")]) == 0
    out = capsys.readouterr().out
    assert "seed op 'seed' on the edges of 'writes' (author -> paper)" in out
    assert validate.main(flags[:4]) == 1  # no --seed_edge_set: the spec check fails
    assert "needs --seed_edge_set" in capsys.readouterr().out
    assert estimate.main([*flags, "--probe_seeds", "2", "--negatives_per_seed", "1"]) == 0
    assert "seeds:   3 seed edges (every edge of 'writes'), x (1 + 1 negatives): 6 examples" in (
        capsys.readouterr().out
    )


def test_bad_seed_rows_are_dead_letters(tmp_path):
    import json

    schema, spec = write_hetero(tmp_path)
    (tmp_path / "seeds.csv").write_text("#source,#target\nu1,p1\nu2\nu9,p1\n")
    out = tmp_path.parent / f"{tmp_path.name}-out"
    argv = [
        "--graph_schema", schema, "--sampling_spec", spec, "--seed_edge_set", "writes",
        "--output_samples", str(out / "samples"), "--input_seeds", str(tmp_path / "seeds.csv"),
        "--max_bad_records", "1",
    ]  # fmt: skip
    assert sample_cli.main(argv) == 0
    (bad,) = glob.glob(str(out / "bad_records-*.jsonl"))
    lines = [json.loads(x) for x in open(bad).read().splitlines()]
    assert [x["set"] for x in lines] == ["seeds"]
    samples = json.loads((out / "run_summary.json").read_text())["samples"]
    assert samples["seeds_in"] == 2 and samples["subgraphs_out"] == 1
    assert samples["seeds_rejected"]["not_in_seed_node_set"] == 1 and samples["balanced"]
