"""Tests of the table IO layer: sampler/io/{files,writers,readers}.py."""

from __future__ import annotations

import math
import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io.files import expand_files, guess_format, resolve_pattern
from sampler.io.readers import read_ids, read_table
from sampler.io.writers import write_sharded, write_table

FORMATS = ["csv", "tfrecord", "parquet"]
EXT = {"csv": "csv", "tfrecord": "tfrecord", "parquet": "parquet"}

SPECS = {
    "b": FeatureSpec("b", "bytes", ()),
    "bv": FeatureSpec("bv", "bytes", (2,)),
    "f": FeatureSpec("f", "float", ()),
    "fv": FeatureSpec("fv", "float", (2, 2)),
    "i": FeatureSpec("i", "int", ()),
    "iv": FeatureSpec("iv", "int", (3,)),
}

# Rows as plain Python values; every float is exactly representable in float32.
ROWS = [
    {
        "#id": "a,b",
        "b": "x",
        "bv": ["p", "q"],
        "f": 0.5,
        "fv": [0.5, 1.25, -3.0, 0.0],
        "i": 1,
        "iv": [1, 2, 3],
    },
    {
        "#id": 'say "hi"',
        "b": "with, comma",
        "bv": ['"', ""],
        "f": -1.5,
        "fv": [1e-8, 2.0**100, float("inf"), -0.0],
        "i": -(2**63),
        "iv": [2**63 - 1, 0, -7],
    },
    {
        "#id": "Zürich 東京",
        "b": "",
        "bv": ["ünï", "line\nbreak"],
        "f": float("nan"),
        "fv": [0.1, 0.2, 0.3, 0.4],
        "i": 0,
        "iv": [4, 5, 6],
    },
    {
        "#id": "multi\r\nline; semi",
        "b": "semi;colon",
        "bv": ["x,y", "a b "],
        "f": 3.4028234663852886e38,
        "fv": [-1.0, -2.0, -3.0, -4.0],
        "i": 42,
        "iv": [-1, -2, -3],
    },
]


def f32(x: float) -> float:
    return float(np.float32(x))


def expected_rows(rows, id_columns=("#id",), specs=SPECS):
    """The canonical pylist of `rows`: ids and bytes encoded, floats rounded to float32."""
    out = []
    for row in rows:
        item = {name: row[name].encode() for name in id_columns}
        for name in sorted(specs):
            spec = specs[name]
            value = row[name]
            convert = {
                "bytes": lambda v: v.encode() if isinstance(v, str) else v,
                "float": f32,
                "int": int,
            }[spec.kind]
            item[name] = [convert(v) for v in value] if spec.shape else convert(value)
        out.append(item)
    return out


def to_arrow(rows, id_columns=("#id",), specs=SPECS) -> pa.Table:
    canonical = expected_rows(rows, id_columns, specs)
    fields = [pa.field(n, pa.binary()) for n in id_columns]
    fields += [pa.field(n, specs[n].arrow_type) for n in sorted(specs)]
    return pa.Table.from_pylist(canonical, schema=pa.schema(fields))


def same(a, b) -> bool:
    """Deep equality of pylists where NaN equals NaN and -0.0 differs from 0.0."""
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def read_all(path, fmt, id_columns=("#id",), specs=SPECS, batch_rows=65536):
    tables = list(read_table(path, fmt, id_columns, specs, batch_rows))
    for table in tables:
        assert table.schema == expected_schema(id_columns, specs)
        assert 0 < table.num_rows <= batch_rows
    return [row for table in tables for row in table.to_pylist()]


def expected_schema(id_columns, specs):
    fields = [pa.field(n, pa.binary()) for n in id_columns]
    fields += [pa.field(n, specs[n].arrow_type) for n in sorted(specs)]
    return pa.schema(fields)


