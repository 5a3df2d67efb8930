"""sampler.io.piece_files: pieces written to one file, read back by their ranges."""

from __future__ import annotations

import os

import numpy as np
import pytest

from sampler.beam.packing import packed_buffers, unpacked_buffers
from sampler.errors import UserError
from sampler.io.piece_files import read_pieces, write_pieces


def test_pieces_come_back_as_written_whatever_the_order_of_the_ranges(tmp_path):
    folder = str(tmp_path / "p")
    first = write_pieces(folder, "nodes", [(3, b"abc"), (1, b""), (7, b"de")])
    second = write_pieces(folder, "nodes", [(2, b"xyz" * 1000)])
    assert [key for key, _ in first] == [3, 1, 7] and first[0][1].name != second[0][1].name
    ranges = [second[0][1], first[2][1], first[0][1], first[1][1]]
    got = dict(read_pieces(folder, ranges))
    assert [got[i] for i in range(4)] == [b"xyz" * 1000, b"de", b"abc", b""]


def test_a_file_cut_short_is_one_line_naming_it(tmp_path):
    ((_, where),) = write_pieces(str(tmp_path), "edges", [(0, b"0123456789")])
    path = os.path.join(tmp_path, where.name)
    os.truncate(path, 4)
    with pytest.raises(UserError, match=r"cut short \(4 of 10 bytes") as e:
        list(read_pieces(str(tmp_path), [where]))
    assert path in str(e.value) and "\n" not in str(e.value)


def test_a_piece_of_buffers_is_their_bytes_one_after_another(tmp_path):
    ((_, where),) = write_pieces(str(tmp_path), "edges", [(5, [b"ab", memoryview(b"cde"), b""])])
    assert where.length == 5
    ((_, data),) = read_pieces(str(tmp_path), [where])
    assert data == b"abcde"


def test_a_value_read_back_holds_its_arrays_in_the_bytes_read(tmp_path):
    """packed_buffers: a piece's arrays leave out of band, and come back as writable, aligned
    views of the bytes read, not copies of them (pickle copied them in and out again)."""
    from sampler.batches import NodeBatch, SharedNodeRows, bytes_array

    rows = NodeBatch(
        np.arange(3, dtype=np.uint64),
        bytes_array([b"a", b"", b"ccc"]),
        {"f": np.arange(15, dtype=np.float32).reshape(3, 5), "g": np.zeros(0, np.int64)},
    )
    value = ("nodes", SharedNodeRows(np.array([7, 9], np.uint64), np.array([2, 0]), rows))
    ranges = write_pieces(str(tmp_path), "nodes", [(0, b"x"), (1, packed_buffers(value))])
    ((_, data),) = read_pieces(str(tmp_path), [ranges[1][1]])
    kind, got = unpacked_buffers(data)
    assert kind == "nodes" and got.rows.ids.tolist() == [b"a", b"", b"ccc"]
    held = np.frombuffer(data, np.uint8)
    for want, array in [
        (value[1].sample, got.sample),
        (value[1].inverse, got.inverse),
        (rows.fp, got.rows.fp),
        (rows.features["f"], got.rows.features["f"]),
    ]:
        np.testing.assert_array_equal(array, want)
        assert np.shares_memory(array, held) and array.flags.writeable
        assert array.ctypes.data % 16 == 0
    assert got.rows.features["g"].shape == (0,)


def test_batches_pickle_their_sample_keys_and_sources_by_runs():
    """A batch comes sample by sample (and an op's edges source by source): its pickle holds
    each run of one key once, and comes back the same; a column without runs as it is."""
    import pickle

    from sampler.batches import SampledEdges, SampleNodes, SharedNodeRows

    rng = np.random.default_rng(0)
    keys = np.sort(rng.integers(0, 2**63, 50).astype(np.uint64))
    sample = np.repeat(keys, 200)
    node = rng.integers(0, 2**63, len(sample)).astype(np.uint64)
    src = np.repeat(node[:2000], 5)
    weight = {"w": rng.random(len(sample)).astype(np.float32)}
    batches = [
        (SampleNodes(sample, node, np.arange(len(sample))), 2.1),  # of 3 columns
        (SampledEdges(sample, src, node, node[::-1].copy(), weight), 2.9),  # of 4.5
        (SharedNodeRows(sample, np.arange(len(sample)), None), 1.1),  # of 2
        (SampleNodes(node, node), 2.1),  # no runs: 2 of 2
    ]
    for batch, columns in batches:
        data = pickle.dumps(batch, pickle.HIGHEST_PROTOCOL)
        got = pickle.loads(data)
        for name, want in vars(batch).items():
            if isinstance(want, np.ndarray):
                np.testing.assert_array_equal(getattr(got, name), want)
                assert getattr(got, name).dtype == want.dtype
        assert len(data) < columns * sample.nbytes
    np.testing.assert_array_equal(got.node, node)


@pytest.mark.parametrize("bound", [10, 399, 400, 401, 100_000])
def test_shared_rows_are_found_as_np_unique_finds_them(bound):
    """unique_inverse (the rows a piece of shared node rows holds, and each value's position
    among them) is np.unique's, by marking where the rows are few beside the values and by
    sorting where they are many: both sides of 4 values a row."""
    from sampler.batches import unique_inverse

    rng = np.random.default_rng(bound)
    values = rng.integers(0, bound, 100)
    held, inverse = unique_inverse(values, bound)
    want_held, want_inverse = np.unique(values, return_inverse=True)
    np.testing.assert_array_equal(held, want_held)
    np.testing.assert_array_equal(inverse, want_inverse)
    assert inverse.dtype == np.int64
    np.testing.assert_array_equal(held[inverse], values)


@pytest.mark.parametrize("n", [1, 63, 64, 65, 200])
def test_batches_pickled_by_runs_on_both_sides_of_the_shortest(n):
    """A batch's sample keys come back the same whether the column is too short to be
    pickled by runs (under 64 rows) or is, with runs or without."""
    import pickle

    from sampler.batches import SampleNodes, runs_of

    keys = np.repeat(np.arange(0, n, 4, dtype=np.uint64), 4)[:n]
    node = np.arange(n, dtype=np.uint64)
    for sample in (keys, node):  # runs of 4; no runs
        got = pickle.loads(pickle.dumps(SampleNodes(sample, node), pickle.HIGHEST_PROTOCOL))
        np.testing.assert_array_equal(got.sample, sample)
        assert got.sample.dtype == sample.dtype
    assert isinstance(runs_of(keys), tuple) == (n >= 64)
    assert not isinstance(runs_of(node), tuple)
