"""sampler.sample.encode_framed: a chunk's records written in their TFRecord framing where they
are encoded, against sampler.io.tfrecord.frame of encode_chunk's records (its own framing,
independent): records written and framed in groups smaller than one record, of a few and of
many, at every offset of the buffer, from the pool's buffers reused; and the pool."""

from __future__ import annotations

import io
import threading

import numpy as np
import pytest

from sampler.io import tfrecord
from sampler.io.framed import ALIGN, FrameBuffers
from sampler.io.streaming_file import write_records
from sampler.sample import encode_framed as framed
from sampler.sample.chunk_stream import encoded_chunks
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.subgraph import SubgraphChunk
from tests.test_encode_compiled import _chunk, _specs


@pytest.mark.parametrize("group_bytes", [1, 500, 30_000, framed.GROUP_BYTES])
@pytest.mark.parametrize("start", [None, 0, 1, 4095, 4096 * 7 + 12])
def test_framed_records_are_the_records_framed(monkeypatch, group_bytes, start):
    """Groups of less than one record (20 kB rows: every record is larger than 500 bytes),
    of a few and of every record; the frames at the start's offset in an aligned block."""
    monkeypatch.setattr(framed, "GROUP_BYTES", group_bytes)
    chunk = _chunk(np.random.default_rng(group_bytes), 30, 4, True)
    specs = _specs()
    sizes = []
    got = framed.encode_framed(chunk, specs, None, None if start is None else sizes.append)
    if start is not None:  # (sizes.append answers None: asked once, with the chunk's size)
        assert sizes == [len(got.data)]
        got = framed.encode_framed(chunk, specs, None, lambda size: start)
    want = tfrecord.frame(encode_chunk(chunk, specs))
    assert len(got) == 30
    assert bytes(got.data) == want
    assert got.at == ALIGN + (start or 0) % ALIGN


def test_buffers_come_back_and_are_written_over():
    """Chunks encoded into the pool's buffers, each released once written: the buffer is
    taken again and the next chunk's bytes are right (nothing of the last one is left)."""
    pool, specs = FrameBuffers(1), _specs()
    chunks = [_chunk(np.random.default_rng(seed), n, 4, seed % 2 == 0) for seed, n in
              enumerate([12, 30, 5, 30])]  # fmt: skip
    taken = []
    for chunk in chunks:
        got = framed.encode_framed(chunk, specs, pool, lambda size: 9)
        taken.append(got.buffer)
        assert bytes(got.data) == tfrecord.frame(encode_chunk(chunk, specs))
        got.release()
        assert got.data is None and got.buffer is None
    assert taken[2] is taken[1]  # (the third fits in the second's buffer)
    assert all(b.ctypes.data % ALIGN == 0 for b in taken)


def test_no_subgraphs():
    empty = SubgraphChunk(np.array([], object), np.array([], object), {}, {})
    sizes = []
    got = framed.encode_framed(empty, _specs(), FrameBuffers(1), sizes.append)
    assert len(got) == 0 and bytes(got.data) == b""
    assert sizes == [0]  # told: the chunks after it in its file are placed
    got.release()


def test_chunks_that_cannot_be_written_are_value_errors():
    chunk = _chunk(np.random.default_rng(5), 6, 3, True)
    chunk.node_rows["paper"].batch.features.pop("f32")
    with pytest.raises(ValueError, match="node set 'paper': feature 'f32' is missing"):
        framed.encode_framed(chunk, _specs(), FrameBuffers(1))


def test_pool_keeps_at_most_keep():
    pool = FrameBuffers(2)
    buffers = [pool.take(100) for _ in range(3)]
    assert all(len(b) >= 100 and b.ctypes.data % ALIGN == 0 for b in buffers)
    for b in buffers:
        pool.give(b)
    assert pool.take(10) is buffers[1] and pool.take(10) is buffers[0]
    bigger = pool.take(5000)  # none kept: a new one
    assert len(bigger) >= 5000 and not any(bigger is b for b in buffers)


class _Counted(FrameBuffers):
    """A pool that counts the buffers taken and not given back, and their most."""

    def __init__(self, keep: int):
        super().__init__(keep)
        self.out = self.most = 0
        self._count = threading.Lock()

    def take(self, size):
        with self._count:
            self.out += 1
            self.most = max(self.most, self.out)
        return super().take(size)

    def give(self, buffer):
        with self._count:
            self.out -= 1
        super().give(buffer)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_encoded_chunks_framed_in_order_in_few_buffers(threads):
    """chunk_stream.encoded_chunks with a pool: the chunks' framed records in job order, each
    written and given back before the next is taken, no more buffers out at once than chunks
    in flight (threads + 1 ahead of the writer; one on the calling thread), which the pool
    keeps."""
    specs = _specs()
    chunks = [_chunk(np.random.default_rng(seed), 10, 3, True) for seed in range(3)] * 3
    keep = FrameBuffers.for_threads(threads)._keep
    pool = _Counted(keep)
    out = io.BytesIO()
    done = encoded_chunks(
        ((i, chunk) for i, chunk in enumerate(chunks)), lambda c, _: c, specs, threads,
        framed=pool,
    )  # fmt: skip
    for index, encoded in enumerate(done):
        assert encoded.key == index and len(encoded.records) == 10
        write_records(out, encoded.records)
    assert out.getvalue() == b"".join(tfrecord.frame(encode_chunk(c, specs)) for c in chunks)
    assert pool.out == 0 and pool.most <= keep == (threads + 1 if threads > 1 else 1)
