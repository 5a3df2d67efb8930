"""A chunk's records encoded straight into their TFRecord framing, in one buffer.

`encode_framed(chunk, specs, buffers, start)` gives the bytes that
`sampler.io.tfrecord.frame(encode_chunk(chunk, specs))` gives, written where they are
encoded: the kernels of sampler/sample/encode_jit.py write the records (laid out by
sampler/sample/encode_chunk.py) group by group into one buffer, leaving 12 bytes before
each and 4 after, and each group's framing (lengths and CRC32C checksums,
sampler.io.framed.put_frames) is written right after the group, while its bytes are still
in the CPU's caches. The buffer comes from a FrameBuffers pool and goes back to it when the
writer has written it (FramedRecords.release), so its pages are not faulted in again; the
frames start ALIGN bytes in, plus where the chunk starts in its file modulo ALIGN where that
is known (`start`), for the file's direct writes (sampler.io.framed).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from sampler.io.framed import ALIGN, FRAMING, FrameBuffers, FramedRecords, put_frames
from sampler.sample.encode import EncodeSpecs
from sampler.sample.encode_chunk import _kernels, layout
from sampler.sample.subgraph import SubgraphChunk

# Records are written, then framed, in groups of about this many bytes (mostly still in the
# CPU's caches). Not much smaller: each group is a return from the kernel, which takes the GIL
# back, and with threads sampling beside it every such return can wait for the GIL (measured
# at ogbn-mag's size on a loaded 2-core VM: 512 kB groups made the run's wall 40% longer).
GROUP_BYTES = 1 << 23


def encode_framed(
    chunk: SubgraphChunk,
    specs: EncodeSpecs,
    buffers: FrameBuffers | None = None,
    start: Callable[[int], int | None] | None = None,
) -> FramedRecords:
    """The records of `chunk` (encode_chunk's) in TFRecord framing, in a buffer of `buffers`
    (or a new one); `start(size)`: where in its file the chunk of `size` bytes starts, or
    None where not known. A ValueError naming the set and feature for a chunk that cannot be
    written."""
    n = len(chunk)
    if n == 0:
        if start is not None:
            start(0)  # (the chunks after it in its file are placed all the same)
        return FramedRecords(np.zeros(0, np.uint8), 0, 0, 0)
    plan = layout(chunk, specs)
    frames = np.zeros(n + 1, np.int64)  # where each record's framing starts, then the end
    np.cumsum(plan.sizes + FRAMING, out=frames[1:])
    size = int(frames[-1])
    offset = start(size) if start is not None else None
    at = ALIGN + (offset % ALIGN if offset is not None else 0)
    frames += at
    starts = frames + 12  # each record's data
    need = int(frames[-1]) + _kernels().SLACK  # bytes to spare after the last (encode_jit)
    buffer = buffers.take(need) if buffers is not None else np.empty(need, np.uint8)
    data_at, sizes, ends = starts.tolist(), plan.sizes.tolist(), frames.tolist()
    first = 0
    while first < n:
        last = int(np.searchsorted(frames, ends[first] + GROUP_BYTES, "right")) - 1
        last = max(first + 1, min(last, n))
        plan.write_records(buffer, 0, first, last, starts)
        put_frames(buffer, data_at[first:last], sizes[first:last])
        first = last
    return FramedRecords(buffer, at, size, n, buffers)