def example(**features) -> bytes:
    """A serialized tf.Example; values are lists of float, int or bytes."""
    feature = {}
    for name, values in features.items():
        if values and isinstance(values[0], float):
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        elif values and isinstance(values[0], int):
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_records(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


# ---------------------------------------------------------------------------------------------
# Round trips


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip(tmp_path, fmt):
    path = str(tmp_path / f"nodes.{EXT[fmt]}")
    write_table(path, to_arrow(ROWS), fmt, SPECS)
    assert same(read_all(path, fmt), expected_rows(ROWS))


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_edges_and_id_order(tmp_path, fmt):
    specs = {"w": FeatureSpec("w", "float", ())}
    rows = [{"#source": "a", "#target": "b,c", "w": 0.25}, {"#source": "é", "#target": "a", "w": 2}]
    path = str(tmp_path / f"edges.{EXT[fmt]}")
    write_table(path, to_arrow(rows, ("#source", "#target"), specs), fmt, specs)
    got = read_all(path, fmt, ("#target", "#source"), specs)
    assert got == [
        {"#target": b"b,c", "#source": b"a", "w": 0.25},
        {"#target": b"a", "#source": "é".encode(), "w": 2.0},
    ]
    # Features not asked for are ignored.
    assert read_all(path, fmt, ("#source",), {}) == [{"#source": b"a"}, {"#source": "é".encode()}]


def test_csv_encoding_exact_text(tmp_path):
    specs = {
        "b": FeatureSpec("b", "bytes", ()),
        "fv": FeatureSpec("fv", "float", (3,)),
        "i": FeatureSpec("i", "int", ()),
    }
    rows = [
        {"#id": 'a,"b"', "b": "x;y", "fv": [0.5, 1.25, -3.0], "i": -4},
        {"#id": "é", "b": "", "fv": [0.1, 0.0, 1e-8], "i": 7},
    ]
    path = tmp_path / "n.csv"
    write_table(str(path), to_arrow(rows, specs=specs), "csv", specs)
    assert path.read_bytes().decode("utf-8") == (
        "#id,b,fv,i\r\n"
        '"a,""b""",x;y,0.5;1.25;-3.0,-4\r\n'
        "é,,0.10000000149011612;0.0;9.99999993922529e-09,7\r\n"
    )


def test_csv_hand_written(tmp_path):
    specs = {"fv": FeatureSpec("fv", "float", (2,)), "n": FeatureSpec("n", "int", ())}
    path = tmp_path / "n.csv"
    text = '\ufeffextra,n,#id,fv\nzz,1,"x\ny",0.5;2\n\n,+2, a , 1e3 ; -inf\n'
    path.write_bytes(text.encode("utf-8"))
    assert read_all(str(path), "csv", specs=specs) == [
        {"#id": b"x\ny", "fv": [0.5, 2.0], "n": 1},
        {"#id": b" a ", "fv": [1000.0, float("-inf")], "n": 2},
    ]


def test_tfrecord_writer_output_parsed_by_tensorflow(tmp_path):
    path = str(tmp_path / "n.tfrecord")
    write_table(path, to_arrow(ROWS[:2]), "tfrecord", SPECS)
    records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
    assert len(records) == 2
    first = tf.train.Example.FromString(records[0]).features.feature
    assert first["#id"].bytes_list.value == [b"a,b"]
    assert list(first["fv"].float_list.value) == [0.5, 1.25, -3.0, 0.0]
    assert list(first["iv"].int64_list.value) == [1, 2, 3]
    assert list(first["bv"].bytes_list.value) == [b"p", b"q"]
    assert list(first["i"].int64_list.value) == [1]
    assert sorted(first) == ["#id", *sorted(SPECS)]


def test_tfrecord_int_ids_and_extra_features(tmp_path):
    specs = {"f": FeatureSpec("f", "float", ())}
    path = tmp_path / "n.tfr"
    write_records(
        path,
        [
            example(**{"#id": [12], "f": [0.5], "junk": [b"z"]}),
            example(**{"#id": [-3], "f": [1.0]}),
        ],
    )
    assert read_all(str(path), "tfrecord", specs=specs) == [
        {"#id": b"12", "f": 0.5},
        {"#id": b"-3", "f": 1.0},
    ]


def test_parquet_lenient_types(tmp_path):
    specs = {
        "f": FeatureSpec("f", "float", ()),
        "fv": FeatureSpec("fv", "float", (2,)),
        "i": FeatureSpec("i", "int", ()),
        "s": FeatureSpec("s", "bytes", ()),
    }
    table = pa.table(
        {
            "#id": pa.array([7, 123456789012], pa.int64()),
            "f": pa.array([1.5, 2.0], pa.float64()),
            "fv": pa.array([[1, 2], [3, 4]], pa.list_(pa.int32())),
            "i": pa.array([True, False]),
            "s": pa.array(["é", "x"], pa.string()).dictionary_encode(),
            "other": pa.array([None, 1]),
        }
    )
    path = tmp_path / "n.parquet"
    pq.write_table(table, path)
    assert read_all(str(path), "parquet", specs=specs) == [
        {"#id": b"7", "f": 1.5, "fv": [1.0, 2.0], "i": 1, "s": "é".encode()},
        {"#id": b"123456789012", "f": 2.0, "fv": [3.0, 4.0], "i": 0, "s": b"x"},
    ]
    pq.write_table(pa.table({"#id": pa.array(["a", "b"], pa.large_string())}), path)
    assert [a.to_pylist() for a in read_ids(str(path), "parquet")] == [[b"a", b"b"]]


@pytest.mark.parametrize("fmt", FORMATS)
def test_batching(tmp_path, fmt):
    rows = [dict(ROWS[k % len(ROWS)], **{"#id": f"n{k}"}) for k in range(7)]
    path = str(tmp_path / f"n.{EXT[fmt]}")
    write_table(path, to_arrow(rows), fmt, SPECS)
    tables = list(read_table(path, fmt, ("#id",), SPECS, batch_rows=3))
    assert [t.num_rows for t in tables] == [3, 3, 1]
    got = [row for t in tables for row in t.to_pylist()]
    assert same(got, expected_rows(rows))
    ids = list(read_ids(path, fmt, batch_rows=5))
    assert [a.type for a in ids] == [pa.binary(), pa.binary()]
    assert [v for a in ids for v in a.to_pylist()] == [f"n{k}".encode() for k in range(7)]


@pytest.mark.parametrize("fmt", FORMATS)
def test_empty_table(tmp_path, fmt):
    path = str(tmp_path / f"n.{EXT[fmt]}")
    write_table(path, to_arrow([]), fmt, SPECS)
    assert list(read_table(path, fmt, ("#id",), SPECS)) == []


def test_zero_width_features(tmp_path):
    specs = {"z": FeatureSpec("z", "float", (0,)), "e": FeatureSpec("e", "bytes", (2, 0))}
    rows = [{"#id": "a", "z": [], "e": []}, {"#id": "b", "z": [], "e": []}]
    for fmt in ["csv", "tfrecord"]:
        path = str(tmp_path / f"z.{fmt}")
        write_table(path, to_arrow(rows, specs=specs), fmt, specs)
        assert read_all(path, fmt, specs=specs) == [
            {"#id": b"a", "e": [], "z": []},
            {"#id": b"b", "e": [], "z": []},
        ]
    with pytest.raises(UserError, match="feature 'e' has no values"):
        write_table(str(tmp_path / "z.parquet"), to_arrow(rows, specs=specs), "parquet", specs)


# ---------------------------------------------------------------------------------------------
# File names


@pytest.mark.parametrize("fmt", FORMATS)
def test_sharded_write_and_expand(tmp_path, fmt):
    rows = [dict(ROWS[k % len(ROWS)], **{"#id": f"n{k}"}) for k in range(5)]
    base = str(tmp_path / "out" / f"nodes.{EXT[fmt]}")
    pattern = write_sharded(base, to_arrow(rows), fmt, SPECS, 3)
    assert pattern == base + "@3"
    files = expand_files(pattern)
    assert files == [f"{base}-0000{k}-of-00003" for k in range(3)]
    assert guess_format(pattern) == fmt
    assert all(guess_format(f) == fmt for f in files)
    got = [row for f in files for row in read_all(f, fmt)]
    assert same(got, expected_rows(rows))
    assert expand_files(str(tmp_path / "out" / "nodes.*-of-00003")) == files
    os.remove(files[1])
    with pytest.raises(UserError, match=r"shard '.*nodes\.\w+-00001-of-00003' does not exist"):
        expand_files(pattern)


def test_expand_files_errors_and_globs(tmp_path):
    with pytest.raises(UserError, match="no file matches"):
        expand_files(str(tmp_path / "missing.csv"))
    with pytest.raises(UserError, match="no file matches"):
        expand_files(str(tmp_path / "*.csv"))
    (tmp_path / "a.csv").write_bytes(b"")
    (tmp_path / "b.csv").write_bytes(b"")
    with pytest.raises(UserError, match=r"\*\.csv.*empty"):
        expand_files(str(tmp_path / "*.csv"))
    (tmp_path / "c.csv").write_text("#id\nx\n")
    (tmp_path / "d.csv").mkdir()
    assert expand_files(str(tmp_path / "*.csv")) == [str(tmp_path / f"{c}.csv") for c in "abc"]
    assert expand_files(str(tmp_path / "c.csv")) == [str(tmp_path / "c.csv")]
    with pytest.raises(UserError, match="at least 1"):
        expand_files(str(tmp_path / "x@0"))
    pattern = write_sharded(str(tmp_path / "e.tfrecord"), to_arrow([]), "tfrecord", SPECS, 2)
    with pytest.raises(UserError, match=r"e\.tfrecord@2.*empty"):
        expand_files(pattern)


def test_resolve_pattern():
    assert resolve_pattern("nodes.csv", "/data/graph") == "/data/graph/nodes.csv"
    assert resolve_pattern("sub/n@4", "/data") == "/data/sub/n@4"
    assert resolve_pattern("/abs/nodes.csv", "/data") == "/abs/nodes.csv"
    assert resolve_pattern("gs://b/x.csv", "/data") == "gs://b/x.csv"
    assert resolve_pattern("s3://b/x.csv", "gs://c/d") == "s3://b/x.csv"
    assert (
        resolve_pattern("nodes.parquet", "gs://bucket/graph") == "gs://bucket/graph/nodes.parquet"
    )


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("a/nodes.csv", "csv"),
        ("NODES.CSV", "csv"),
        ("x.tfrecord", "tfrecord"),
        ("x.tfrecords", "tfrecord"),
        ("x.tfr", "tfrecord"),
        ("gs://b/edges-tfrecord-00000-of-00004", "tfrecord"),
        ("x.parquet", "parquet"),
        ("x.pq", "parquet"),
        ("x.csv-00003-of-00010", "csv"),
        ("x.parquet@8", "parquet"),
        ("dir/x.tfrecords-*", "tfrecord"),
        ("dir/x-*.csv", "csv"),
    ],
)
def test_guess_format(name, fmt):
    assert guess_format(name) == fmt


