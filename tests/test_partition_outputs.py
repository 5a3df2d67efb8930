"""What the partition files hold for their consumers: masks (table ones and --split's), the
dgl and graphstorm layouts, the report's name and the raw id mappings.

The files are read back with sampler/partition/dgl_read.py (checked against the real DGL by
tests/test_dgl_format.py) and compared with the generator's tables through
tests/partition_helpers.reference_graph, which numbers the nodes independently of the
pipeline. DGL itself loads both layouts in tests/test_partition_dgl.py; GraphStorm trains on
the graphstorm layout in tests/test_graphstorm.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from pipelines import partition as partition_cli
from sampler import ids
from sampler.partition.dgl_read import load_tensors
from sampler.partition.output_format import Split, parse_split, split_masks
from sampler.protos import tensor_pb2
from sampler.tools import synthetic
from tests.partition_helpers import reference_graph, run_partition

MASKS = ("train_mask", "val_mask", "test_mask")


# --------------------------------------------------------------------------- kernels


def test_split_masks_are_disjoint_near_their_fractions_and_chunk_free():
    fp = ids.fingerprint(pa.array([f"p{i}".encode() for i in range(100_000)], pa.binary()))
    split = Split(0.7, 0.2, 0.05, seed=3)
    masks = split_masks("paper", fp, split)
    assert all(m.dtype == np.int8 and set(np.unique(m)) <= {0, 1} for m in masks.values())
    total = sum(m.astype(np.int64) for m in masks.values())
    assert total.max() == 1  # disjoint
    for name, fraction in zip(MASKS, (0.7, 0.2, 0.05), strict=True):
        assert abs(masks[name].mean() - fraction) < 0.005, name
    assert abs((total == 0).mean() - 0.05) < 0.005  # in no set
    # A node's masks depend on its id only, not on the rows beside it.
    halves = [split_masks("paper", part, split) for part in (fp[:31_337], fp[31_337:])]
    for name in MASKS:
        np.testing.assert_array_equal(
            masks[name], np.concatenate([h[name] for h in halves]), err_msg=name
        )
    # The seed and the node type salt the draw.
    for other in (split_masks("paper", fp, Split(0.7, 0.2, 0.05, seed=4)),
                  split_masks("author", fp, split)):  # fmt: skip
        agree = (other["train_mask"] == masks["train_mask"]).mean()
        assert 0.5 < agree < 0.65  # about 0.7^2 + 0.3^2 when independent
    everything = split_masks("paper", fp, Split(1.0, 0.0, 0.0))
    assert everything["train_mask"].all() and not everything["val_mask"].any()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("paper", "NTYPE:TRAIN,VAL,TEST"),
        ("paper:0.8,0.2", "NTYPE:TRAIN,VAL,TEST"),
        ("paper:a,b,c", "must be numbers"),
        ("paper:0.8,0.3,0.1", "more than 1"),
        ("paper:0.8,-0.1,0.1", "at least 0"),
    ],
)
def test_split_flag_errors(text, fragment):
    with pytest.raises(Exception, match=fragment):
        parse_split(text)


# --------------------------------------------------------------------------- pipeline


def with_table_masks(graph, values: dict[str, np.ndarray], dtype=tensor_pb2.DT_BOOL):
    """The paper table with extra integer columns (features of the schema)."""
    paper = graph.tables["paper"]
    for name, column in values.items():
        feature = graph.schema.node_sets["paper"].features[name]
        feature.dtype = dtype
        paper = paper.append_column(name, pa.array(column.astype(np.int64)))
    graph.tables["paper"] = paper
    return graph


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("outputs")
    graph = synthetic.generate_mag(300, seed=9, feature_dim=3, edge_weights=True)
    sharded = synthetic.write_graph(graph, str(root / "sharded"), fmt="parquet", num_shards=3)
    single = synthetic.write_graph(graph, str(root / "single"), fmt="tfrecord")
    rng = np.random.default_rng(0)
    train = (rng.random(300) < 0.5).astype(np.int64)
    masked = synthetic.generate_mag(300, seed=9, feature_dim=3, edge_weights=True)
    masked = with_table_masks(masked, {"train_mask": train, "test_mask": 1 - train})
    masked_path = synthetic.write_graph(masked, str(root / "masked"), fmt="parquet")
    return {
        "root": root,
        "sharded": sharded,
        "single": single,
        "graph": graph,
        "masked": (masked_path, masked),
    }


def node_feats(folder: Path, num_parts: int) -> dict[str, np.ndarray]:
    """The features of all parts, each type's rows in original-id order (orig_nids.dgl)."""
    out: dict[str, list] = {}
    orig: dict[str, list] = {}
    for p in range(num_parts):
        ids_p = load_tensors(folder / f"part{p}" / "orig_nids.dgl")
        for key, value in load_tensors(folder / f"part{p}" / "node_feat.dgl").items():
            out.setdefault(key, []).append(value)
            orig.setdefault(key, []).append(ids_p[key.split("/")[0]])
    result = {}
    for key, parts in out.items():
        values, order = np.concatenate(parts), np.concatenate(orig[key])
        result[key] = values[np.argsort(order)]
    return result


