"""sampler.io.piece_files: pieces written to one file, read back by their ranges."""

from __future__ import annotations

import os

import pytest

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
