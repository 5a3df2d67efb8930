"""`validate`: every check passes on a good graph and each kind of mistake fails its check."""

from __future__ import annotations

import os

import pytest

from pipelines import cli, validate
from sampler.tools import synthetic


@pytest.fixture(scope="module")
def mag_csv(tmp_path_factory):
    root = tmp_path_factory.mktemp("validate")
    graph = synthetic.generate_mag(120, seed=1, feature_dim=3, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="csv")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return root, schema, spec


def run(capsys, *argv):
    code = validate.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def copy_graph(src_dir: str, dst_dir: str) -> str:
    os.makedirs(dst_dir, exist_ok=True)
    for name in os.listdir(src_dir):
        with open(os.path.join(src_dir, name), "rb") as f:
            data = f.read()
        with open(os.path.join(dst_dir, name), "wb") as f:
            f.write(data)
    return os.path.join(dst_dir, "graph_schema.pbtxt")


def test_good_graph_passes_every_check(mag_csv, capsys):
    root, schema, spec = mag_csv
    code, out, _ = run(capsys, "--graph_schema", schema, "--sampling_spec", spec)
    assert code == 0
    lines = out.splitlines()
    assert lines[-1].startswith("PASS: 8 checks passed")
    assert sum(line.startswith("  PASS ") for line in lines) == 8
    assert "FAIL" not in out
    paper = next(line for line in lines if "node set paper" in line)
    assert "csv, 1 file, 5 rows parsed (#id, feat, label, year)" in paper
    cites = next(line for line in lines if "edge set cites" in line)
    assert "(#source, #target, weight)" in cites


def test_missing_column_bad_cell_missing_file_and_bad_spec_fail(mag_csv, tmp_path, capsys):
    root, schema, _ = mag_csv
    bad = copy_graph(os.path.dirname(schema), str(tmp_path / "bad"))
    folder = os.path.dirname(bad)
    # paper.csv loses its `year` column; cites.csv gets a non-number weight in row 2.
    with open(os.path.join(folder, "paper.csv"), encoding="utf-8") as f:
        rows = [line.rstrip("\r\n").split(",") for line in f]
    year = rows[0].index("year")
    with open(os.path.join(folder, "paper.csv"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(",".join(c for i, c in enumerate(row) if i != year) + "\n")
    with open(os.path.join(folder, "cites.csv"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    header = lines[0].split(",")
    cells = lines[2].split(",")
    cells[header.index("weight")] = "heavy"
    lines[2] = ",".join(cells)
    with open(os.path.join(folder, "cites.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.remove(os.path.join(folder, "has_topic.csv"))
    spec = tmp_path / "spec.pbtxt"
    spec.write_text(
        'seed_op { op_name: "seed" node_set_name: "paper" }\n'
        'sampling_ops { op_name: "x" input_op_names: "seed" edge_set_name: "nope"'
        " sample_size: 3 strategy: RANDOM_UNIFORM }\n"
    )
    code, out, _ = run(capsys, "--graph_schema", bad, "--sampling_spec", str(spec))
    assert code == 1
    text = "\n".join(line for line in out.splitlines() if "FAIL" in line)
    assert "FAIL sampling spec" in text and "edge_set_name 'nope' is not an edge set" in text
    assert "FAIL node set paper" in text and "missing column 'year'" in text
    assert "FAIL edge set cites" in text and "row 2" in text and "'heavy' is not a number" in text
    assert "FAIL edge set has_topic" in text and "no file matches" in text
    assert out.splitlines()[-1].startswith("FAIL: 4 of 8 checks failed")
    # The untouched tables still pass.
    assert "PASS edge set writes" in out and "PASS edge set affiliated_with" in out


def test_broken_schema_fails_and_skips_the_spec(tmp_path, capsys):
    schema = tmp_path / "graph_schema.pbtxt"
    schema.write_text(
        'node_sets { key: "a" value { } }\nedge_sets { key: "e" value { source: "a" target: "b" } }\n'
    )
    spec = tmp_path / "spec.pbtxt"
    spec.write_text('seed_op { op_name: "seed" node_set_name: "a" }\n')
    code, out, _ = run(capsys, "--graph_schema", str(schema), "--sampling_spec", str(spec))
    assert code == 1
    assert "FAIL schema" in out and "target 'b' is not a node set" in out
    assert "FAIL sampling spec" in out and "not checked" in out


def test_input_seeds_are_checked(mag_csv, tmp_path, capsys):
    _, schema, spec = mag_csv
    good = tmp_path / "seeds.csv"
    good.write_text("#id\np1\np2\n")
    code, out, _ = run(
        capsys, "--graph_schema", schema, "--sampling_spec", spec, "--input_seeds", str(good)
    )
    assert code == 0 and "PASS input seeds" in out and "2 rows parsed (#id)" in out
    bad = tmp_path / "bad_seeds.csv"
    bad.write_text("node\np1\n")
    code, out, _ = run(
        capsys, "--graph_schema", schema, "--sampling_spec", spec, "--input_seeds", str(bad)
    )
    assert code == 1 and "FAIL input seeds" in out and "missing column '#id'" in out


def test_usage_errors_exit_2_and_help_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        validate.main([])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        validate.main(["--graph_schema", "g", "--sampling_spec", "s", "--rows", "0"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        cli.main(["validate", "--help"])
    assert e.value.code == 0
    assert "--input_seeds" in capsys.readouterr().out
