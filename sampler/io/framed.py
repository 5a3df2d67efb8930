"""Records already in TFRecord framing (sampler.io.tfrecord.frame's bytes), in one buffer.

The chunk encoder can write a chunk's records framed, one after the other, into one buffer
(sampler.sample.encode_framed): each record's checksums are computed right after it is
written, while its bytes are still in the CPU's caches, and the writer hands the whole
chunk to its file in one write (sampler.io.streaming_file.write_records). The buffers come
from a `FrameBuffers` pool, page-aligned, and go back to it once written, so their pages are
not faulted in (and zeroed by the kernel) again for every chunk.

A file written with O_DIRECT (sampler.io.streaming_file) takes its blocks from memory
aligned as they are in the file. Where a chunk knows, when it is encoded, where in its file
it will start (`FileOffsets`: the chunks before it in that file are laid out), its frames
start at that offset modulo ALIGN in a buffer with ALIGN bytes of headroom, and the file
writes its blocks straight from the buffer instead of copying every byte into its own
(StreamingFile.write_placed). Where it does not know, the bytes are the same, copied.
"""

from __future__ import annotations

import collections
import struct
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator

import google_crc32c  # installed with apache-beam[gcp]
import numpy as np

from sampler.io.tfrecord import _masked

_HEADER = struct.Struct("<QI")  # the length, the masked CRC32C of its 8 bytes
_CRC = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
FRAMING = 16  # bytes of framing per record: 12 before its data, 4 after
ALIGN = 4096  # as sampler.io.streaming_file's O_DIRECT blocks; the headroom of each buffer


class FrameBuffers:
    """A pool of page-aligned uint8 buffers that threads take and give back; it keeps at
    most `keep`."""

    def __init__(self, keep: int):
        self._free: list[np.ndarray] = []
        self._keep = keep
        self._lock = threading.Lock()

    @classmethod
    def for_threads(cls, threads: int) -> FrameBuffers:
        """As many as chunks are in flight on `threads` threads (sampler.threads.ordered_map:
        threads + 1 ahead of the writer, which gives each back before the next is started;
        one on the calling thread)."""
        return cls(threads + 1 if threads > 1 else 1)

    def take(self, size: int) -> np.ndarray:
        """A buffer of at least `size` bytes (a kept one, else a new one an eighth larger:
        the next chunks, a little larger, fit in it)."""
        with self._lock:
            buffer = self._free.pop() if self._free else None
        if buffer is None or len(buffer) < size:
            size += size // 8
            raw = np.empty(size + ALIGN, np.uint8)
            skip = -raw.ctypes.data % ALIGN
            buffer = raw[skip : skip + size]
        return buffer

    def give(self, buffer: np.ndarray) -> None:
        with self._lock:
            if len(self._free) < self._keep:
                self._free.append(buffer)


class FramedRecords:
    """`count` records in TFRecord framing: the `size` bytes of `buffer` from `at` (`data`,
    a view of them); buffer[at - ALIGN:at] is free for the writer when at >= ALIGN. Once
    written, `release()` gives the buffer back to its pool (data must not be used then)."""

    __slots__ = ("data", "count", "buffer", "at", "_pool")

    def __init__(self, buffer, at: int, size: int, count: int, pool: FrameBuffers | None = None):
        self.buffer, self.at, self.count, self._pool = buffer, at, count, pool
        self.data = memoryview(buffer)[at : at + size]

    def __len__(self) -> int:
        return self.count

    def release(self) -> None:
        buffer, pool, self.buffer, self.data = self.buffer, self._pool, None, None
        if buffer is not None and pool is not None:
            pool.give(buffer)


class FileOffsets:
    """Where each chunk starts in its file, for chunks numbered in the order they are
    written, each to the file `file_of(key)` names (None: all to one file), every file
    starting empty: a chunk's offset is known once every chunk before it in its file has
    told its size (`place`), which does not wait for them."""

    def __init__(self, file_of: Callable[[object], Hashable] | None = None):
        self._file_of = file_of
        self._lock = threading.Lock()
        self._pending: dict[Hashable, collections.deque] = {}  # [size, start] not yet known
        self._end: dict[Hashable, int] = {}  # bytes of a file's chunks laid out so far
        self._chunks: dict[int, tuple[Hashable, list]] = {}

    def expecting(self, jobs: Iterable[tuple]) -> Iterator[tuple[int, tuple]]:
        """(index, job) of each (key, ...) of `jobs`, each registered for its file as it is
        taken (in the writer's order)."""
        for index, job in enumerate(jobs):
            file = self._file_of(job[0]) if self._file_of is not None else None
            entry = [None, None]
            with self._lock:
                self._pending.setdefault(file, collections.deque()).append(entry)
                self._chunks[index] = (file, entry)
            yield index, job

    def place(self, index: int, size: int) -> int | None:
        """Chunk `index` is `size` bytes: where it starts in its file, if known by now."""
        with self._lock:
            file, entry = self._chunks.pop(index)
            entry[0] = size
            pending, end = self._pending[file], self._end.get(file, 0)
            while pending and pending[0][0] is not None:
                done = pending.popleft()
                done[1], end = end, end + done[0]
            self._end[file] = end
            return entry[1]


def put_frames(out: np.ndarray, starts: list[int], sizes: list[int]) -> None:
    """The framing of the records out[starts[i]:starts[i] + sizes[i]] (uint8 array `out`):
    their length and its checksum in the 12 bytes before each, the data's checksum in the 4
    after."""
    value, masked = google_crc32c.value, _masked
    pack_length, put_header, put_crc = _LENGTH.pack, _HEADER.pack_into, _CRC.pack_into
    for at, size in zip(starts, sizes, strict=True):
        put_header(out, at - 12, size, masked(value(pack_length(size))))
        put_crc(out, at + size, masked(value(out[at : at + size])))