def test_guess_format_unknown_and_override():
    with pytest.raises(UserError, match="nodes.txt"):
        guess_format("nodes.txt")
    with pytest.raises(UserError, match="nodes"):
        guess_format("nodes@4")
    assert guess_format("nodes.txt", "CSV") == "csv"
    assert guess_format("nodes.csv", "tfrecords") == "tfrecord"
    with pytest.raises(UserError, match="xml"):
        guess_format("nodes.csv", "xml")


# ---------------------------------------------------------------------------------------------
# Errors


CSV_SPECS = {"f": FeatureSpec("f", "float", ()), "v": FeatureSpec("v", "int", (2,))}


@pytest.mark.parametrize(
    "body, pattern",
    [
        ("a,x,1;2\n", r"row 1 \(line 2\): column 'f': 'x' is not a number"),
        ("a,1,1;2\nb,2,1;2;3\n", r"row 2 \(line 3\): column 'v': 3 values, expected 2"),
        ("a,1,1;2\nb,2,1\n", r"row 2 \(line 3\): column 'v': 1 values, expected 2"),
        ("a,1,1;2\nb,2,\n", r"row 2 \(line 3\): column 'v': 0 values, expected 2"),
        ("a,1,1;x\n", r"row 1 \(line 2\): column 'v': 'x' is not an integer"),
        ("a,1,1;99999999999999999999\n", r"row 1 \(line 2\): column 'v': .*int64"),
        ("a,1,1;2\n\nb,1\n", r"row 2 \(line 4\): 2 cells, but the header has 3"),
        ("a,1,1;2,9\n", r"row 1 \(line 2\): 4 cells, but the header has 3"),
        ("a,1,1;2\n,1,1;2\n", r"row 2 \(line 3\): column '#id': missing id"),
    ],
)
def test_csv_bad_cells(tmp_path, body, pattern):
    path = tmp_path / "bad.csv"
    path.write_text("#id,f,v\n" + body, encoding="utf-8")
    with pytest.raises(UserError, match=str(path) + r": " + pattern):
        read_all(str(path), "csv", specs=CSV_SPECS, batch_rows=1)


