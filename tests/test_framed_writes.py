"""Framed chunks written whole (sampler.io.framed, StreamingFile.write_placed and
write_records): the file holds the bytes written, in order, whether a chunk was placed for
the file's direct writes (written straight from its buffer, not copied), placed wrongly, or
mixed with plain writes; and where each chunk starts in its file (FileOffsets)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from sampler.io import streaming_file, tfrecord
from sampler.io.framed import ALIGN, FileOffsets, FrameBuffers, FramedRecords
from sampler.io.streaming_file import StreamingFile, write_records
from tests.test_streaming_file import refuse_aligned_writes

KB = 1 << 10


def _direct_writes(tmp_path) -> bool:
    with open(tmp_path / "probe", "wb") as f:
        return streaming_file._set_direct(f.fileno(), True)


def _placed(data: bytes, offset: int | None, pool: FrameBuffers) -> FramedRecords:
    """`data` in a pool buffer as encode_framed places a chunk starting at `offset` of its
    file (None: not known)."""
    at = ALIGN + (offset % ALIGN if offset is not None else 0)
    buffer = pool.take(at + len(data))
    buffer[at : at + len(data)] = np.frombuffer(data, np.uint8)
    return FramedRecords(buffer, at, len(data), 1, pool)


@pytest.mark.parametrize("mode", ["direct", "buffered"])
def test_placed_chunks_are_the_bytes_written(tmp_path, monkeypatch, mode):
    """Chunks of every size around a block, placed where they start in the file, placed
    wrongly, or plain writes in between (the stage then holds bytes): the file is their
    concatenation; placed ones, in direct mode, never go through the stage's copy."""
    if mode == "direct" and not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    if mode == "buffered":
        monkeypatch.setattr(streaming_file, "_DIRECT", None)
    monkeypatch.setattr(streaming_file, "_DIRECT_STAGE", 16 * KB)
    monkeypatch.setattr(streaming_file, "_DIRECT_BLOCK", 8 * KB)  # a placed chunk: many writes
    copied = []
    real = StreamingFile._write_direct

    def counted(self, data):
        copied.append(len(memoryview(data).cast("B")))
        return real(self, data)

    monkeypatch.setattr(StreamingFile, "_write_direct", counted)
    rng, pool = random.Random(4), FrameBuffers(2)
    sizes = [4095, 4096, 4097, 1, 70 * KB, 12, 16 * KB, 16 * KB + 1, 33 * KB, 5000, 3 * 4096]
    path, pieces, placed = tmp_path / "out", [], 0
    with StreamingFile(str(path)) as f:
        assert f._direct == (mode == "direct")
        for i, size in enumerate(sizes * 3):
            data = rng.randbytes(size)
            offset = f.written + (0 if i % 5 else 123)  # every fifth one placed wrongly
            if i % 7 == 3:
                f.write(data)  # a plain write: the stage holds its bytes
                copied.pop() if f._direct else None
            else:
                chunk = _placed(data, offset, pool)
                right = i % 5 and size >= ALIGN and f._direct
                before = len(copied)
                assert write_records(f, chunk) == size
                assert chunk.data is None  # given back
                assert len(copied) == before + (0 if right else int(f._direct))
                placed += bool(right)
            pieces.append(data)
    assert path.read_bytes() == b"".join(pieces)
    assert f.written == sum(map(len, pieces))
    assert placed > 10 if mode == "direct" else placed == 0


def test_placed_writes_refused_go_the_buffered_way(tmp_path, monkeypatch):
    """A filesystem that takes O_DIRECT but refuses the aligned writes (EINVAL): the placed
    chunk, and what the stage held, through the buffered file."""
    if not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    refuse_aligned_writes(monkeypatch)
    pool, rng = FrameBuffers(1), random.Random(5)
    for head in (100, 9000):  # the stage: part of a block, more than one
        pieces = [rng.randbytes(head), rng.randbytes(20 * KB), rng.randbytes(30 * KB)]
        path = tmp_path / f"out{head}"
        with StreamingFile(str(path)) as f:
            f.write(pieces[0])
            write_records(f, _placed(pieces[1], head, pool))
            assert not f._direct
            write_records(f, _placed(pieces[2], f.written, pool))
        assert path.read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("size", [6 * KB, 256 * KB, 256 * KB + 1, 700 * KB])
def test_framed_records_to_other_streams(tmp_path, monkeypatch, size):
    """A stream that is not a StreamingFile (and a StreamingFile without direct writes) gets
    the framed bytes in order, in pieces of at most a quarter of the file buffer, on both
    sides of that size."""
    records = [b"a", random.Random(size).randbytes(size)]
    framed = tfrecord.frame(records)
    writes = []

    class Plain:
        def __init__(self, f):
            self._f = f

        def write(self, data):
            writes.append(len(data))
            return self._f.write(data)

    with open(tmp_path / "plain", "wb") as f:
        assert write_records(Plain(f), _placed(framed, 0, FrameBuffers(1))) == len(framed)
    assert (tmp_path / "plain").read_bytes() == framed
    assert max(writes) <= streaming_file._BUFFER // 4 and sum(writes) == len(framed)
    monkeypatch.setattr(streaming_file, "_DIRECT", None)  # (a filesystem without O_DIRECT)
    with StreamingFile(str(tmp_path / "streamed")) as f:
        assert not f._direct
        assert write_records(f, _placed(framed, 0, FrameBuffers(1))) == len(framed)
    assert (tmp_path / "streamed").read_bytes() == framed


def test_file_offsets_are_known_once_the_chunks_before_are():
    """Chunks 0..5 to files by key parity, sized out of order: a chunk's start is known when
    every chunk before it in its file has its size, without waiting for the others."""
    offsets = FileOffsets(lambda key: key % 2)
    jobs = list(offsets.expecting([(k, None) for k in range(6)]))
    assert [index for index, _ in jobs] == list(range(6))
    assert offsets.place(2, 30) is None  # (file 0: chunk 0 not sized yet)
    assert offsets.place(1, 5) == 0
    assert offsets.place(0, 10) == 0
    assert offsets.place(4, 7) == 40  # 10 + 30
    assert offsets.place(5, 1) is None  # (file 1: chunk 3 not sized yet)
    assert offsets.place(3, 2) == 5
    one = FileOffsets()
    list(one.expecting([(k, None) for k in range(3)]))
    assert [one.place(i, 100) for i in range(3)] == [0, 100, 200]
