"""Readers in dead-letter mode: good rows come out, every bad row is reported once, never a crash.

Also the hostile-input properties the issue asks for beyond tests/test_io_tables.py: Parquet
files and pbtxt loaders fed arbitrary input give valid rows or one-line UserErrors, and no
loader unpickles input.
"""

from __future__ import annotations

import pathlib
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sampler.errors import UserError
from sampler.features import FeatureSpec
from sampler.io.readers import read_table
from sampler.sample.plan import load_sampling_spec
from sampler.schema import load_graph
from tests.test_io_tables import example, expected_schema, write_records

SPECS = {"f": FeatureSpec("f", "float", ()), "v": FeatureSpec("v", "int", (2,))}
ROOT = pathlib.Path(__file__).resolve().parent.parent


def read_reporting(path, fmt, specs=SPECS, batch_rows=2):
    bad = []
    rows = []
    for table in read_table(str(path), fmt, ("#id",), specs, batch_rows, on_bad=bad.append):
        assert table.schema == expected_schema(("#id",), specs)
        rows += table.to_pylist()
    return rows, bad


def test_csv_bad_rows_are_reported_and_skipped(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("#id,f,v\na,1,1;2\nb,x,1;2\nc,2,1\nd,3,4;5\n,4,1;2\ne,5,6;7,8\nf,6,1;2\n")
    rows, bad = read_reporting(path, "csv")
    assert [r["#id"] for r in rows] == [b"a", b"d", b"f"]
    # Rows with the wrong number of cells are reported as they are read, the rest per batch.
    bad = sorted(bad, key=lambda b: b.row)
    assert [(b.row, b.line, b.reason) for b in bad] == [
        (2, 3, "column 'f': 'x' is not a number"),
        (3, 4, "column 'v': 1 values, expected 2 (joined by ';')"),
        (5, 6, "column '#id': missing id"),
        (6, 7, "4 cells, but the header has 3 columns"),
    ]
    assert bad[0].message() == f"{path}: row 2 (line 3): column 'f': 'x' is not a number"
    assert all(b.file == str(path) for b in bad)


def test_tfrecord_bad_records_are_reported_and_skipped(tmp_path):
    good = [example(**{"#id": [b"%d" % k], "f": [0.5], "v": [1, 2]}) for k in range(4)]
    bad_records = [
        b"\xff\xff\xff",  # not a tf.Example, before the first good one
        example(**{"#id": [b""], "f": [1.0], "v": [1, 2]}),
        example(**{"#id": [b"x"], "f": [1.0], "v": [1]}),
    ]
    path = tmp_path / "n.tfrecord"
    write_records(
        path, [bad_records[0], good[0], bad_records[1], good[1], bad_records[2], *good[2:]]
    )
    rows, bad = read_reporting(path, "tfrecord")
    assert [r["#id"] for r in rows] == [b"0", b"1", b"2", b"3"]
    assert [(b.row, b.unit) for b in bad] == [
        (0, "record index"),
        (2, "record index"),
        (4, "record index"),
    ]
    assert bad[0].reason.startswith("not a tf.Example")
    assert bad[1].reason == "feature '#id': empty id"
    assert bad[2].reason == "feature 'v': has 1 values, expected 2"


def test_tfrecord_data_checksum_is_a_bad_record(tmp_path):
    good = [example(**{"#id": [b"%d" % k], "f": [0.5], "v": [1, 2]}) for k in range(3)]
    path = tmp_path / "n.tfrecord"
    write_records(path, good)
    data = bytearray(path.read_bytes())
    first = len(data) // 3
    data[first - 6] ^= 1  # inside the first record's data
    path.write_bytes(bytes(data))
    rows, bad = read_reporting(path, "tfrecord")
    assert [r["#id"] for r in rows] == [b"1", b"2"]
    assert [(b.row, b.reason) for b in bad] == [(0, "corrupt record data checksum")]


def test_parquet_bad_rows_are_reported_and_skipped(tmp_path):
    path = tmp_path / "n.parquet"
    table = pa.table(
        {
            "#id": ["a", None, "c", "", "e", "f"],
            "f": [1.0, 2.0, None, 4.0, 5.0, 6.0],
            "v": [[1, 2], [1, 2], [1, 2], [1, 2], [1], [3, None]],
        }
    )
    pq.write_table(table, path)
    rows, bad = read_reporting(path, "parquet", batch_rows=4)
    assert [r["#id"] for r in rows] == [b"a"]
    assert [(b.row, b.reason) for b in bad] == [
        (2, "column '#id': missing id"),
        (3, "column 'f': missing value"),
        (4, "column '#id': missing id"),
        (5, "column 'v': 1 values, expected 2"),
        (6, "column 'v': missing value"),
    ]


def test_without_on_bad_the_first_bad_row_raises(tmp_path):
    path = tmp_path / "n.csv"
    path.write_text("#id,f,v\na,1,1;2\nb,x,1;2\nc,y,1;2\n")
    with pytest.raises(UserError, match=r"row 2 \(line 3\): column 'f': 'x' is not a number"):
        list(read_table(str(path), "csv", ("#id",), SPECS))


# ---------------------------------------------------------------------------------------------
# Hostile input: Parquet and pbtxt


def _check(path, fmt, specs):
    """Valid tables and one-line UserErrors only, with and without a dead-letter callback."""
    for on_bad in (None, []):
        try:
            sink = on_bad.append if on_bad is not None else None
            for table in read_table(str(path), fmt, ("#id",), specs, 3, on_bad=sink):
                assert table.schema == expected_schema(("#id",), specs)
        except UserError as e:
            assert "\n" not in str(e)
        for bad in on_bad or []:
            assert bad.file == str(path) and bad.reason and "\n" not in bad.message()


_CELLS = st.one_of(
    st.none(), st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=4), st.binary(max_size=4),
    st.booleans(), st.lists(st.one_of(st.none(), st.floats(), st.integers(-5, 5), st.text(max_size=2)), max_size=3),
)  # fmt: skip


