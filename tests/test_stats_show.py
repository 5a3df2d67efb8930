"""`stats` and `show` on real pipeline output, and `stats` on a DGL partition folder."""

from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np
import pytest
from tensorflow.core.example import example_pb2

from pipelines import cli, show, stats
from sampler.partition import dgl_format
from sampler.tools import synthetic
from tests.pipeline_helpers import read_records, run_pipeline

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_size(path) -> tuple[int, int]:
    """(width, height) from the PNG header; fails unless the file is a PNG."""
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    length, chunk = struct.unpack(">I4s", head[8:16])
    assert chunk == b"IHDR" and length == 13
    return struct.unpack(">II", head[16:24])


def assert_png(path, width, height):
    assert os.path.getsize(path) > 2000, f"{path} is (nearly) empty"
    assert png_size(path) == (width, height)


@pytest.fixture(scope="module")
def samples(tmp_path_factory):
    """200 papers; the `feat` of every 4th paper is all-NaN (a missing feature)."""
    root = tmp_path_factory.mktemp("stats")
    graph = synthetic.generate_mag(200, seed=9, feature_dim=4)
    table = graph.tables["paper"]
    feat = np.array(table["feat"].to_pylist(), dtype=np.float32)
    feat[::4] = np.nan
    import pyarrow as pa

    column = pa.FixedSizeListArray.from_arrays(pa.array(feat.reshape(-1)), 4)
    graph.tables["paper"] = table.set_column(table.schema.get_field_index("feat"), "feat", column)
    schema = synthetic.write_graph(graph, str(root / "graph"))
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    run_pipeline(schema, spec, str(root / "out" / "samples@2"), "--progress_interval", "0")
    return root, str(root / "out" / "samples-*")


def parsed(pattern):
    """The records parsed with TensorFlow's tf.Example proto, independently of the tools."""
    return [example_pb2.Example.FromString(r) for r in read_records(pattern)]


def size_of(example, key) -> int:
    return example.features.feature[key].int64_list.value[0]


def test_stats_summary_and_histograms(samples, capsys):
    root, pattern = samples
    examples = parsed(pattern)
    assert cli.main(["stats", "--samples", pattern]) == 0
    out = capsys.readouterr().out
    assert "subgraphs: 200," in out
    summary = json.loads((root / "out" / "stats" / "summary.json").read_text())
    assert summary["count"] == len(examples) == 200
    assert summary["files"] == 2
    assert summary["bytes"]["total"] == sum(len(e.SerializeToString()) for e in examples)
    for kind, key in (("node_sets", "nodes"), ("edge_sets", "edges")):
        for name, entry in summary[kind].items():
            sizes = np.array([size_of(e, f"{key}/{name}.#size") for e in examples])
            assert entry["mean"] == pytest.approx(sizes.mean(), abs=1e-4)
            assert entry["p50"] == pytest.approx(np.percentile(sizes, 50))
            assert entry["p95"] == pytest.approx(np.percentile(sizes, 95))
            assert entry["max"] == sizes.max() and entry["total"] == sizes.sum()
    # Coverage of paper.feat: the rows that are not all-NaN, counted from the raw floats.
    rows = present = 0
    for e in examples:
        values = np.array(e.features.feature["nodes/paper.feat"].float_list.value).reshape(-1, 4)
        rows += len(values)
        present += int((~np.isnan(values).all(axis=1)).sum())
    coverage = summary["node_sets"]["paper"]["features"]["feat"]["coverage"]
    assert 0 < present < rows
    assert coverage == pytest.approx(present / rows, abs=1e-6)
    assert summary["node_sets"]["paper"]["features"]["year"]["coverage"] == 1.0
    assert "nodes/paper.feat" in out  # partial coverage is reported
    for key in summary["node_sets"]:
        assert_png(root / "out" / "stats" / f"hist_nodes_{key}.png", 640, 400)
    for key in summary["edge_sets"]:
        assert_png(root / "out" / "stats" / f"hist_edges_{key}.png", 640, 400)


def test_stats_max_records_and_output_dir(samples, tmp_path, capsys):
    _, pattern = samples
    out_dir = tmp_path / "s"
    code = stats.main(
        ["--samples", pattern, "--max_records", "7", "--output_dir", str(out_dir), "--no_plots"]
    )
    assert code == 0
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["count"] == 7
    assert not list(out_dir.glob("*.png"))


