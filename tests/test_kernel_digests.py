"""Regression pins of the compiled kernels: records and partition files stay the
same bytes as before the kernels were compiled.

The digests in tests/kernel_digests.json were recorded from the numpy kernels BEFORE any
compiled kernel existed (commit "tests: digests of today's records..."), so they are an
independent check of the compiled code: it must make every choice the numpy code made.
The records' meaning is checked elsewhere (test_golden.py by hand, test_statistics.py by
distribution); these pins check that nothing moved, for every strategy (uniform through
Floyd and with sample_size >= degree, TOP_K, RANDOM_WEIGHTED), both aggregations, node and
link seeds, several --seed values, every placement (`--runner InMemory`, `worker`,
`topology`, `sharded`), and the partition files of `random`, `lp` and `metis`.

The input tables' digest is pinned too, so a change of the synthetic generator fails as
such and not as a kernel change. To re-record after an INTENDED change of the records:
`python -m tests.test_kernel_digests --record` (say why in the commit).
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import pathlib
import sys

import pytest

from pipelines import partition as partition_cli
from pipelines import sample as sample_cli
from sampler.tools import synthetic

DIGESTS = pathlib.Path(__file__).with_name("kernel_digests.json")

# Every strategy: cites has weights; sizes below the degrees make Floyd draw, 40 covers
# "sample_size at or above every degree".
MIXED_SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "uni" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "top" input_op_names: "seed" input_op_names: "uni"
  edge_set_name: "cites" sample_size: 3 strategy: TOP_K }
sampling_ops { op_name: "wtd" input_op_names: "top" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_WEIGHTED }
sampling_ops { op_name: "authors" input_op_names: "seed" input_op_names: "wtd"
  edge_set_name: "written" sample_size: 3 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "papers" input_op_names: "authors" edge_set_name: "writes"
  sample_size: 40 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "inst" input_op_names: "authors" edge_set_name: "affiliated_with"
  sample_size: 1 strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "topics" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "has_topic" sample_size: 2 strategy: RANDOM_UNIFORM }
"""

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 2
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "cited" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "cites" sample_size: 2 strategy: RANDOM_WEIGHTED }
sampling_ops { op_name: "top" input_op_names: "cited" edge_set_name: "cites" sample_size: 1
  strategy: TOP_K }
