"""Chunks of seeds sampled and encoded on a process's cores, in order (no Beam).

The unit of work of the sampling runners: one chunk of seeds (in its kernel's order and chunk
size) is sampled into a SubgraphChunk and encoded into its tf.Example records in one job. A
job depends on its seeds only (every draw is a pure function of the seed, op, sample and node:
sampler.sample.randomness), so jobs run side by side on threads and come back in the order of
the chunks: the same records, in the same order, for any number of threads. The kernels run
without the GIL (sampler/jit.py) as do numpy's gathers and sorts, so threads share the cores.

Each job has its own counters and its own CPU clock (`time.thread_time`), which the caller
adds up in chunk order: a run's counters and stage times do not depend on the threads either
(but for the CPU that two threads spend competing for the caches).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Generic, TypeVar

from sampler.io.framed import FileOffsets, FrameBuffers, FramedRecords
from sampler.sample.encode_chunk import encode_chunk
from sampler.sample.encode_framed import encode_framed
from sampler.sample.subgraph import SubgraphChunk
from sampler.threads import ordered_map

K = TypeVar("K")
S = TypeVar("S")

# The seeds of one job, and its counters, to its SubgraphChunk.
SampleChunk = Callable[[S, collections.Counter], SubgraphChunk]


@dataclasses.dataclass
class EncodedChunk(Generic[K]):
    """One job's output: the caller's key (a bucket), the subgraphs' records in order (each
    one's bytes, or all of them in TFRecord framing: `framed` of encoded_chunks), the
    kernel's counters, and the job's thread CPU and wall seconds per stage."""

    key: K
    subgraphs: int
    records: list[bytes] | FramedRecords
    counters: collections.Counter
    cpu: dict[str, float]
    wall: dict[str, float]


def encoded_chunks(
    jobs: Iterable[tuple[K, S]],
    sample: SampleChunk,
    specs,
    threads: int = 1,
    measure: Callable[[SubgraphChunk, collections.Counter], None] | None = None,
    framed: FrameBuffers | None = None,
    file_of: Callable[[K], Hashable] | None = None,
) -> Iterator[EncodedChunk[K]]:
    """EncodedChunk of each (key, seeds) of `jobs`, in order, on `threads` threads (1: on
    the calling thread). `measure(chunk, counters)` runs on the job's thread before the
    chunk is encoded (e.g. to count its nodes and edges). With `framed`, each chunk's
    records come in TFRecord framing, in a buffer of that pool (sampler.sample.encode_framed),
    which goes back to it when written (sampler.io.streaming_file.write_records), placed for
    the file `file_of(key)` names (None: one file for all), which gets the chunks in order."""
    offsets = FileOffsets(file_of) if framed is not None else None

    def job(numbered: tuple[int, tuple[K, S]]) -> EncodedChunk[K]:
        index, (key, seeds) = numbered
        counters: collections.Counter = collections.Counter()
        wall, cpu = time.perf_counter(), time.thread_time()
        chunk = sample(seeds, counters)
        if measure is not None:
            measure(chunk, counters)
        wall_sampled, cpu_sampled = time.perf_counter(), time.thread_time()
        if offsets is not None:
            records = encode_framed(chunk, specs, framed, functools.partial(offsets.place, index))
        else:
            records = encode_chunk(chunk, specs)
        return EncodedChunk(
            key,
            len(chunk),
            records,
            counters,
            {"sample": cpu_sampled - cpu, "encode": time.thread_time() - cpu_sampled},
            {"sample": wall_sampled - wall, "encode": time.perf_counter() - wall_sampled},
        )

    numbered = offsets.expecting(jobs) if offsets is not None else enumerate(jobs)
    return ordered_map(job, numbered, threads)


def seed_chunks(seeds, order, chunk_size: int) -> Iterator:
    """The chunks of `seeds` a kernel samples one by one: `order` (the kernel's order of the
    seeds) cut every `chunk_size`."""
    for lo in range(0, len(order), chunk_size):
        yield seeds.take(order[lo : lo + chunk_size])
