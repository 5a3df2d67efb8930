"""sampler.io.streaming_file: the bytes written, and the page cache left as it was."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import random

import pytest

from sampler.io import streaming_file, tfrecord
from sampler.io.streaming_file import StreamingFile, write_records

KB = 1 << 10


def _pieces(seed: int, total: int) -> list[bytes]:
    """Pieces of every size from 0 bytes to 3x the window used below, `total` bytes in all."""
    rng = random.Random(seed)
    out, size = [], 0
    while size < total:
        n = rng.choice([0, 1, 7, 12, 4 * KB, 63 * KB, 200 * KB, 700 * KB])
        out.append(rng.randbytes(n))
        size += n
    return out


def _direct_writes(tmp_path) -> bool:
    """Whether a file here takes O_DIRECT (else the direct cases test nothing new)."""
    with open(tmp_path / "probe", "wb") as f:
        return streaming_file._set_direct(f.fileno(), True)


@pytest.mark.parametrize("mode", ["direct", "hand_over", "plain"])
def test_bytes_are_those_written(tmp_path, monkeypatch, mode):
    """Whatever the pieces and windows, the file holds their concatenation (written directly
    through small aligned buffers, with the hand-over to the disk, and as a plain buffered file
    where there is no sync_file_range)."""
    if mode == "direct":
        if not _direct_writes(tmp_path):
            pytest.skip("no O_DIRECT writes on this filesystem")
        monkeypatch.setattr(streaming_file, "_DIRECT_STAGE", 64 * KB)
    else:
        monkeypatch.setattr(streaming_file, "_DIRECT", None)
    if mode == "plain":
        monkeypatch.setattr(streaming_file, "_sync_file_range", lambda: None)
    pieces = _pieces(1, 6 << 20) + [b"x" * n for n in (4095, 4096, 4097, 64 * KB, 3)]
    path = tmp_path / "out"
    with StreamingFile(str(path), window=256 * KB) as f:
        assert f._direct == (mode == "direct")
        for piece in pieces:
            assert f.write(piece) == len(piece)
    assert path.read_bytes() == b"".join(pieces)
    assert f.written == len(b"".join(pieces))


def test_direct_writes_then_buffered_ones(tmp_path, monkeypatch):
    """After direct writes, flush(), fileno() and copy_from go on through the buffered file
    from where the direct writes ended: the bytes are all there, in order."""
    if not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    monkeypatch.setattr(streaming_file, "_DIRECT_STAGE", 16 * KB)
    part = tmp_path / "part"
    part.write_bytes(random.Random(2).randbytes(50 * KB))
    pieces = [random.Random(i).randbytes(n) for i, n in enumerate([5, 70 * KB, 9, 100 * KB])]
    path = tmp_path / "out"
    with StreamingFile(str(path), window=32 * KB) as f:
        f.write(pieces[0])
        f.write(pieces[1])
        assert f._direct
        f.flush()
        assert not f._direct
        f.write(pieces[2])
        with open(part, "rb", buffering=0) as source:
            f.copy_from(source, 50 * KB)
        f.write(pieces[3])
    assert path.read_bytes() == b"".join(pieces[:3]) + part.read_bytes() + pieces[3]


def refuse_aligned_writes(monkeypatch) -> None:
    """A filesystem that takes O_DIRECT but refuses aligned writes (EINVAL), with a 16 kB
    stage."""
    real_write = os.write

    def refuse(fd, data):
        if len(data) % 4096 == 0 and len(data) >= 4096:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(streaming_file.os, "write", refuse)
    monkeypatch.setattr(streaming_file, "_DIRECT_STAGE", 16 * KB)


def test_direct_writes_refused_go_the_buffered_way(tmp_path, monkeypatch):
    """A filesystem that takes O_DIRECT but refuses the aligned writes (EINVAL): every byte
    through the buffered file, from the first."""
    refuse_aligned_writes(monkeypatch)
    pieces = _pieces(2, 1 << 20)
    path = tmp_path / "out"
    with StreamingFile(str(path), window=64 * KB) as f:
        for piece in pieces:
            f.write(piece)
        assert not f._direct
    assert path.read_bytes() == b"".join(pieces)


@pytest.mark.parametrize("kernel_copies", [True, False])
def test_copy_from_appends_files(tmp_path, monkeypatch, kernel_copies):
    """copy_from puts other files' bytes after what was written, in order, also when the
    kernel cannot copy (the read-and-write fallback)."""
    if not kernel_copies:

        def cannot(*_):
            raise OSError(errno.EXDEV, "cross-device")

        monkeypatch.setattr(streaming_file.os, "copy_file_range", cannot)
    parts = []
    for i, size in enumerate([0, 5, 300 * KB, 1 << 20]):
        part = tmp_path / f"part{i}"
        part.write_bytes(random.Random(i).randbytes(size))
        parts.append(part)
    path = tmp_path / "out"
    with StreamingFile(str(path), window=64 * KB) as f:
        f.write(b"head")
        for part in parts:
            with open(part, "rb", buffering=0) as source:
                f.copy_from(source, part.stat().st_size)
        f.write(b"tail")
    expected = b"head" + b"".join(p.read_bytes() for p in parts) + b"tail"
    assert path.read_bytes() == expected


def test_copy_from_short_source_is_an_error(tmp_path):
    part = tmp_path / "part"
    part.write_bytes(b"abc")
    with StreamingFile(str(tmp_path / "out")) as f, open(part, "rb", buffering=0) as source:
        with pytest.raises(OSError, match="3 of 10 bytes"):
            f.copy_from(source, 10)


def test_write_records_is_tfrecord_framing(tmp_path):
    """The framed bytes are sampler.io.tfrecord.frame's, and read back as the records."""
    records = [b"", b"x", random.Random(3).randbytes(100 * KB), b"\x00" * 9]
    path = tmp_path / "out"
    with StreamingFile(str(path), window=16 * KB) as f:
        assert write_records(f, records) == len(tfrecord.frame(records))
    assert path.read_bytes() == tfrecord.frame(records)
    with open(path, "rb") as f:
        assert [data for _, data in tfrecord.records(str(path), f)] == records


