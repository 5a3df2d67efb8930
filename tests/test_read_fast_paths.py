"""The column-wise readers against their exact per-row paths, and the bad inputs of
round 2 that live in them: a float32 overflow is a bad row (item 8), a byte that is not UTF-8
is reported on its exact line (item 10).

The fast paths (Arrow's CSV parser and compute, the numpy scan of tf.Example records, framing
over whole buffers) must give the same rows, the same bad rows in the same order and the same
errors as the exact paths (Python's csv module, the protobuf parser record by record), which
each test forces by switching the fast path off.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io import csv_blocks, csv_reader, tfrecord, tfrecord_reader
from sampler.io.readers import read_table
from sampler.io.tfrecord import frame
from sampler.protos import example_pb2
from tests.test_cli_errors import assert_user_error, graph, run_cli, sample_args  # noqa: F401
from tests.test_io_tables import same

SPECS = {
    "f": FeatureSpec("f", "float", ()),
    "s": FeatureSpec("s", "bytes", ()),
    "v": FeatureSpec("v", "float", (2,)),
    "n": FeatureSpec("n", "int", ()),
}
SETTINGS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def read(path, fmt, specs=SPECS, batch_rows=3, ids=("#id",)):
    """(rows, bad records as tuples, the UserError's text or None)."""
    rows, bad = [], []
    try:
        for table in read_table(str(path), fmt, ids, specs, batch_rows, on_bad=bad.append):
            rows += table.to_pylist()
        error = None
    except UserError as e:
        error = str(e)
    return rows, [(b.row, b.line, b.unit, b.reason) for b in bad], error


def exact_read(monkeypatch, path, fmt, **kwargs):
    """`read` with every fast path off."""
    with monkeypatch.context() as m:
        m.setattr(csv_blocks, "fast_block", lambda data: False)
        m.setattr(csv_reader, "_fast_table", lambda *args: None)
        m.setattr(tfrecord_reader, "_LAYOUT_ROUNDS", 0)
        return read(path, fmt, **kwargs)


def assert_same_as_exact(monkeypatch, path, fmt, **kwargs):
    fast = read(path, fmt, **kwargs)
    exact = exact_read(monkeypatch, path, fmt, **kwargs)
    assert same(fast[0], exact[0]) and fast[1:] == exact[1:], (fast, exact)
    return fast


# ---------------------------------------------------------------------------------------------
# a number past float32's range is a bad row, not a silent inf


def test_csv_float32_overflow_is_a_bad_row_on_its_line(tmp_path, monkeypatch):
    path = tmp_path / "n.csv"
    path.write_text(
        "#id,f,n,s,v\n"
        "a,1,1,x,1;2\n"
        "b,3.5e38,1,x,1;2\n"  # line 3
        "c,inf,1,x,-Infinity;3.4028235e38\n"  # infinities written as such, and float32's max
        "d,1,1,x,1;-1e39\n"  # line 5
        "e,1e400,1,x,1;2\n"  # past double's range too
        "f,2,1,x,1;2\n"
    )
    rows, bad, error = assert_same_as_exact(monkeypatch, path, "csv")
    assert error is None
    assert [r["#id"] for r in rows] == [b"a", b"c", b"f"]
    assert rows[1]["f"] == float("inf") and rows[1]["v"] == [float("-inf"), 3.4028234663852886e38]
    assert bad == [
        (2, 3, "row", "column 'f': '3.5e38' does not fit in float32"),
        (4, 5, "row", "column 'v': '-1e39' does not fit in float32"),
        (5, 6, "row", "column 'f': '1e400' does not fit in float32"),
    ]
    with pytest.raises(UserError, match=r"n\.csv: row 2 \(line 3\): column 'f': '3\.5e38' does"):
        list(read_table(str(path), "csv", ("#id",), SPECS))


def test_parquet_float32_and_int64_overflow_are_bad_rows(tmp_path):
    path = tmp_path / "n.parquet"
    table = pa.table(
        {
            "#id": ["a", "b", "c", "d"],
            "f": pa.array([1.0, 3.5e38, float("inf"), 2.0]),
            "v": pa.array([[1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [-1e39, 2.0]]),
            "n": pa.array([1, 2, 2**64 - 1, 4], pa.uint64()),
            "s": ["x"] * 4,
        }
    )
    pq.write_table(table, path)
    rows, bad, error = read(path, "parquet", batch_rows=10)
    assert error is None and [r["#id"] for r in rows] == [b"a"]
    assert bad == [
        (2, None, "row", "column 'f': 3.5e+38 does not fit in float32"),
        (3, None, "row", "column 'n': 18446744073709551615 does not fit in int64"),
        (4, None, "row", "column 'v': -1e+39 does not fit in float32"),
    ]


def test_float32_overflow_goes_to_the_dead_letter_output(graph):  # noqa: F811
    (graph / "paper.csv").write_text("#id,feat\np0,1;2\np1,3;3.5e38\np2,5;6\n")
    (graph / "cites.csv").write_text("#source,#target\np0,p2\n")
    result = run_cli(*sample_args(graph, "--max_bad_records", "1"))
    assert result.returncode == 0, result.stderr
    out = graph.parent / "out"
    (dead,) = out.glob("bad_records-*.jsonl")
    (bad,) = [json.loads(line) for line in dead.read_text().splitlines()]
    assert (bad["set"], bad["row"], bad["line"]) == ("paper", 2, 3)
    assert bad["reason"] == "column 'feat': '3.5e38' does not fit in float32"
    assert json.loads((out / "run_summary.json").read_text())["bad_records"] == 1
    result = run_cli(*sample_args(graph, "--overwrite"))
    assert_user_error(result, "row 2 (line 3): column 'feat': '3.5e38' does not fit in float32")


# ---------------------------------------------------------------------------------------------
# a byte that is not UTF-8 is reported on its exact line


@pytest.mark.parametrize("quoted", [False, True])
@pytest.mark.parametrize("bad_line", [1, 2, 851, 1501])
def test_non_utf8_byte_is_reported_on_its_line(tmp_path, bad_line, quoted):
    lines = [b"#id,f,n,s,v"] + [b"r%d,1.5,2,x,1;2" % k for k in range(2, 2001)]
    if quoted:  # a quoted cell over two lines: the rows after it start a line later
        lines[9] = b'r10,1.5,2,"two\nlines",1;2'
    at = bad_line - 1 - (1 if quoted and bad_line > 10 else 0)
    lines[at] = lines[at][:2] + b"\xff" + lines[at][2:]
    path = tmp_path / "n.csv"
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(UserError, match=rf"n\.csv: line {bad_line}: not UTF-8 text"):
        list(read_table(str(path), "csv", ("#id",), SPECS))


def test_non_utf8_byte_after_a_bad_row_goes_to_dead_letter_first(tmp_path, monkeypatch):
    monkeypatch.setattr(csv_blocks, "READ_BYTES", 64)  # many blocks
    body = "".join(f"r{k},1,2,x,1;2\n" for k in range(40))
    path = tmp_path / "n.csv"
    path.write_bytes(b"#id,f,n,s,v\nq,y,2,x,1;2\n" + body.encode() + b"z\xc3,1,2,x,1;2\n")
    rows, bad, error = read(path, "csv")
    assert bad == [(1, 2, "row", "column 'f': 'y' is not a number")]
    assert error.startswith(f"{path}: line 43: not UTF-8 text (")


# ---------------------------------------------------------------------------------------------
# CSV: the fast path reads what the exact path reads


_CSV_PIECES = st.sampled_from(
    ["a", "b", ",", ";", '"', '""', "\n", "\r\n", "\r", "1", "-2.5e3", "nan", "nan(1)", "0x1",
     " 1", "1_0", "+3", "inf", "3.5e38", "é", "\ufeff", "\x00", "", ",,", ";;"]
)  # fmt: skip


def _quote(cell: str) -> str:
    return '"' + cell.replace('"', '""') + '"' if any(x in cell for x in ',"\r\n') else cell


@st.composite
def csv_texts(draw):
    rows = draw(st.integers(0, 12))
    lines = []
    for _ in range(rows):
        kind = draw(st.integers(0, 5))
        if kind == 0:  # anything
            lines.append("".join(draw(st.lists(_CSV_PIECES, max_size=8))))
        else:  # a mostly well-formed row
            ident = draw(st.sampled_from(["a", "b,c", 'q"q', "", "x\ny", "é"]))
            f = draw(st.sampled_from(["1", "2.5", "nan", "-inf", "3.5e38", "x", " 1", "0x1"]))
            n = draw(st.sampled_from(["1", "-7", "0x1", "+2", "99999999999999999999", "1.5"]))
            v = draw(st.sampled_from(["1;2", "1", "", "1;2;3", "nan(1);2", "1e39;0"]))
            s = draw(st.sampled_from(["x", "", "a;b", 'say "hi"', "l1\r\nl2"]))
            cells = [ident, f, n, s, v]
            if draw(st.integers(0, 4)) == 0:  # quotes that RFC 4180 does not place so
                broken = draw(st.sampled_from(['"b"x', 'a"b', '"a""b"', '"open', 'b"', '""""']))
                cells[draw(st.integers(0, 4))] = "\x00" + broken  # (marker: left unquoted)
            lines.append(",".join(c[1:] if c[:1] == "\x00" else _quote(c) for c in cells))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return ("#id,f,n,s,v" + end + end.join(lines) + draw(st.sampled_from(["", end]))).encode(
        "utf-8", "surrogatepass"
    )


@SETTINGS
@given(csv_texts(), st.integers(1, 4), st.sampled_from([16, 64, 1 << 23]))
def test_property_csv_fast_path_equals_exact_path(tmp_path, monkeypatch, data, batch, block):
    monkeypatch.setattr(csv_blocks, "READ_BYTES", block)
    path = tmp_path / "p.csv"
    path.write_bytes(data)
    assert_same_as_exact(monkeypatch, path, "csv", batch_rows=batch)


def test_csv_block_cuts_keep_rows_and_lines(tmp_path, monkeypatch):
    """Small blocks cut between \\r and \\n, inside quoted cells and at every other place."""
    rng = random.Random(0)
    lines = []
    for k in range(300):
        f = rng.choice(["1", "2.5", "x", "-0.0"])
        s = rng.choice(["plain", '"two\r\nlines"', '"a,b"', '"q""q"'])
        lines.append(f"r{k},{f},{k},{s},{rng.choice(['1;2', '3;4', '5'])}")
        if rng.random() < 0.1:
            lines.append("")
    path = tmp_path / "n.csv"
    path.write_bytes(("#id,f,n,s,v\r\n" + "\r\n".join(lines) + "\r\n").encode())
    expected = exact_read(monkeypatch, path, "csv", batch_rows=7)
    assert expected[1] and expected[2] is None  # there are bad rows
    for block in (13, 50, 257, 4096):
        monkeypatch.setattr(csv_blocks, "READ_BYTES", block)
        got = read(path, "csv", batch_rows=7)
        assert same(got[0], expected[0]) and got[1:] == expected[1:], block


def test_csv_fast_batches_have_the_exact_sizes(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("#id,f,n,s,v\n" + "".join(f"r{k},1,2,x,1;2\n" for k in range(10)))
    tables = list(read_table(str(path), "csv", ("#id",), SPECS, batch_rows=4))
    assert [t.num_rows for t in tables] == [4, 4, 2]


# ---------------------------------------------------------------------------------------------
# TFRecord: the scan reads what the protobuf parser reads


def _feature(kind: str, values: list):
    if kind == "float":
        return example_pb2.Feature(float_list=example_pb2.FloatList(value=values))
    if kind == "int":
        return example_pb2.Feature(int64_list=example_pb2.Int64List(value=values))
    return example_pb2.Feature(bytes_list=example_pb2.BytesList(value=values))


_VALUES = {
    "float": st.floats(width=32, allow_nan=True),
    "int": st.integers(-(2**63), 2**63 - 1),
    "bytes": st.binary(max_size=5),
}


@st.composite
def examples(draw):
    """A tf.Example, mostly of the layout the specs want, sometimes not, sometimes mangled."""
    names = ["#id", "extra", "f", "n", "s", "v"]
    if draw(st.integers(0, 3)) == 0:  # mostly one layout, sometimes another order
        names = draw(st.permutations(names))
    feature = {}
    for name in names:
        if draw(st.integers(0, 12)) == 0:
            continue  # missing
        key = name
        if draw(st.integers(0, 10)) == 0:  # another key of the same length
            key = {"#id": "#ie", "extra": "extrb"}.get(name, "g")
        kind, width = {"#id": ("bytes", 1), "f": ("float", 1), "s": ("bytes", 1)}.get(
            name, {"v": ("float", 2), "n": ("int", 1), "extra": ("int", 3)}.get(name)
        )
        if draw(st.integers(0, 12)) == 0:
            kind = draw(st.sampled_from(["float", "int", "bytes"]))
        if draw(st.integers(0, 8)) == 0:
            width = draw(st.integers(0, 3))
        feature[key] = _feature(kind, draw(st.lists(_VALUES[kind], min_size=width, max_size=width)))
    example = example_pb2.Example(features=example_pb2.Features(feature=feature))
    data = example.SerializeToString(deterministic=draw(st.booleans()))
    if draw(st.integers(0, 6)) == 0 and data:  # flip, cut or append bytes
        at = draw(st.integers(0, len(data) - 1))
        how = draw(st.integers(0, 2))
        if how == 0:
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
        elif how == 1:
            data = data[:at]
        else:
            data += draw(st.binary(min_size=1, max_size=4))
    return data


@SETTINGS
@given(st.lists(examples(), max_size=10), st.integers(1, 4))
def test_property_tfrecord_scan_equals_protobuf_parser(tmp_path, monkeypatch, records, batch):
    path = tmp_path / "p.tfrecord"
    path.write_bytes(frame(records))
    assert_same_as_exact(monkeypatch, path, "tfrecord", batch_rows=batch)


def test_tfrecord_scan_reads_the_layout_and_leaves_the_rest(tmp_path, monkeypatch):
    def make(k, order=("#id", "f", "n", "s", "v")):
        values = {"#id": [b"r%d" % k], "f": [k / 3], "n": [-k], "s": [b"s"], "v": [1.5, k]}
        kinds = {"#id": "bytes", "f": "float", "n": "int", "s": "bytes", "v": "float"}
        feature = {name: _feature(kinds[name], values[name]) for name in order}
        return example_pb2.Example(features=example_pb2.Features(feature=feature))

    records = [make(k).SerializeToString(deterministic=True) for k in range(50)]
    records[7] = make(7, ("v", "s", "n", "f", "#id")).SerializeToString()  # another layout
    records[9] = records[9] + b"\x12\x00"  # an unknown field: the parser reads it, so do we
    records[11] = records[11][:-1]  # broken
    nan = make(12)
    nan.features.feature["f"].float_list.value[0] = float("nan")
    records[12] = nan.SerializeToString(deterministic=True)
    path = tmp_path / "p.tfrecord"
    path.write_bytes(frame(records))
    rows, bad, error = assert_same_as_exact(monkeypatch, path, "tfrecord", batch_rows=16)
    assert error is None and len(rows) == 49
    assert [b[:3] for b in bad] == [(11, None, "record index")]
    assert bad[0][3].startswith("not a tf.Example")


def test_tfrecord_framing_over_small_reads(tmp_path, monkeypatch):
    """Records that straddle every read; a corrupt checksum and a cut at the end of the file."""
    monkeypatch.setattr(tfrecord, "_READ_CHUNK", 37)
    records = [
        example_pb2.Example(
            features=example_pb2.Features(
                feature={
                    "#id": _feature("bytes", [b"r%d" % k]),
                    "f": _feature("float", [1.0]),
                    "n": _feature("int", [k]),
                    "s": _feature("bytes", [b"x" * k]),
                    "v": _feature("float", [1.0, 2.0]),
                }
            )
        ).SerializeToString()
        for k in range(30)
    ]
    data = bytearray(frame(records))
    second = len(frame(records[:5]))
    data[second + 14] ^= 1  # inside record 5's data
    path = tmp_path / "p.tfrecord"
    path.write_bytes(bytes(data[:-2]))
    rows, bad, error = read(path, "tfrecord", batch_rows=4)
    assert [r["n"] for r in rows] == [*range(5), *range(6, 29)]
    assert bad == [(5, None, "record index", "corrupt record data checksum")]
    size = len(records[29])
    assert error == f"{path}: record index 29: truncated record (file ends after {size} bytes)"