def test_csv_missing_column_and_not_utf8(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("#id,f\na,1\n")
    with pytest.raises(UserError, match=r"bad\.csv: missing column 'v'"):
        read_all(str(path), "csv", specs=CSV_SPECS)
    with pytest.raises(UserError, match=r"bad\.csv: missing column '#source'"):
        read_all(str(path), "csv", ("#source", "#target"), {})
    path.write_bytes(b"#id\nab\xff\n")
    with pytest.raises(UserError, match=r"bad\.csv: .*not UTF-8"):
        read_all(str(path), "csv", specs={})


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.csv")
    with pytest.raises(UserError, match="nope.csv"):
        read_all(path, "csv", specs={})


TF_SPECS = {"f": FeatureSpec("f", "float", ()), "v": FeatureSpec("v", "int", (2,))}


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (b"\xff\xff\xff", r"record index 3: not a tf\.Example"),
        (example(**{"#id": [b"d"], "v": [1, 2]}), r"record index 3: feature 'f': missing"),
        (
            example(**{"#id": [b"d"], "f": [1], "v": [1, 2]}),
            r"record index 3: feature 'f': is int64_list, expected float_list",
        ),
        (
            example(**{"#id": [b"d"], "f": [1.0], "v": [1]}),
            r"record index 3: feature 'v': has 1 values",
        ),
        (
            example(**{"#id": [b""], "f": [1.0], "v": [1, 2]}),
            r"record index 3: feature '#id': empty id",
        ),
        (
            example(**{"#id": [4], "f": [1.0], "v": [1, 2]}),
            r"record index 3: feature '#id': is int64_list",
        ),
        (example(**{"f": [1.0], "v": [1, 2]}), r"record index 3: feature '#id': missing"),
    ],
    ids=lambda value: (
        value if isinstance(value, str) else "record"
    ),  # not the bytes: their map order varies
)
def test_tfrecord_bad_records(tmp_path, bad, pattern):
    good = [example(**{"#id": [b"%d" % k], "f": [0.5], "v": [1, 2]}) for k in range(3)]
    path = tmp_path / "bad.tfrecord"
    write_records(path, [*good, bad, *good])
    with pytest.raises(UserError, match=str(path) + ": " + pattern):
        read_all(str(path), "tfrecord", specs=TF_SPECS, batch_rows=2)