def test_full_disk_is_an_error():
    """A write the disk refuses (ENOSPC) raises; the hand-over does not hide it."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    f = StreamingFile("/dev/full", window=64 * KB)
    with pytest.raises(OSError) as raised:
        for _ in range(64):
            f.write(b"x" * (64 * KB))
        f.close()
    assert raised.value.errno == errno.ENOSPC


def _resident_bytes(path: str) -> int:
    """The bytes of `path` in the page cache (mincore over a read-only mapping)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)  # fmt: skip
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    size = os.path.getsize(path)
    page = os.sysconf("SC_PAGE_SIZE")
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, 1, 1, fd, 0)  # PROT_READ, MAP_SHARED
        assert address not in (None, ctypes.c_void_p(-1).value)
        pages = (size + page - 1) // page
        vector = ctypes.create_string_buffer(pages)
        assert libc.mincore(address, size, vector) == 0
        libc.munmap(address, size)
    finally:
        os.close(fd)
    return sum(b & 1 for b in vector.raw) * page


def test_written_pages_leave_the_page_cache(tmp_path, monkeypatch):
    """After writing 48 MB in 1 MB windows, about two windows are still cached; the same bytes
    written plainly stay cached (so the check can see a difference on this filesystem)."""
    if streaming_file._sync_file_range() is None:
        pytest.skip("no sync_file_range here")
    monkeypatch.setattr(streaming_file, "_DIRECT", None)  # the buffered path's hand-over
    data = random.Random(5).randbytes(48 << 20)
    plain = tmp_path / "plain"
    with open(plain, "wb") as f:
        f.write(data)
    if _resident_bytes(str(plain)) < 40 << 20:
        pytest.skip("this filesystem does not keep written pages cached")
    path = tmp_path / "streamed"
    with StreamingFile(str(path), window=1 << 20) as f:
        for at in range(0, len(data), 100 * KB):
            f.write(data[at : at + 100 * KB])
    assert _resident_bytes(str(path)) <= 4 << 20
    assert path.read_bytes() == data


def test_direct_writes_skip_the_page_cache(tmp_path):
    """Where the file takes O_DIRECT, 48 MB of records written with no hand-over at all (a
    window larger than the file) leave at most the last partial block in the page cache: the
    bytes went to the disk from this process's buffer, not through cached pages."""
    if not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    data = random.Random(6).randbytes(48 << 20)
    plain = tmp_path / "plain"
    with open(plain, "wb") as f:
        f.write(data)
    if _resident_bytes(str(plain)) < 40 << 20:
        pytest.skip("this filesystem does not keep written pages cached")
    path = tmp_path / "records"
    records = [data[at : at + 150 * KB] for at in range(0, len(data), 150 * KB)]
    with StreamingFile(str(path), window=1 << 30) as f:
        write_records(f, records)
    assert _resident_bytes(str(path)) <= 2 * os.sysconf("SC_PAGE_SIZE")
    assert path.read_bytes() == tfrecord.frame(records)