def test_show_by_index_and_by_seed(samples, tmp_path, capsys):
    _, pattern = samples
    examples = parsed(pattern)
    third = examples[3]
    seed = third.features.feature["context/seed_id"].bytes_list.value[0].decode()
    papers = [v.decode() for v in third.features.feature["nodes/paper.#id"].bytes_list.value]
    assert show.main(["--samples", pattern, "--index", "3", "--max_items", "3"]) == 0
    out = capsys.readouterr().out
    assert f"seed_id: {seed}" in out
    assert f"  * [0] {seed}  feat=" in out  # the seed, marked, with its features
    assert f"    [1] {papers[1]}" in out
    assert f"node set paper: {len(papers)} nodes" in out
    cites = third.features.feature
    n_cites = size_of(third, "edges/cites.#size")
    assert f"edge set cites (paper -> paper): {n_cites} edges" in out
    if n_cites:
        src = cites["edges/cites.#source"].int64_list.value[0]
        dst = cites["edges/cites.#target"].int64_list.value[0]
        star = lambda i: "*" if i == 0 else ""  # noqa: E731
        assert f"    {papers[src]}{star(src)} -> {papers[dst]}{star(dst)}" in out
    png = tmp_path / "sub.png"
    assert show.main(["--samples", pattern, "--seed_id", seed, "--png", str(png)]) == 0
    again = capsys.readouterr().out
    assert f"seed_id: {seed}" in again and "subgraph 3 " in again
    assert_png(png, 900, 700)