def test_tfrecord_corrupt_framing(tmp_path):
    good = example(**{"#id": [b"a"], "f": [0.5], "v": [1, 2]})
    path = tmp_path / "bad.tfrecord"
    write_records(path, [good, good])
    data = path.read_bytes()
    path.write_bytes(data[:-3])
    with pytest.raises(UserError, match=r"bad\.tfrecord: record index 1: truncated"):
        read_all(str(path), "tfrecord", specs=TF_SPECS)
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(UserError, match=r"record index 1: corrupt"):
        read_all(str(path), "tfrecord", specs=TF_SPECS)
    path.write_bytes(struct.pack("<Q", 2**62) + data[8:])
    with pytest.raises(UserError, match=r"record index 0: (corrupt|truncated)"):
        read_all(str(path), "tfrecord", specs=TF_SPECS)


def test_parquet_errors(tmp_path):
    path = tmp_path / "bad.parquet"
    specs = {"v": FeatureSpec("v", "float", (2,))}
    pq.write_table(pa.table({"#id": ["a", "b", None], "v": [[1.0, 2.0]] * 3}), path)
    with pytest.raises(UserError, match=r"bad\.parquet: row 3: column '#id': missing id"):
        read_all(str(path), "parquet", specs=specs)
    pq.write_table(pa.table({"#id": ["a", "b", "c"], "v": [[1.0, 2.0], [1.0], [3.0, 4.0]]}), path)
    with pytest.raises(UserError, match=r"bad\.parquet: row 2: column 'v': 1 values, expected 2"):
        read_all(str(path), "parquet", specs=specs)
    pq.write_table(pa.table({"#id": ["a"], "v": [[1.0, None]]}), path)
    with pytest.raises(UserError, match=r"row 1: column 'v': missing value"):
        read_all(str(path), "parquet", specs=specs)
    pq.write_table(pa.table({"#id": ["a"], "v": ["x"]}), path)
    with pytest.raises(UserError, match=r"column 'v' has type string, but the feature is a vector"):
        read_all(str(path), "parquet", specs=specs)
    pq.write_table(pa.table({"#id": ["a"]}), path)
    with pytest.raises(UserError, match=r"bad\.parquet: missing column 'v'"):
        read_all(str(path), "parquet", specs=specs)
    pq.write_table(pa.table({"#id": ["a"], "n": [1.5]}), path)
    with pytest.raises(UserError, match=r"column 'n'"):
        read_all(str(path), "parquet", specs={"n": FeatureSpec("n", "int", ())})
    path.write_bytes(b"not parquet at all")
    with pytest.raises(UserError, match=r"bad\.parquet: not a Parquet file"):
        read_all(str(path), "parquet", specs=specs)


