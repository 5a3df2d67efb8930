"""Link seeds on every placement that takes them: `worker`, `topology` and `--runner InMemory`
give the same bytes and the same seed accounting; `sharded` (and an `auto` budget only
`sharded` fits: tests/test_placement.py) is refused with one line.

The graph has node features on every set (so `topology` joins them) and `writes` edges whose
author or paper is in no node table (dangling): default seeds count them in `seeds_in` and
reject them as `not_in_seed_node_set`, on Beam and in memory alike.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from pipelines import sample as sample_cli
from sampler.sample import link
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.pipeline_helpers import link_oracle_records, read_records, run_pipeline
from tests.test_golden import write_text
from tests.test_library import LINK_SPEC

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
    run_pipeline(
        schema, spec, f"{out}/samples@2", "--seed_edge_set", "writes", "--seed", "3",
        "--num_shards", "3", "--num_buckets", "2", *extra,
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


def test_sharded_is_refused_in_one_line(featured_links, tmp_path, capsys):
    schema, spec, _, _ = featured_links
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--seed_edge_set", "writes"]
    argv += ["--output_samples", str(tmp_path / "out" / "s"), "--graph_placement", "sharded"]
    assert sample_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "sharded does not support symmetric_link_seed_op" in err[0]
    assert "topology" in err[0]
