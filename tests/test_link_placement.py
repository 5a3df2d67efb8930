"""Link seeds on every placement that takes them: `worker`, `topology` and `--runner InMemory`
give the same bytes and the same seed accounting (`sharded`: tests/test_sharded_links.py). Also: link sample ids stay
unambiguous whatever the node ids hold.

The graph has node features on every set (so `topology` joins them) and `writes` edges whose
author or paper is in no node table (dangling): default seeds count them in `seeds_in` and
reject them as `not_in_seed_node_set`, on Beam and in memory alike.
"""

from __future__ import annotations

import collections
import json
import urllib.parse

import pyarrow as pa
import pytest

from sampler.sample import in_memory, link
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.pipeline_helpers import link_oracle_records, read_records, run_pipeline
from tests.test_golden import write, write_text
from tests.test_library import LINK_SPEC
from tests.test_link_prediction import HOMO_SCHEMA, HOMO_SPEC

GHOSTS = [(b"ghost_author", b"p1"), (b"a1", b"ghost_paper"), (b"a1", b"ghost_paper")]


@pytest.fixture(scope="module")
def featured_links(tmp_path_factory):
    """(schema, spec, seeds.csv, writes rows) on a 30-paper graph with dangling writes rows."""
    root = tmp_path_factory.mktemp("link_placement")
    graph = synthetic.generate_mag(30, seed=6, feature_dim=3, all_node_features=True)
    writes = graph.tables["writes"]
    ghosts = pa.table(
        {"#source": [s for s, _ in GHOSTS], "#target": [t for _, t in GHOSTS]},
        schema=writes.schema,
    )
    graph.tables["writes"] = pa.concat_tables([writes, ghosts])
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="parquet", num_shards=2)
    spec = write_text(root / "spec.pbtxt", LINK_SPEC)
    pairs = [(s.decode(), t.decode()) for s, t in zip(*writes.to_pydict().values(), strict=True)]
    seeds = pairs[:5] + [pairs[0], pairs[3], ("a1", "ghost_paper"), ("nobody", "p2")]
    write_text(root / "seeds.csv", "#source,#target\n" + "".join(f"{s},{t}\n" for s, t in seeds))
    return schema, spec, str(root / "seeds.csv"), writes.num_rows + len(GHOSTS)


def run(tmp_path, schema, spec, name, *extra) -> tuple[list[bytes], dict]:
    out = tmp_path / name
    beam = [] if "InMemory" in extra else ["--num_shards", "3", "--num_buckets", "2"]
    run_pipeline(
        schema, spec, f"{out}/samples@2", "--seed_edge_set", "writes", "--seed", "3",
        *beam, *extra,
    )  # fmt: skip
    summary = json.loads((out / "run_summary.json").read_text())["samples"]
    return read_records(f"{out}/samples-*-of-00002"), summary


@pytest.mark.parametrize(
    "aggregation, negatives, with_seeds",
    [("edge", 0, False), ("node", 2, False), ("edge", 2, True), ("node", 0, True)],
)
def test_topology_worker_and_in_memory_give_the_same_bytes_and_accounting(
    featured_links, tmp_path, aggregation, negatives, with_seeds
):
    schema, spec, seeds, writes_rows = featured_links
    flags = ["--edge_aggregation_method", aggregation, "--negatives_per_seed", str(negatives)]
    flags += ["--input_seeds", seeds] if with_seeds else []
    runs = {
        name: run(tmp_path, schema, spec, name, *flags, *how)
        for name, how in (
            ("worker", ["--graph_placement", "worker"]),
            ("topology", ["--graph_placement", "topology"]),
            ("memory", ["--runner", "InMemory"]),
        )
    }
    expected = link_oracle_records(
        schema,
        spec,
        "writes",
        seed=3,
        negatives=negatives,
        input_seeds=seeds if with_seeds else None,
        aggregation=aggregation,
    )
    seeds_in, rejected = (9, 2) if with_seeds else (writes_rows, len(GHOSTS))
    assert len(expected) == (seeds_in - rejected) * (1 + negatives)
    for name, (records, summary) in runs.items():
        assert sorted(records) == sorted(expected), name
        assert summary["seeds_in"] == seeds_in, name
        assert summary["seeds_rejected"]["not_in_seed_node_set"] == rejected, name
        assert summary["subgraphs_out"] == len(expected) and summary["balanced"], name
    # The features were joined (topology), not left out: the records carry author features.
    specs = encode_specs(
        link.link_output_schema(load_graph(schema).schema, plan_of(schema, spec, aggregation))
    )
    sub = decode_subgraph(runs["topology"][0][0], specs)
    assert sub.node_sets["author"].features["feat"].shape == (len(sub.node_sets["author"].ids), 4)
    assert sub.node_sets["author"].features["feat"].any()


