"""The same inputs and --seed give the same files, not only the same records: `--runner
InMemory` and the Beam placements lay the records out over the shards by one rule (shard s
holds buckets s, s + N, ... of the default --num_buckets, each bucket's records in sample
order; link seeds in chunks of link.LINK_CHUNK), so every shard is the same bytes.

Each run's shards are compared with `--runner InMemory`'s byte for byte. The records
themselves are checked elsewhere (test_kernel_digests.py pins them as sorted sets)."""

from __future__ import annotations

import pathlib

import pytest

from pipelines import sample as sample_cli
from sampler.tools import synthetic

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""

BEAM = ["--direct_running_mode=multi_processing", "--direct_num_workers=2"]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("same_files")
    mag = synthetic.generate_mag(300, seed=3, feature_dim=4)
    schema = synthetic.write_graph(mag, str(root / "graph"), fmt="parquet")
    node_spec = root / "node.pbtxt"
    synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(node_spec))
    link_spec = root / "link.pbtxt"
    link_spec.write_text(LINK_SPEC)
    return root, schema, {"node": str(node_spec), "link": str(link_spec)}


_RUNS: dict[str, list] = {}


def _shards(graph, name: str, spec: str, runner_flags: list[str], extra: list[str]) -> list:
    if name in _RUNS:
        return _RUNS[name]
    root, schema, specs = graph
    out = root / name
    argv = ["--graph_schema", schema, "--sampling_spec", specs[spec]]
    argv += ["--output_samples", str(out / "samples@3"), "--seed", "5", *extra, *runner_flags]
    assert sample_cli.main(argv) == 0
    files = sorted(pathlib.Path(out).glob("samples-*"))
    assert len(files) == 3, files
    _RUNS[name] = [(f.name, f.read_bytes()) for f in files]
    return _RUNS[name]


CASES = {
    "node": ("node", []),
    "link": ("link", ["--seed_edge_set", "writes", "--negatives_per_seed", "2"]),
}
PLACEMENTS = {
    "worker": ["--graph_placement", "worker", *BEAM],
    "topology": ["--graph_placement", "topology", *BEAM],
    "sharded": ["--graph_placement", "sharded", *BEAM],
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("placement", sorted(PLACEMENTS))
def test_beam_placements_write_the_in_memory_runners_files(graph, case, placement):
    if (placement, case) == ("sharded", "link"):
        pytest.skip("sharded buckets a negative by its own key: same records, other files")
    spec, extra = CASES[case]
    expected = _shards(graph, f"{case}-mem", spec, ["--runner", "InMemory"], extra)
    assert sum(len(b) for _, b in expected) > 1000, "too few records to compare"
    assert sum(1 for _, b in expected if b) == 3, "a shard is empty: the layout is not tested"
    got = _shards(graph, f"{case}-{placement}", spec, PLACEMENTS[placement], extra)
    for (name, want), (_, have) in zip(expected, got, strict=True):
        assert have == want, f"{placement}'s {name} differs from --runner InMemory's"


def test_worker_shards_of_one_bucket_each_are_the_in_memory_runners_files(graph):
    """As many shards as buckets (32, the default): each bucket's part becomes its shard by a
    rename, the files --runner InMemory writes."""
    root, schema, specs = graph
    files = {}
    for name, flags in (("mem", ["--runner", "InMemory"]), ("worker", PLACEMENTS["worker"])):
        out = root / f"node-{name}-32"
        argv = ["--graph_schema", schema, "--sampling_spec", specs["node"], "--seed", "5"]
        assert sample_cli.main([*argv, "--output_samples", f"{out}/samples@32", *flags]) == 0
        files[name] = [(f.name, f.read_bytes()) for f in sorted(out.glob("samples-*"))]
    assert len(files["mem"]) == 32 and sum(1 for _, b in files["mem"] if b) > 16
    assert files["worker"] == files["mem"]