def test_writer_errors(tmp_path):
    specs = {"bv": FeatureSpec("bv", "bytes", (2,))}
    table = to_arrow([{"#id": "a", "bv": ["x;y", "z"]}], specs=specs)
    with pytest.raises(UserError, match=r"column 'bv' row 1 .*';'"):
        write_table(str(tmp_path / "n.csv"), table, "csv", specs)
    binary = pa.table({"#id": [b"\xff"], "bv": table.column("bv")})
    with pytest.raises(UserError, match=r"column '#id' row 1 is not UTF-8"):
        write_table(str(tmp_path / "n.csv"), binary, "csv", specs)
    write_table(str(tmp_path / "n.tfrecord"), binary, "tfrecord", specs)
    assert read_all(str(tmp_path / "n.tfrecord"), "tfrecord", specs=specs) == [
        {"#id": b"\xff", "bv": [b"x;y", b"z"]}
    ]
    with pytest.raises(UserError, match=r"missing column 'bv'"):
        write_table(str(tmp_path / "n.csv"), table.drop_columns(["bv"]), "csv", specs)
    with pytest.raises(UserError, match=r"column '#id' row 2 is empty"):
        write_table(str(tmp_path / "n.csv"), pa.table({"#id": [b"a", b""]}), "parquet", {})
    with pytest.raises(UserError, match=r"unknown table format 'xml'"):
        write_table(str(tmp_path / "n.xml"), pa.table({"#id": [b"a"]}), "xml", {})


# ---------------------------------------------------------------------------------------------
# Properties

_SHAPES = st.sampled_from([(), (1,), (3,), (2, 2)])
_SPEC_LISTS = st.dictionaries(
    st.text("abcdefgh_", min_size=1, max_size=4),
    st.tuples(st.sampled_from(["float", "int", "bytes"]), _SHAPES),
    max_size=4,
)
_TEXT = st.text(st.characters(blacklist_categories=["Cs"], blacklist_characters=";"), max_size=6)


def _value(kind):
    if kind == "float":
        return st.floats(width=32)
    if kind == "int":
        return st.integers(-(2**63), 2**63 - 1)
    return _TEXT