def test_show_errors(samples, capsys):
    _, pattern = samples
    assert show.main(["--samples", pattern, "--seed_id", "nope"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: --seed_id nope: no subgraph has this seed or sample id"
    )
    assert show.main(["--samples", pattern, "--index", "100000"]) == 2
    assert "the samples hold only 200 subgraphs" in capsys.readouterr().err
    assert show.main(["--samples", pattern + "-missing"]) == 2
    with pytest.raises(SystemExit) as e:
        show.main(["--samples", pattern, "--index", "1", "--seed_id", "p1"])
    assert e.value.code == 2
    for name in ("stats", "show"):
        with pytest.raises(SystemExit) as e:
            cli.main([name, "--help"])
        assert e.value.code == 0


def test_without_matplotlib_json_still_written_and_png_fails_clearly(
    samples, tmp_path, capsys, monkeypatch
):
    _, pattern = samples
    for name in list(sys.modules):
        if name == "matplotlib" or name.startswith("matplotlib."):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    assert stats.main(["--samples", pattern, "--output_dir", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "note: no PNG written: PNG plots need matplotlib" in err
    assert "pip install 'beam-graph-sampler[plot]'" in err
    assert (tmp_path / "summary.json").exists() and not list(tmp_path.glob("*.png"))
    assert show.main(["--samples", pattern, "--png", str(tmp_path / "x.png")]) == 1
    assert "PNG plots need matplotlib" in capsys.readouterr().err


# --------------------------------------------------------------------------- partitions


def write_partition(root) -> str:
    """Two partitions of papers P0..P3 and authors A0, A1, by hand (docs/DGL_FORMAT.md#partition-graph).

    part 0 owns P0, P1, A0 (new ids 0, 1 | 2); part 1 owns P2, P3, A1 (3, 4 | 5).
    writes: A0->P0, A1->P0 (cut), A1->P3; cites: P0->P1, P2->P1 (cut), P3->P2, P0->P3 (cut).
    """
    meta = {
        "graph_name": "tiny",
        "num_nodes": 6,
        "num_edges": 7,
        "part_method": "random",
        "num_parts": 2,
        "halo_hops": 1,
        "node_map": {"paper": [[0, 2], [3, 5]], "author": [[2, 3], [5, 6]]},
        "edge_map": {
            "author:writes:paper": [[0, 2], [4, 5]],
            "paper:cites:paper": [[2, 4], [5, 7]],
        },
        "ntypes": {"paper": 0, "author": 1},
        "etypes": {"author:writes:paper": 0, "paper:cites:paper": 1},
    }
    parts = [
        # local nodes: P0 P1 A0 | HALO P2 P3 A1; edges A0->P0 A1->P0 P0->P1 P2->P1 | P0->P3
        dict(
            ntype=[0, 0, 1, 0, 0, 1],
            inner=[1, 1, 1, 0, 0, 0],
            nid=[0, 1, 2, 3, 4, 5],
            src=[2, 5, 0, 3, 0],
            dst=[0, 0, 1, 1, 4],
            etype=[0, 0, 1, 1, 1],
            owned=[1, 1, 1, 1, 0],
            eid=[0, 1, 2, 3, 6],
        ),
        # local nodes: P2 P3 A1 | HALO P0 P1; edges A1->P3 P3->P2 P0->P3 | A1->P0 P2->P1
        dict(
            ntype=[0, 0, 1, 0, 0],
            inner=[1, 1, 1, 0, 0],
            nid=[3, 4, 5, 0, 1],
            src=[2, 1, 3, 2, 0],
            dst=[1, 0, 1, 3, 4],
            etype=[0, 1, 1, 0, 1],
            owned=[1, 1, 1, 0, 0],
            eid=[4, 5, 6, 1, 3],
        ),
    ]
    for p, part in enumerate(parts):
        meta[f"part-{p}"] = {
            "node_feats": f"part{p}/node_feat.dgl",
            "edge_feats": f"part{p}/edge_feat.dgl",
            "part_graph": f"part{p}/graph.dgl",
        }
        os.makedirs(root / f"part{p}")
        graph = dgl_format.HomoGraph(
            num_nodes=len(part["ntype"]),
            src=np.array(part["src"], np.int64),
            dst=np.array(part["dst"], np.int64),
            ndata={
                "_TYPE": np.array(part["ntype"], np.int32),
                "part_id": np.array([p if i else 1 - p for i in part["inner"]], np.int64),
                "inner_node": np.array(part["inner"], np.uint8),
                "_ID": np.array(part["nid"], np.int64),
            },
            edata={
                "_TYPE": np.array(part["etype"], np.int32),
                "inner_edge": np.array(part["owned"], np.uint8),
                "_ID": np.array(part["eid"], np.int64),
            },
        )
        dgl_format.save_graph(root / f"part{p}" / "graph.dgl", graph)
    (root / "tiny.json").write_text(json.dumps(meta, indent=4))
    return str(root)


def test_partition_stats(tmp_path, capsys):
    folder = write_partition(tmp_path / "parts")
    assert cli.main(["stats", "--partition", folder]) == 0
    out = capsys.readouterr().out
    report = json.loads((tmp_path / "parts" / "stats" / "partition_stats.json").read_text())
    assert report["num_parts"] == 2 and report["num_nodes"] == 6 and report["num_edges"] == 7
    assert report["cut_edges"] == 3
    assert report["edge_cut"] == pytest.approx(3 / 7, abs=1e-6)
    assert report["halo_nodes"] == 5
    assert report["halo_fraction"] == pytest.approx(5 / 11, abs=1e-6)
    assert report["edge_cut_per_etype"] == {
        "author:writes:paper": pytest.approx(1 / 3, abs=1e-6),
        "paper:cites:paper": pytest.approx(2 / 4, abs=1e-6),
    }
    assert report["matches_json_maps"] is True
    p0, p1 = report["partitions"]
    assert p0["inner_nodes"] == {"paper": 2, "author": 1} == p1["inner_nodes"]
    assert p0["halo_nodes"] == {"paper": 2, "author": 1}
    assert p1["halo_nodes"] == {"paper": 2, "author": 0}
    assert p0["edges"] == {"author:writes:paper": 2, "paper:cites:paper": 2}
    assert p1["edges"] == {"author:writes:paper": 1, "paper:cites:paper": 2}
    assert p0["cut_edges_total"] == 2 and p1["cut_edges_total"] == 1
    assert "edge cut 42.9%, HALO fraction 45.5%" in out
    assert_png(tmp_path / "parts" / "stats" / "partition_stats.png", 1000, 450)


def test_partition_stats_notices_a_map_mismatch_and_bad_folders(tmp_path, capsys):
    folder = write_partition(tmp_path / "parts")
    config = tmp_path / "parts" / "tiny.json"
    meta = json.loads(config.read_text())
    meta["node_map"]["paper"] = [[0, 3], [3, 5]]
    config.write_text(json.dumps(meta))
    assert stats.main(["--partition", folder, "--no_plots"]) == 0
    assert "warning: inner node/edge counts differ" in capsys.readouterr().out
    assert stats.main(["--partition", str(tmp_path / "nothing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert stats.main(["--partition", str(empty)]) == 2
    assert "no DGL partition configs" in capsys.readouterr().err


def test_partition_stats_agree_with_the_partition_stage(tmp_path, capsys):
    """On the partition stage's real output: totals from the JSON, its own edge cut."""
    from tests.partition_helpers import run_partition

    graph = synthetic.generate_mag(150, seed=3, all_node_features=True)
    schema = synthetic.write_graph(graph, str(tmp_path / "g"))
    run_partition(schema, str(tmp_path / "parts"), "--num_parts", "3", "--part_method", "random")
    capsys.readouterr()
    assert stats.main(["--partition", str(tmp_path / "parts")]) == 0
    report = json.loads((tmp_path / "parts" / "stats" / "partition_stats.json").read_text())
    meta = json.loads((tmp_path / "parts" / "g.json").read_text())
    theirs = json.loads((tmp_path / "parts" / "cut_report.json").read_text())
    assert report["matches_json_maps"] is True
    assert report["num_parts"] == 3
    assert report["num_nodes"] == meta["num_nodes"] == theirs["num_nodes"]
    assert report["num_edges"] == meta["num_edges"] == theirs["num_edges"]
    assert report["cut_edges"] == theirs["cut_edges"]
    assert report["edge_cut"] == pytest.approx(theirs["edge_cut"], abs=1e-6)
    assert 0 < report["halo_fraction"] < 1
    assert_png(tmp_path / "parts" / "stats" / "partition_stats.png", 1000, 450)