@pytest.mark.parametrize("direct", [True, False])
def test_concat_files_is_the_parts_in_order(tmp_path, monkeypatch, direct):
    """Parts of every size around the block (empty, tiny, a block, blocks and a bit) make a
    file that is their concatenation, written with O_DIRECT or, where it cannot be, copied."""
    if not direct:
        monkeypatch.setattr(streaming_file, "_DIRECT", None)
    block = 4 * 4096
    sizes = [0, 1, 4095, block, block - 1, 3 * block + 5, 0, 70_000]
    parts = []
    for i, size in enumerate(sizes):
        part = tmp_path / f"part{i}"
        part.write_bytes(random.Random(i).randbytes(size))
        parts.append(str(part))
    target = tmp_path / "shard"
    streaming_file.concat_files(str(target), parts, block=block)
    assert target.read_bytes() == b"".join(open(p, "rb").read() for p in parts)
    streaming_file.concat_files(str(target), parts[:1], block=block)  # replaces, never appends
    assert target.read_bytes() == b""


def test_concat_files_where_direct_writes_are_refused(tmp_path, monkeypatch):
    """A filesystem that opens with O_DIRECT but refuses the writes (EINVAL): the copy path."""
    real_write = os.write

    def refuse(fd, data):
        if os.get_blocking(fd) and len(data) % 4096 == 0 and len(data) >= 4096:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_write(fd, data)

    monkeypatch.setattr(streaming_file.os, "write", refuse)
    part = tmp_path / "part"
    part.write_bytes(random.Random(1).randbytes(100_000))
    target = tmp_path / "shard"
    streaming_file.concat_files(str(target), [str(part)] * 3, block=4 * 4096)
    assert target.read_bytes() == part.read_bytes() * 3


def test_a_disk_error_in_write_back_is_raised_by_the_writer(tmp_path, monkeypatch):
    """sync_file_range failing with EIO (a disk error, met by the write-back thread) is raised
    by a later write() or by close(), not lost."""

    def failing(fd, offset, count, flags):
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(streaming_file, "_sync_file_range", lambda: failing)
    monkeypatch.setattr(streaming_file, "_DIRECT", None)  # the buffered path's write-back
    f = StreamingFile(str(tmp_path / "out"), window=4 * KB)
    with pytest.raises(OSError) as raised:
        for _ in range(100):
            f.write(b"x" * KB)
        f.close()
    assert raised.value.errno == errno.EIO
    f.close()  # closing again after the error does nothing


def test_a_failed_write_is_raised_once(tmp_path, monkeypatch):
    """A full device (ENOSPC): write() raises, and close() drops what is buffered instead of
    raising the same error again (the chained tracebacks of a full disk)."""
    monkeypatch.setattr(streaming_file, "_DIRECT", None)  # the buffered path
    stream = StreamingFile(str(tmp_path / "out"))
    stream._file.close()  # the same writer on a device that is always full
    stream._file = open("/dev/full", "wb", buffering=1 << 20)  # noqa: SIM115 - closed below
    stream._fd, stream._sync = stream._file.fileno(), None
    stream.write(b"x" * 100)  # buffered
    with pytest.raises(OSError) as raised:
        stream.write(b"y" * (2 << 20))  # past the buffer: written, ENOSPC
    assert raised.value.errno == errno.ENOSPC
    stream.close()  # nothing raised again
    assert stream.closed


def test_a_failed_direct_write_is_raised_once(tmp_path, monkeypatch):
    """The same where the writes are direct: the failed write raises, close() drops the
    rest of the stage and raises nothing more."""
    if not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    monkeypatch.setattr(streaming_file, "_DIRECT_STAGE", 16 * KB)

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    stream = StreamingFile(str(tmp_path / "out"))
    stream.write(b"x" * 100)  # in the stage
    monkeypatch.setattr(streaming_file.os, "write", full)
    with pytest.raises(OSError) as raised:
        stream.write(b"y" * (20 * KB))  # past the stage: written, ENOSPC
    assert raised.value.errno == errno.ENOSPC
    stream.close()  # nothing raised again
    assert stream.closed
    assert streaming_file._BUDGET["left"] == streaming_file._DIRECT_BUDGET  # given back


def test_files_past_the_budget_are_written_buffered(tmp_path, monkeypatch):
    """A process's direct buffers take at most the budget: a file opened past it is written
    buffered, and a closed file gives its buffer back."""
    if not _direct_writes(tmp_path):
        pytest.skip("no O_DIRECT writes on this filesystem")
    monkeypatch.setitem(streaming_file._BUDGET, "left", streaming_file._DIRECT_STAGE)
    first = StreamingFile(str(tmp_path / "first"))
    second = StreamingFile(str(tmp_path / "second"))
    assert first._direct and not second._direct
    for f in (first, second):
        f.write(b"z" * 5000)
        f.close()
    assert streaming_file._BUDGET["left"] == streaming_file._DIRECT_STAGE
    third = StreamingFile(str(tmp_path / "third"))
    assert third._direct
    third.close()
    assert (tmp_path / "first").read_bytes() == (tmp_path / "second").read_bytes() == b"z" * 5000