@st.composite
def canonical_tables(draw):
    specs = {n: FeatureSpec(n, kind, shape) for n, (kind, shape) in draw(_SPEC_LISTS).items()}
    count = draw(st.integers(0, 6))
    rows = []
    for _ in range(count):
        row = {"#id": draw(_TEXT.filter(bool))}
        for name, spec in specs.items():
            value = _value(spec.kind)
            row[name] = (
                draw(st.lists(value, min_size=spec.width, max_size=spec.width))
                if spec.shape
                else draw(value)
            )
        rows.append(row)
    return specs, rows


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(canonical_tables(), st.integers(1, 4))
def test_property_round_trip(tmp_path, spec_rows, batch_rows):
    specs, rows = spec_rows
    expected = expected_rows(rows, specs=specs)
    for fmt in FORMATS:
        path = str(tmp_path / f"p.{EXT[fmt]}")
        write_table(path, to_arrow(rows, specs=specs), fmt, specs)
        got = read_all(path, fmt, specs=specs, batch_rows=batch_rows)
        assert same(got, expected), fmt


_FUZZ_SPECS = {"f": FeatureSpec("f", "float", ()), "v": FeatureSpec("v", "bytes", (2,))}


def _check_only_user_errors(path, fmt):
    try:
        for table in read_table(path, fmt, ("#id",), _FUZZ_SPECS, batch_rows=2):
            assert table.schema == expected_schema(("#id",), _FUZZ_SPECS)
    except UserError as e:
        assert str(path) in str(e) and "\n" not in str(e)


_CSV_ALPHABET = st.sampled_from(
    [
        b"#id",
        b"f",
        b"v",
        b",",
        b";",
        b'"',
        b"\n",
        b"\r",
        b"1",
        b"-2.5e3",
        b"a",
        b"\xc3\xa9",
        b"\xff",
        b"\x00",
        b" ",
    ]
)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.one_of(st.binary(max_size=80), st.lists(_CSV_ALPHABET, max_size=40).map(b"".join)))
def test_property_csv_garbage(tmp_path, data):
    path = tmp_path / "g.csv"
    path.write_bytes(data)
    _check_only_user_errors(str(path), "csv")
    path.write_bytes(b"#id,f,v\r\n" + data)
    _check_only_user_errors(str(path), "csv")


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.binary(max_size=64), st.lists(st.binary(max_size=24), max_size=4))
def test_property_tfrecord_garbage(tmp_path, raw, payloads):
    path = tmp_path / "g.tfrecord"
    path.write_bytes(raw)
    _check_only_user_errors(str(path), "tfrecord")
    # Well-framed records with arbitrary payloads reach the tf.Example parser.
    good = example(**{"#id": [b"a"], "f": [0.5], "v": [b"x", b"y"]})
    write_records(path, [good, *payloads])
    _check_only_user_errors(str(path), "tfrecord")


def test_latent_ends_are_distinct_ids(tmp_path):
    """A latent node set's rows from an edge file: each id once (the set of the file's ids,
    checked with Python sets), with its own fingerprint."""
    from sampler import ids
    from sampler.io import graph_tables
    from sampler.schema import EdgeSetInfo

    path = tmp_path / "writes.csv"
    path.write_text("#source,#target\na1,p1\na2,p1\na1,p2\na3,p3\na1,p3\n")
    info = EdgeSetInfo("writes", "author", "paper", {}, str(path), False)
    [(edges, ends)] = graph_tables.read_edge_file(str(path), "csv", info, ("#source",))
    assert len(edges) == 5
    got = ends["#source"]
    assert sorted(got.ids.tolist()) == [b"a1", b"a2", b"a3"]
    assert got.fp.tolist() == ids.fingerprint(pa.array(got.ids.tolist())).tolist()


def test_latent_ends_fingerprint_collision(monkeypatch):
    """Two different ids with one fingerprint are an error, not one merged node (a 64-bit
    collision cannot be made for real: the fingerprint is replaced by a constant)."""
    from sampler.io import graph_tables
    from sampler.node_table import FingerprintCollision

    monkeypatch.setattr(graph_tables.ids, "fingerprint", lambda col: np.zeros(len(col), np.uint64))
    assert graph_tables.distinct_ids(pa.array([b"x", b"x"])).ids.tolist() == [b"x"]
    with pytest.raises(FingerprintCollision, match="share a 64-bit fingerprint"):
        graph_tables.distinct_ids(pa.array([b"x", b"x", b"y"]))