"""

# name -> (spec, extra flags). Every case runs with --runner InMemory; BEAM_CASES also
# on the Beam placements (each Beam run costs seconds, so fewer of them).
SAMPLE_CASES = {
    "mag-edge-s0": ("mag", ["--edge_aggregation_method", "edge", "--seed", "0"]),
    "mag-node-s3": ("mag", ["--edge_aggregation_method", "node", "--seed", "3"]),
    "mixed-edge-s0": ("mixed", ["--edge_aggregation_method", "edge", "--seed", "0"]),
    "mixed-edge-s11": ("mixed", ["--edge_aggregation_method", "edge", "--seed", "11"]),
    "mixed-node-s5": ("mixed", ["--edge_aggregation_method", "node", "--seed", "5"]),
    "link-edge-neg2": ("link", ["--seed_edge_set", "writes", "--negatives_per_seed", "2"]),
    "link-node-keep": (
        "link",
        ["--seed_edge_set", "writes", "--keep_seed_edges", "--edge_aggregation_method", "node"],
    ),
}
BEAM_CASES = {
    "worker": ["mixed-edge-s0", "mag-node-s3"],
    "topology": ["mixed-node-s5"],
    "sharded": ["mixed-edge-s0", "mag-node-s3", "link-edge-neg2"],
}
PARTITION_CASES = {
    "random": ["--part_method", "random", "--num_parts", "3"],
    "lp": ["--part_method", "lp", "--num_parts", "3", "--seed", "2"],
    "metis": ["--part_method", "metis", "--num_parts", "2", "--balance_edges"],
}


def _digest_records(out_dir: str) -> str:
    """sha256 of the output's records, sorted (shards may cut them differently), and of its
    schema.pbtxt."""
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(out_dir, "samples-*")))
    assert files, os.listdir(out_dir)
    records = sorted(r.numpy() for f in files for r in tf.data.TFRecordDataset(f))
    h = hashlib.sha256()
    for r in records:
        h.update(len(r).to_bytes(8, "little"))
        h.update(r)
    h.update(pathlib.Path(out_dir, "schema.pbtxt").read_bytes())
    return f"{len(records)}:{h.hexdigest()}"


def _digest_folder(out_dir: str) -> dict[str, str]:
    """sha256 of every partition file of a folder (not the run's own record: run_summary.json
    and the dot-files of the folder's ownership)."""
    root = pathlib.Path(out_dir)
    out = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if name != "run_summary.json" and not path.name.startswith("."):
            out[name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def make_inputs(root: pathlib.Path) -> dict[str, str]:
    """The graph (CSV: string ids through the fingerprint kernel) and the specs."""
    graph = synthetic.generate_mag(160, seed=7, feature_dim=4, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="csv")
    paths = {"schema": schema}
    specs = {"mag": None, "mixed": MIXED_SPEC, "link": LINK_SPEC}
    for name, text in specs.items():
        path = root / f"{name}.pbtxt"
        if text is None:
            synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(path))
        else:
            path.write_text(text)
        paths[name] = str(path)
    h = hashlib.sha256()
    for f in sorted((root / "graph").iterdir()):
        h.update(f.name.encode() + f.read_bytes())
    paths["inputs_digest"] = h.hexdigest()
    return paths


def run_sample(paths, root: pathlib.Path, case: str, placement: str) -> str:
    spec, extra = SAMPLE_CASES[case]
    out = root / f"out-{case}-{placement}"
    argv = ["--graph_schema", paths["schema"], "--sampling_spec", paths[spec]]
    argv += ["--output_samples", str(out / "samples@2"), *extra]
    if placement == "InMemory":
        argv += ["--runner", "InMemory"]
    else:
        argv += ["--graph_placement", placement, "--num_shards", "2", "--num_buckets", "2"]
    assert sample_cli.main(argv) == 0
    return _digest_records(str(out))


def run_partition(paths, root: pathlib.Path, method: str) -> dict[str, str]:
    out = root / f"part-{method}"
    argv = ["--graph_schema", paths["schema"], "--output_dir", str(out), "--graph_name", "g"]
    argv += [*PARTITION_CASES[method], "--runner", "InMemory"]
    assert partition_cli.main(argv) == 0
    return _digest_folder(str(out))


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernel_digests")
    return root, make_inputs(root)


@pytest.fixture(scope="module")
def pinned():
    return json.loads(DIGESTS.read_text())


def test_inputs_are_the_recorded_ones(inputs, pinned):
    assert inputs[1]["inputs_digest"] == pinned["inputs"], "the synthetic generator changed"


@pytest.mark.parametrize("case", sorted(SAMPLE_CASES))
def test_in_memory_records(inputs, pinned, case):
    root, paths = inputs
    assert run_sample(paths, root, case, "InMemory") == pinned["samples"][case]


@pytest.mark.parametrize(
    "placement,case", [(p, c) for p, cases in sorted(BEAM_CASES.items()) for c in cases]
)
def test_beam_records(inputs, pinned, placement, case):
    root, paths = inputs
    assert run_sample(paths, root, case, placement) == pinned["samples"][case]


@pytest.mark.parametrize("method", sorted(PARTITION_CASES))
def test_partition_files(inputs, pinned, method):
    root, paths = inputs
    assert run_partition(paths, root, method) == pinned["partition"][method]


def record(root: pathlib.Path) -> dict:
    """Runs every case once (InMemory and each Beam placement, which must agree)."""
    paths = make_inputs(root)
    samples = {case: run_sample(paths, root, case, "InMemory") for case in SAMPLE_CASES}
    for placement, cases in BEAM_CASES.items():
        for case in cases:
            got = run_sample(paths, root, case, placement)
            assert got == samples[case], f"{placement} disagrees with InMemory on {case}"
    partition = {m: run_partition(paths, root, m) for m in PARTITION_CASES}
    return {"inputs": paths["inputs_digest"], "samples": samples, "partition": partition}


if __name__ == "__main__":
    import tempfile

    assert sys.argv[1:] == ["--record"], "usage: python -m tests.test_kernel_digests --record"
    with tempfile.TemporaryDirectory() as tmp:
        result = record(pathlib.Path(tmp))
    DIGESTS.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DIGESTS}")


@pytest.mark.parametrize("case", ["mixed-edge-s0", "mag-node-s3", "link-edge-neg2"])
def test_in_memory_records_without_bitmaps(inputs, pinned, case, monkeypatch):
    """The paths for large node sets (no bitmap of every (sample, row)) give the same records."""
    from sampler import arrays

    monkeypatch.setattr(arrays, "_BITMAP_LIMIT", 0)
    root, paths = inputs
    out = run_sample(paths, root / "no-bitmaps", case, "InMemory")
    assert out == pinned["samples"][case]