def test_graphstorm_layout_dtypes_masks_and_raw_ids(graphs, tmp_path):
    out = tmp_path / "gs"
    run_partition(graphs["sharded"], str(out), "--num_parts", "2", "--layout", "graphstorm",
                  "--split", "paper:0.6,0.2,0.2", "--seed", "7")  # fmt: skip
    ref = reference_graph(graphs["graph"].schema, graphs["graph"].tables)
    feats = node_feats(out, 2)
    n = len(ref.node_ids["paper"])
    # Model inputs 2-D float32, the label as it is, the masks 1-D int8.
    assert feats["paper/feat"].dtype == np.float32 and feats["paper/feat"].shape == (n, 3)
    assert feats["paper/year"].dtype == np.float32 and feats["paper/year"].shape == (n, 1)
    assert feats["paper/label"].dtype == np.int64 and feats["paper/label"].shape == (n,)
    np.testing.assert_array_equal(feats["paper/year"][:, 0], ref.node_feats["paper"]["year"])
    np.testing.assert_array_equal(feats["paper/label"], ref.node_feats["paper"]["label"])
    # The masks of node k are those of its id (reference order: fingerprint ranks).
    fp = ids.fingerprint(pa.array(list(ref.node_ids["paper"]), pa.binary()))
    expected = split_masks("paper", fp, Split(0.6, 0.2, 0.2, seed=7))
    for name in MASKS:
        got = feats[f"paper/{name}"]
        assert got.dtype == np.int8 and got.shape == (n,), name
        np.testing.assert_array_equal(got, expected[name], err_msg=name)
    edge = load_tensors(out / "part0" / "edge_feat.dgl")["paper:cites:paper/weight"]
    assert edge.dtype == np.float32 and edge.ndim == 2 and edge.shape[1] == 1
    # raw_id_mappings: every node once, its string id -> its original id.
    for ntype, id_list in ref.node_ids.items():
        table = pq.read_table(out / "raw_id_mappings" / ntype)
        assert table.schema == pa.schema([("orig", pa.string()), ("new", pa.int64())])
        got = dict(
            zip(table.column("orig").to_pylist(), table.column("new").to_pylist(), strict=True)
        )
        assert got == {v.decode(): i for i, v in enumerate(id_list)}, ntype
    # Nothing but the partitions starts with "part"; the report has its new name.
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part")) == ["part0", "part1"]
    report = json.loads((out / "cut_report.json").read_text())
    assert report["layout"] == "graphstorm" and report["split"] == {"paper": [0.6, 0.2, 0.2]}


def test_dgl_layout_keeps_dtypes_and_writes_masks_as_int8(graphs, tmp_path):
    out = tmp_path / "dgl"
    run_partition(graphs["sharded"], str(out), "--num_parts", "2", "--split", "paper:1,0,0")
    feats = node_feats(out, 2)
    assert feats["paper/year"].dtype == np.int64 and feats["paper/year"].ndim == 1
    assert feats["paper/feat"].dtype == np.float32 and feats["paper/feat"].ndim == 2
    assert feats["paper/train_mask"].dtype == np.int8 and feats["paper/train_mask"].all()
    assert not feats["paper/val_mask"].any() and not feats["paper/test_mask"].any()
    assert not (out / "raw_id_mappings").exists()
    assert not (out / "partition_report.json").exists() and (out / "cut_report.json").exists()


def test_table_masks_pass_through_as_int8(graphs, tmp_path):
    path, graph = graphs["masked"]
    out = tmp_path / "masked"
    run_partition(path, str(out), "--num_parts", "3", "--layout", "graphstorm")
    ref = reference_graph(graph.schema, graph.tables)
    feats = node_feats(out, 3)
    for name in ("train_mask", "test_mask"):
        got = feats[f"paper/{name}"]
        assert got.dtype == np.int8 and got.ndim == 1, name
        np.testing.assert_array_equal(got, ref.node_feats["paper"][name], err_msg=name)
    assert "paper/val_mask" not in feats


