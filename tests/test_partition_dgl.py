"""The partition stage's output, loaded by the real DGL 2.1.0 and checked against DGL's invariants.

Every folder is written by `python -m pipelines.partition` (in process) and loaded in the
side venv by tests/oracle/dgl_partition_oracle.py (`load_partition` with DGL_DIST_DEBUG=1,
so DGL's own `_verify_dgl_partition` runs too, and `load_partition_book`). All folders of
the module are loaded by one DGL process. The oracle venv is built when missing (never
skipped), as in tests/test_dgl_format.py.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from google.protobuf import text_format

from sampler.features import feature_specs
from sampler.io.writers import write_table
from sampler.protos import graph_schema_pb2
from sampler.tools import synthetic
from tests.partition_helpers import reference_graph, run_partition

ROOT = Path(__file__).resolve().parents[1]
ORACLE = ROOT / "tests" / "oracle" / "dgl_partition_oracle.py"

# (case name, graph, extra CLI flags)
CASES = [
    ("hetero_random_1", "mag", ["--num_parts", "1"]),
    ("hetero_random_2", "mag", ["--num_parts", "2", "--seed", "5"]),
    ("hetero_random_4", "mag", ["--num_parts", "4"]),
    ("hetero_metis_3", "mag", ["--num_parts", "3", "--part_method", "metis"]),
    ("hetero_lp_4", "mag", ["--num_parts", "4", "--part_method", "lp", "--lp_rounds", "4"]),
    (
        "hetero_balanced_3",
        "mag",
        ["--num_parts", "3", "--part_method", "lp", "--lp_rounds", "2"]
        + ["--balance_ntypes", "year", "--balance_edges"],
    ),
    ("homo_random_1", "homo", ["--num_parts", "1"]),
    ("homo_random_3", "homo", ["--num_parts", "3"]),
    ("homo_metis_2", "homo", ["--num_parts", "2", "--part_method", "metis"]),
    ("hetero_2hops_3", "mag", ["--num_parts", "3", "--num_hops", "2", "--seed", "1"]),
    ("homo_3hops_4", "homo", ["--num_parts", "4", "--num_hops", "3"]),
    # 40 papers: 1 institution and 3 fields of study for 4 parts, so some partitions have
    # empty type blocks [x, x] and no inner edges of some edge types.
    ("tiny_random_4", "tiny", ["--num_parts", "4"]),
    # GraphStorm's layout (2-D float32 inputs, int8 masks of --split, raw_id_mappings/).
    (
        "hetero_graphstorm_2",
        "mag",
        ["--num_parts", "2", "--part_method", "lp", "--lp_rounds", "2", "--layout", "graphstorm"]
        + ["--split", "paper:0.6,0.2,0.2", "--balance_ntypes", "train_mask"],
    ),
    ("homo_graphstorm_1", "homo", ["--num_parts", "1", "--layout", "graphstorm"]),
]


def write_homogeneous(directory: Path) -> tuple[graph_schema_pb2.GraphSchema, dict]:
    """One node set and one edge set (papers citing papers), with features on both."""
    mag = synthetic.generate_mag(120, seed=4, feature_dim=3, edge_weights=True)
    schema = graph_schema_pb2.GraphSchema()
    schema.node_sets["paper"].CopyFrom(mag.schema.node_sets["paper"])
    schema.edge_sets["cites"].CopyFrom(mag.schema.edge_sets["cites"])
    tables = {"paper": mag.tables["paper"], "cites": mag.tables["cites"]}
    directory.mkdir(parents=True, exist_ok=True)
    for name, table in tables.items():
        where = schema.node_sets[name] if name in schema.node_sets else schema.edge_sets[name]
        specs = feature_specs(where.features, name)
        write_table(str(directory / f"{name}.parquet"), table, "parquet", specs)
        where.metadata.filename = f"{name}.parquet"
    (directory / "graph_schema.pbtxt").write_text(text_format.MessageToString(schema))
    return schema, tables


@pytest.fixture(scope="module")
def graphs(tmp_path_factory):
    root = tmp_path_factory.mktemp("partition_graphs")
    out = {}
    mag = synthetic.generate_mag(
        300, seed=2, feature_dim=4, all_node_features=True, edge_weights=True
    )
    path = synthetic.write_graph(mag, str(root / "mag"), fmt="parquet", num_shards=3)
    out["mag"] = (path, mag.schema, mag.tables)
    tiny = synthetic.generate_mag(40, seed=3, feature_dim=2)
    path = synthetic.write_graph(tiny, str(root / "tiny"), fmt="csv")
    out["tiny"] = (path, tiny.schema, tiny.tables)
    schema, tables = write_homogeneous(root / "homo")
    out["homo"] = (str(root / "homo"), schema, tables)
    return out


@pytest.fixture(scope="module")
def loaded(graphs, dgl_python, tmp_path_factory):
    """Every case partitioned, then loaded by DGL in one process: {case: (folder, meta, npz)}."""
    root = tmp_path_factory.mktemp("partitions")
    jobs = []
    for name, graph, flags in CASES:
        schema_path = graphs[graph][0]
        run_partition(schema_path, str(root / name), *flags)
        jobs.append({"config": f"{name}/g.json", "out": f"{name}.npz", "meta": f"{name}.json"})
    (root / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(
        [str(dgl_python), str(ORACLE), str(root / "jobs.json")],
        capture_output=True,
        text=True,
        env={**os.environ, "DGL_DIST_DEBUG": "1"},
    )
    assert proc.returncode == 0, f"DGL could not load the partitions:\n{proc.stderr[-5000:]}"
    assert json.loads(proc.stdout.strip().splitlines()[-1])["dgl"] == "2.1.0"
    out = {}
    for name, _, _ in CASES:
        meta = json.loads((root / f"{name}.json").read_text())
        out[name] = (root / name, meta, dict(np.load(root / f"{name}.npz")))
    return out


def case_graph(name: str) -> str:
    return next(g for n, g, _ in CASES if n == name)


def num_parts_of(name: str) -> int:
    flags = next(f for n, _, f in CASES if n == name)
    return int(flags[flags.index("--num_parts") + 1])


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_dgl_loads_and_invariants_hold(case, loaded, graphs):
    folder, meta, arrays = loaded[case]
    _, schema, tables = graphs[case_graph(case)]
    ref = reference_graph(schema, tables)
    config = json.loads((folder / "g.json").read_text())
    num_parts = num_parts_of(case)
    assert config["num_parts"] == num_parts == len(meta["parts"])
    assert list(config) == [
        "graph_name", "num_nodes", "num_edges", "part_method", "num_parts", "halo_hops",
        "node_map", "edge_map", "ntypes", "etypes",
    ] + [f"part-{i}" for i in range(num_parts)]  # fmt: skip
    ntypes = ref.ntypes
    etypes = [":".join(e) for e in ref.etypes]
    assert config["ntypes"] == {t: i for i, t in enumerate(ntypes)}
    assert config["etypes"] == {e: i for i, e in enumerate(etypes)}
    num_nodes = sum(len(v) for v in ref.node_ids.values())
    num_edges = sum(len(v[0]) for v in ref.edges.values())
    assert (config["num_nodes"], config["num_edges"]) == (num_nodes, num_edges)

    # Ranges: partition-major, type-minor, contiguous, sorted, tiling [0, N).
    for key, names, total in (("node_map", ntypes, num_nodes), ("edge_map", etypes, num_edges)):
        flat = [config[key][n][p] for p in range(num_parts) for n in names]
        assert flat[0][0] == 0 and flat[-1][1] == total
        for (s0, e0), (s1, e1) in zip(flat, flat[1:], strict=False):
            assert s0 <= e0 == s1 <= e1

    # Type-wise new id <-> homogeneous new id, and new type-wise -> original via orig_nids.
    hom_of_orig = {}
    for t in ntypes:
        hom = np.concatenate([np.arange(*config["node_map"][t][p]) for p in range(num_parts)])
        orig = np.concatenate([arrays[meta["parts"][p]["orig_nids"][t]] for p in range(num_parts)])
        assert sorted(orig.tolist()) == list(range(len(ref.node_ids[t])))  # a permutation
        hom_of_orig[t] = np.empty(len(orig), np.int64)
        hom_of_orig[t][orig] = hom
    type_of_hom = np.empty(num_nodes, np.int64)
    for i, t in enumerate(ntypes):
        for p in range(num_parts):
            type_of_hom[slice(*config["node_map"][t][p])] = i

    seen_nodes = np.zeros(num_nodes, np.int64)
    seen_edges = np.zeros(num_edges, np.int64)
    got_edges = {e: [] for e in etypes}
    for p, part in enumerate(meta["parts"]):
        a = {k: arrays[v] for k, v in part["ndata"].items()}
        b = {k: arrays[v] for k, v in part["edata"].items()}
        expected_n = {"_ID": "torch.int64", "inner_node": "torch.uint8"}
        expected_e = {"_ID": "torch.int64", "inner_edge": "torch.uint8"}
        if num_parts > 1:
            expected_n["part_id"] = "torch.int64"
        if num_parts == 1 or len(ntypes) > 1 or len(etypes) > 1:
            expected_n["_TYPE"] = expected_e["_TYPE"] = "torch.int32"
        assert part["ndata_dtypes"] == expected_n
        assert part["edata_dtypes"] == expected_e
        inner = a["inner_node"].astype(bool)
        n_inner = int(inner.sum())
        assert inner[:n_inner].all() and not inner[n_inner:].any()  # inner nodes come first
        ids = a["_ID"]
        lo = config["node_map"][ntypes[0]][p][0]
        hi = config["node_map"][ntypes[-1]][p][1]
        np.testing.assert_array_equal(ids[:n_inner], np.arange(lo, hi))
        seen_nodes[ids[inner]] += 1
        assert len(np.unique(ids)) == len(ids)
        halo = ids[~inner]
        if num_parts > 1:
            assert np.all(a["part_id"][:n_inner] == p) and np.all(a["part_id"][n_inner:] != p)
            # The HALO's part ids agree with the ranges.
            for hid, hp in zip(halo, a["part_id"][n_inner:], strict=True):
                t = ntypes[type_of_hom[hid]]
                s, e = config["node_map"][t][hp]
                assert s <= hid < e
        if "_TYPE" in a:
            np.testing.assert_array_equal(a["_TYPE"], type_of_hom[ids])
        # Partition book: every inner _ID maps to this part, homogeneous and type-wise.
        assert part["book_partid"] == p and part["book_num_partitions"] == num_parts
        assert np.all(arrays[part["book_nid2partid"]] == p)
        assert np.all(arrays[part["book_eid2partid"]] == p)
        for t in ntypes:
            assert np.all(arrays[part["book_typed_partid"][t]] == p)
        np.testing.assert_array_equal(np.sort(arrays[part["book_local_nids"]]), ids[inner])
        np.testing.assert_array_equal(arrays[part["book_ntype_ids"]], type_of_hom[ids[inner]])

        # Edges: inner first, then outer; map through the orig-id files.
        src, dst = arrays[part["src"]], arrays[part["dst"]]
        inner_e = b["inner_edge"].astype(bool)
        m = int(inner_e.sum())
        assert inner_e[:m].all() and not inner_e[m:].any()
        assert np.all(inner[dst[:m]])  # an edge belongs to its target's partition
        seen_edges[b["_ID"][inner_e]] += 1
        etype_ids = b["_TYPE"] if "_TYPE" in b else np.zeros(len(src), np.int64)
        per_type_eids = arrays[part["book_per_type_eids"]]
        np.testing.assert_array_equal(arrays[part["book_etype_ids"]], etype_ids[:m])
        for i, e in enumerate(etypes):
            rows = np.flatnonzero(etype_ids[:m] == i)
            orig_eids = arrays[part["orig_eids"][e]]
            start = sum(
                np.diff(config["edge_map"][e][q]).item() for q in range(p)
            )  # type-wise ids of earlier parts
            assert len(orig_eids) == len(rows) == np.diff(config["edge_map"][e][p]).item()
            k = per_type_eids[rows] - start
            s_hom, d_hom = ids[src[rows]], ids[dst[rows]]
            got_edges[e].append((orig_eids[k], s_hom, d_hom))
            for feat, values in ref.edge_feats[e].items():
                stored = arrays[part["edge_feats"][f"{e}/{feat}"]]
                np.testing.assert_array_equal(stored, values[orig_eids].reshape(stored.shape))
        # Node features: row k of a type's block is original id orig_nids[t][k].
        for t in ntypes:
            orig = arrays[part["orig_nids"][t]]
            for feat, values in ref.node_feats[t].items():
                stored = arrays[part["node_feats"][f"{t}/{feat}"]]
                assert len(stored) == len(orig)
                np.testing.assert_array_equal(
                    stored.reshape(len(orig), -1), values[orig].reshape(len(orig), -1)
                )

        # HALO completeness: in-edge aggregation on the partition equals the whole graph's.
        agg = arrays[part["agg"]]
        whole = np.zeros(num_nodes)
        for e, (s_orig, d_orig) in ref.edges.items():
            s_t, _, d_t = e.split(":")
            np.add.at(whole, hom_of_orig[d_t][d_orig], hom_of_orig[s_t][s_orig].astype(np.float64))
        np.testing.assert_allclose(agg[:n_inner], whole[ids[:n_inner]])

    # Outer edges (out-edges of inner nodes to HALO nodes) are real edges of the graph.
    ends_of_eid = np.full((num_edges, 2), -1, np.int64)
    outer = []
    for part in meta["parts"]:
        ids = arrays[part["ndata"]["_ID"]]
        inner_n = arrays[part["ndata"]["inner_node"]].astype(bool)
        src, dst = arrays[part["src"]], arrays[part["dst"]]
        inner_e = arrays[part["edata"]["inner_edge"]].astype(bool)
        eid = arrays[part["edata"]["_ID"]]
        ends_of_eid[eid[inner_e], 0] = ids[src[inner_e]]
        ends_of_eid[eid[inner_e], 1] = ids[dst[inner_e]]
        assert not np.any(inner_n[dst[~inner_e]])
        if config["halo_hops"] == 1:  # deeper hops add in-edges between HALO nodes
            assert np.all(inner_n[src[~inner_e]])
        outer.append((eid[~inner_e], ids[src[~inner_e]], ids[dst[~inner_e]]))
    for eid, s_hom, d_hom in outer:
        np.testing.assert_array_equal(ends_of_eid[eid, 0], s_hom)
        np.testing.assert_array_equal(ends_of_eid[eid, 1], d_hom)
    assert np.all(seen_nodes == 1), "every node is inner in exactly one partition"
    assert np.all(seen_edges == 1), "every edge is inner in exactly one partition"
    # The orig-id mapping reproduces the original edges, each exactly once.
    for e in etypes:
        s_t, _, d_t = e.split(":")
        orig_eid = np.concatenate([x[0] for x in got_edges[e]])
        s_hom = np.concatenate([x[1] for x in got_edges[e]])
        d_hom = np.concatenate([x[2] for x in got_edges[e]])
        assert sorted(orig_eid.tolist()) == list(range(len(ref.edges[e][0])))
        r_src, r_dst = ref.edges[e]
        np.testing.assert_array_equal(s_hom, hom_of_orig[s_t][r_src[orig_eid]])
        np.testing.assert_array_equal(d_hom, hom_of_orig[d_t][r_dst[orig_eid]])


@pytest.mark.parametrize("case", [c[0] for c in CASES])
def test_halo_is_what_dgl_partition_graph_with_halo_keeps(case, loaded):
    """Nodes, edges, inner flags and endpoints of every partition, against DGL's own
    partition_graph_with_halo run (by the oracle) on the whole graph with the same
    node assignment and num_hops. Orders may differ (spec 8.4); the sets may not."""
    _, meta, arrays = loaded[case]
    for p, part in enumerate(meta["parts"]):
        nids = arrays[part["ndata"]["_ID"]]
        eids = arrays[part["edata"]["_ID"]]
        # Per local node / edge: (new id, inner flag[, source, target]), sorted by new id.
        ours = {
            "nodes": [nids, arrays[part["ndata"]["inner_node"]]],
            "edges": [
                eids,
                arrays[part["edata"]["inner_edge"]],
                nids[arrays[part["src"]]],
                nids[arrays[part["dst"]]],
            ],
        }
        dgl = {
            "nodes": [arrays[part["ref_nids"]], arrays[part["ref_inner_node"]]],
            "edges": [arrays[part[f"ref_{k}"]] for k in ("eids", "inner_edge", "src", "dst")],
        }
        for what in ("nodes", "edges"):
            mine, theirs = ours[what], dgl[what]
            order, ref_order = np.argsort(mine[0]), np.argsort(theirs[0])
            for column, (a, b) in enumerate(zip(mine, theirs, strict=True)):
                np.testing.assert_array_equal(
                    a[order].astype(np.int64),
                    b[ref_order].astype(np.int64),
                    err_msg=f"part {p} {what} column {column}",
                )


def test_more_hops_reach_further(loaded):
    """2 and 3 hops hold HALO nodes that are not neighbours of any inner node."""
    for case in ("hetero_2hops_3", "homo_3hops_4"):
        _, meta, arrays = loaded[case]
        deeper = 0
        for part in meta["parts"]:
            inner_n = arrays[part["ndata"]["inner_node"]].astype(bool)
            src, dst = arrays[part["src"]], arrays[part["dst"]]
            touching = np.zeros(len(inner_n), bool)
            touching[src[inner_n[dst]]] = touching[dst[inner_n[src]]] = True
            deeper += int(np.sum(~inner_n & ~touching))
        assert deeper > 0, case


@pytest.mark.parametrize("case", ["hetero_random_4", "homo_random_3", "tiny_random_4"])
def test_id_tables_map_string_ids_to_orig_ids(case, loaded, graphs):
    folder, meta, arrays = loaded[case]
    _, schema, tables = graphs[case_graph(case)]
    ref = reference_graph(schema, tables)
    config = json.loads((folder / "g.json").read_text())
    for t in ref.ntypes:
        table = pa.concat_tables(
            [
                pq.read_table(folder / "node_ids" / t / f)
                for f in sorted(os.listdir(folder / "node_ids" / t))
            ]
        )
        assert table.column_names == ["#id", "orig_id", "new_id", "part_id"]
        got = dict(
            zip(table.column("#id").to_pylist(), table.column("orig_id").to_pylist(), strict=True)
        )
        assert got == {v: i for i, v in enumerate(ref.node_ids[t])}
        # new_id / part_id agree with orig_nids and the ranges.
        sizes = [np.diff(r).item() for r in config["node_map"][t]]
        orig = np.concatenate([arrays[meta["parts"][p]["orig_nids"][t]] for p in range(len(sizes))])
        new_of_orig = np.empty(len(orig), np.int64)
        new_of_orig[orig] = np.arange(len(orig))
        np.testing.assert_array_equal(
            table.column("new_id").to_numpy(), new_of_orig[table.column("orig_id").to_numpy()]
        )
        part_of_new = np.repeat(np.arange(len(sizes)), sizes)
        np.testing.assert_array_equal(
            table.column("part_id").to_numpy(), part_of_new[table.column("new_id").to_numpy()]
        )


def test_empty_type_blocks_are_written_and_loaded(loaded):
    """A type with fewer nodes than parts leaves some blocks empty, written [x, x]: DGL 2.1.0
    loads them (the invariants test above checks the rest); its own partition_graph cannot
    produce them."""
    folder, meta, _ = loaded["tiny_random_4"]
    config = json.loads((folder / "g.json").read_text())
    institution = config["node_map"]["institution"]
    assert sum(e - s for s, e in institution) == 1
    empty = [p for p, (s, e) in enumerate(institution) if s == e]
    assert len(empty) == 3
    assert any(s == e for s, e in config["edge_map"]["author:affiliated_with:institution"])


def test_random_leaves_no_part_without_a_type_that_has_enough_nodes(loaded):
    for case in ("hetero_random_2", "hetero_random_4", "tiny_random_4"):
        folder, _, _ = loaded[case]
        config = json.loads((folder / "g.json").read_text())
        for t, ranges in config["node_map"].items():
            sizes = [e - s for s, e in ranges]
            assert max(sizes) - min(sizes) <= 1, (case, t, sizes)  # exactly balanced


def test_dgl_sees_the_graphstorm_layout_dtypes(loaded):
    """As torch tensors after DGL's load_partition: masks 1-D int8 (0/1), model inputs 2-D
    float32, labels as they were; the dgl layout keeps its integer features int64."""
    _, meta, arrays = loaded["hetero_graphstorm_2"]
    for part in meta["parts"]:
        dtypes = part["feat_dtypes"]
        for mask in ("train_mask", "val_mask", "test_mask"):
            assert dtypes[f"paper/{mask}"] == "torch.int8", mask
            values = arrays[part["node_feats"][f"paper/{mask}"]]
            assert values.ndim == 1 and set(np.unique(values)) <= {0, 1}
        assert dtypes["paper/year"] == dtypes["paper/feat"] == "torch.float32"
        assert arrays[part["node_feats"]["paper/year"]].shape[1:] == (1,)
        assert dtypes["paper/label"] == "torch.int64"
        assert arrays[part["node_feats"]["paper/label"]].ndim == 1
        assert dtypes["paper:cites:paper/weight"] == "torch.float32"
        assert arrays[part["edge_feats"]["paper:cites:paper/weight"]].shape[1:] == (1,)
    _, meta, _ = loaded["hetero_random_2"]
    assert meta["parts"][0]["feat_dtypes"]["paper/year"] == "torch.int64"