def plan_of(schema, spec, aggregation="edge"):
    return make_plan(load_graph(schema), load_sampling_spec(spec), aggregation, "writes")


# Ids holding the separators: unescaped, (a, b:1) would be the repeat a->b:1 of (a, b),
# (a, b#neg0) the negative a->b#neg0 of (a, b), and (x->y, b) / (x, y->b) would meet.
TRICKY = ["a", "b", "b:1", "b#neg0", "x->y", "x", "y->b", "50%3E"]
TRICKY_EDGES = [("a", "b"), ("a", "b"), ("a", "b:1"), ("a", "b#neg0"), ("x->y", "b")]
TRICKY_EDGES += [("x", "y->b"), ("x", "50%3E"), ("x", "50>")]


def test_sample_ids_are_unambiguous_and_unescape_to_the_pair(tmp_path):
    write(tmp_path, "n", "csv", {"#id": [*TRICKY, "50>"]}, {})
    columns = {"#source": [s for s, _ in TRICKY_EDGES], "#target": [t for _, t in TRICKY_EDGES]}
    write(tmp_path, "e", "csv", columns, {})
    schema = write_text(tmp_path / "schema.pbtxt", HOMO_SCHEMA)
    spec = write_text(tmp_path / "spec.pbtxt", HOMO_SPEC)
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), "edge", "e")
    nodes, adjacency = in_memory.load_tables(graph, plan)
    mem = in_memory.densify(graph, nodes, adjacency)
    seeds = link.make_link_seeds(*link.edge_pairs(adjacency["e"]))
    counters = collections.Counter()
    subs = list(link.sample_links_in_memory(graph, plan, mem, seeds, Randomness(0), counters, 2))
    sample_ids = [s.sample_id for s in subs]
    assert len(subs) == 3 * len(TRICKY_EDGES)
    assert len(set(sample_ids)) == len(sample_ids)
    positives = collections.defaultdict(list)
    for sub in subs:
        source, target = (urllib.parse.unquote(x) for x in sub.seed_id.decode().split("->"))
        ids = sub.node_sets["n"].ids
        readout = sub.edge_sets[link.READOUT_SOURCE], sub.edge_sets[link.READOUT_TARGET]
        assert (source, target) == tuple(ids[r.source[0]].decode() for r in readout)
        if b"#neg" not in sub.sample_id:
            base, _, repeat = sub.sample_id.decode().partition(":")
            assert urllib.parse.unquote(base) == f"{source}->{target}"
            positives[(source, target)].append(repeat)
    assert {pair: sorted(r) for pair, r in positives.items()} == {
        pair: ["", "1"][:n] for pair, n in collections.Counter(TRICKY_EDGES).items()
    }
    assert b"a->b%3A1" in sample_ids and b"a->b%23neg0" in sample_ids
    assert b"x-%3Ey->b" in sample_ids and b"x->y-%3Eb" in sample_ids
    assert b"x->50%253E" in sample_ids and b"x->50%3E" in sample_ids