def test_split_masks_are_the_same_bytes_on_any_sharding_and_workers(graphs):
    """Every file, masks included, with other input files, --num_shards and 2 workers; the
    raw id tables (one per node shard) hold the same rows."""
    root = graphs["root"]
    flags = ["--num_parts", "3", "--layout", "graphstorm", "--split", "paper:0.8,0.1,0.1",
             "--balance_ntypes", "train_mask", "--seed", "2"]  # fmt: skip
    run_partition(graphs["sharded"], str(root / "a"), *flags)
    run_partition(graphs["single"], str(root / "b"), *flags, "--num_shards", "5",
                  "--direct_running_mode=multi_processing", "--direct_num_workers=2")  # fmt: skip
    a, b = folder_files(root / "a"), folder_files(root / "b")
    assert sorted(a) == sorted(b) and "part2/node_feat.dgl" in a
    for name in a:
        assert a[name] == b[name], name
    for ntype in ("author", "paper"):
        ta, tb = (pq.read_table(root / x / "raw_id_mappings" / ntype) for x in "ab")
        assert ta.sort_by("new").equals(tb.sort_by("new")), ntype
    # --balance_ntypes train_mask: both values of the mask dealt evenly over the parts.
    report = json.loads((root / "a" / "cut_report.json").read_text())
    for value in (0, 1):
        counts = report["class_balance"][f"paper/train_mask={value}"]["counts"]
        assert max(counts) - min(counts) <= 1, (value, counts)
    train = node_feats(root / "a", 3)["paper/train_mask"]
    assert sum(report["class_balance"]["paper/train_mask=1"]["counts"]) == int(train.sum())


def folder_files(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder).as_posix()
        skip = rel.split("/")[0] in ("node_ids", "raw_id_mappings")
        skip = skip or rel in ("run_summary.json", ".beam_graph_manifest.json")
        if path.is_file() and not skip:
            out[rel] = path.read_bytes()
    return out


@pytest.mark.parametrize(
    "flags, fragment",
    [
        (["--split", "nope:0.8,0.1,0.1"], "no node set of that name"),
        (["--split", "paper:0.8,0.1,0.1", "--split", "paper:0.5,0.5,0"], "more than once"),
        (["--labels", "nope"], "--labels: no node or edge set has a feature 'nope'"),
        (["--balance_ntypes", "train_mask"], "no node set has a feature of that name"),
    ],
)
def test_user_errors_are_one_line(graphs, tmp_path, flags, fragment, capsys):
    argv = ["--graph_schema", graphs["sharded"], "--output_dir", str(tmp_path / "e"),
            "--graph_name", "g", "--num_parts", "2", *flags]  # fmt: skip
    assert partition_cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and fragment in err[-1], err[-5:]


def test_mask_errors_are_one_line(graphs, tmp_path, capsys):
    path, graph = graphs["masked"]
    base = ["--graph_schema", path, "--graph_name", "g", "--num_parts", "2"]
    argv = [*base, "--output_dir", str(tmp_path / "a"), "--split", "paper:0.8,0.1,0.1"]
    assert partition_cli.main(argv) == 2
    assert "already has a feature test_mask" in capsys.readouterr().err.strip().splitlines()[-1]
    # A mask holding 2: the run stops with one line naming the feature.
    bad = synthetic.generate_mag(60, seed=1, feature_dim=2)
    bad = with_table_masks(bad, {"val_mask": np.arange(60) % 3}, tensor_pb2.DT_INT32)
    bad_path = synthetic.write_graph(bad, str(tmp_path / "bad"), fmt="parquet")
    argv = ["--graph_schema", bad_path, "--graph_name", "g", "--num_parts", "2",
            "--output_dir", str(tmp_path / "b")]  # fmt: skip
    assert partition_cli.main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("error: feature 'paper/val_mask': a mask holds 0 or 1, found 2"), last
    # A float mask: refused before anything runs.
    floaty = synthetic.generate_mag(60, seed=1, feature_dim=2)
    floaty = with_table_masks(floaty, {"train_mask": np.zeros(60)}, tensor_pb2.DT_FLOAT)
    floaty.tables["paper"] = floaty.tables["paper"].set_column(
        floaty.tables["paper"].column_names.index("train_mask"),
        "train_mask",
        pc.cast(floaty.tables["paper"].column("train_mask"), pa.float32()),
    )
    floaty_path = synthetic.write_graph(floaty, str(tmp_path / "floaty"), fmt="parquet")
    argv = ["--graph_schema", floaty_path, "--graph_name", "g", "--num_parts", "2",
            "--output_dir", str(tmp_path / "c")]  # fmt: skip
    assert partition_cli.main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "must be a scalar integer or boolean" in last, last


def test_overwrite_removes_an_earlier_versions_report(graphs, tmp_path):
    """A folder partitioned before the rename holds partition_report.json, which GraphStorm
    would take for a partition: --overwrite removes it with the rest."""
    out = tmp_path / "old"
    run_partition(graphs["sharded"], str(out), "--num_parts", "2")
    (out / "cut_report.json").rename(out / "partition_report.json")
    run_partition(graphs["sharded"], str(out), "--num_parts", "2", "--overwrite")
    assert not (out / "partition_report.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("part")) == ["part0", "part1"]