@st.composite
def parquet_columns(draw):
    n = draw(st.integers(0, 5))
    columns = {}
    for name in draw(st.lists(st.sampled_from(["#id", "f", "v", "x"]), unique=True, max_size=4)):
        values = draw(st.lists(_CELLS, min_size=n, max_size=n))
        try:
            columns[name] = pa.array(values)
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            columns[name] = pa.array([None if v is None else repr(v) for v in values])
    return columns


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parquet_columns(), st.binary(max_size=64))
def test_property_parquet_any_columns_or_bytes(tmp_path, columns, garbage):
    path = tmp_path / "p.parquet"
    pq.write_table(
        pa.table(columns) if columns else pa.table({"z": pa.array([], pa.int64())}), path
    )
    _check(path, "parquet", SPECS)
    _check(
        path, "parquet", {"f": FeatureSpec("f", "bytes", ()), "v": FeatureSpec("v", "float", (1,))}
    )
    data = path.read_bytes()
    path.write_bytes(data[: len(garbage) % max(len(data), 1)] + garbage)  # truncated + garbage
    _check(path, "parquet", SPECS)


_PBTXT_PIECES = st.sampled_from(
    ["node_sets", "edge_sets", "{", "}", "key:", "value", '"paper"', '"p.csv"', "metadata",
     "filename:", "features", "dtype:", "DT_FLOAT", "DT_BOOL", "shape", "dim", "size:", "-1", "3",
     "source:", "target:", "seed_op", "op_name:", "node_set_name:", "sampling_ops",
     "input_op_names:", "edge_set_name:", "sample_size:", "strategy:", "TOP_K", "#", "\n", "\xff",
     "\x00", ":", "'", '"']
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(st.lists(_PBTXT_PIECES, max_size=30).map(" ".join), st.text(max_size=40)),
    st.binary(max_size=8),
)
def test_property_pbtxt_loaders(tmp_path, text, tail):
    path = tmp_path / "x.pbtxt"
    path.write_bytes(text.encode("utf-8", "surrogatepass") + tail)
    for load in (load_graph, load_sampling_spec):
        try:
            load(str(path))
        except UserError as e:
            assert "\n" not in str(e).strip(), str(e)


# The one module that loads pickles: values the pipeline's own steps packed, between its
# stages (as Beam's default coder would pickle them), never an input file.
PACKING = "sampler/beam/packing.py"
LOADS_PICKLES = (
    r"\bpickle\.loads?\b|allow_pickle\s*=\s*True|\bnp\.load\((?![^)]*allow_pickle=False)"
)


def test_no_loader_unpickles_input():
    """No module reads pickles but the packing of the pipeline's own values, and numpy loads
    refuse them."""
    offenders = []
    for py in sorted([*(ROOT / "sampler").rglob("*.py"), *(ROOT / "pipelines").rglob("*.py")]):
        if re.search(LOADS_PICKLES, py.read_text()):
            offenders.append(str(py.relative_to(ROOT)))
    assert offenders == [PACKING]
    # `unpacked` is used by the pipeline steps, never by a reader of input files
    readers = [*(ROOT / "sampler" / "io").rglob("*.py"), ROOT / "sampler" / "beam" / "read.py"]
    assert not [py for py in readers if "packing" in py.read_text()]
    # and the check itself can fail, also on an alias:
    assert re.search(LOADS_PICKLES, "x = pickle.load(f)")
    assert re.search(LOADS_PICKLES, "unpacked = pickle.loads")


def _csv_rows(path, text, specs):
    path.write_text(text)
    bad = []
    rows = []
    for table in read_table(str(path), "csv", ("#id",), specs, 100, on_bad=bad.append):
        rows += table.to_pylist()
    return rows, bad


STRING_SPECS = {"f": FeatureSpec("f", "float", ()), "s": FeatureSpec("s", "bytes", ())}
SWALLOWED = "".join(f"c{k},3,w\n" for k in range(191))


@pytest.mark.parametrize(
    "text",
    [
        # The quote opened on line 3 closes 192 lines later before a comma: one record, 2 cells.
        '#id,f,s\na,1,x\nb,2,"oops\n' + SWALLOWED + 'd,",x\n',
        # ... or never closes.
        '#id,f,s\na,1,x\nb,2,"oops\n' + SWALLOWED,
        # ... or closes before text.
        '#id,f,s\na,1,x\nb,2,"oops\n' + SWALLOWED + 'd,4,"q"\n',
        # ... or closes properly but far too late.
        '#id,f,s\na,1,x\nb,2,"oops\n' + SWALLOWED + 'd",4,x\n',
    ],
)
def test_csv_unterminated_quote_fails_naming_the_line_it_opened(tmp_path, text):
    with pytest.raises(UserError, match=r"n\.csv: line 3: bad CSV quoting"):
        _csv_rows(tmp_path / "n.csv", text, STRING_SPECS)


def test_csv_quoted_cell_may_hold_a_few_line_breaks(tmp_path):
    rows, bad = _csv_rows(tmp_path / "n.csv", '#id,f,s\na,1,"x\ny"\nb,2,z\n', STRING_SPECS)
    assert [r["s"] for r in rows] == [b"x\ny", b"z"] and not bad
