"""Writes batches of serialized records as TFRecord shards, without shuffling the records.

Beam's WriteToTFRecord with a fixed shard count groups every record by shard,
which on the local runner holds the whole output in memory. Here each batch of
records (one per bucket chunk) is streamed to its own part file by the stage
that made it; a shuffle of part *names* then concatenates the parts of each
shard (TFRecord files concatenate into a valid TFRecord file) and deletes them.

Shard i holds the parts of buckets i, i + N, i + 2N, ... in (bucket, chunk)
order, so the files are byte-identical on every run, runner and worker count
for the same flags. A retried bundle rewrites the same part with the same bytes.

The `worker` placement writes a part per bucket itself, where it samples (ShardParts,
`parts_given`): a shard of one part (at least as many shards as buckets) is renamed, not
copied, so its records are written once. A retried bucket writes a new part (its name is
the attempt's); only the successful attempt's reaches the concatenation, and the run's
temporary folder, removed after the run, holds the others.
"""

from __future__ import annotations

import errno
import os
import uuid

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics import Metrics

from sampler.io import gcs, tfrecord
from sampler.io.files import has_scheme, shard_name, write_error
from sampler.io.streaming_file import StreamingFile, concat_files, write_records

NAMESPACE = "sampler"
_COPY_CHUNK = 1 << 24


def _renamed(part: str, final: str) -> bool:
    """Whether the local `part` became `final` by a rename (False: remote, or on another
    filesystem; the caller copies it then)."""
    if has_scheme(part) or has_scheme(final):
        return False
    try:
        os.replace(part, final)
    except FileNotFoundError:
        if os.path.exists(final):  # a retry of a step that renamed it
            return True
        raise
    except OSError as e:
        if e.errno == errno.EXDEV:
            return False
        raise
    return True


def _write_part(path: str, chunks, alone: bool = False, on_records=None) -> None:
    """The record lists `chunks` as one TFRecord part file, in their order. A local part is
    written record by record (no joined copy): `alone` (the shard's only part, renamed into
    place) streamed to the disk, else left in the page cache for the concatenation soon."""
    records = Metrics.counter(NAMESPACE, "records_written")
    try:
        remote = has_scheme(path)
        if remote:
            stream = FileSystems.create(path)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            stream = StreamingFile(path) if alone else open(path, "wb", 1 << 20)
        with stream as f:
            for chunk in chunks:
                if remote:  # one write a chunk: each write is a call into the client
                    f.write(tfrecord.frame(chunk))
                else:
                    write_records(f, chunk)
                records.inc(len(chunk))
                if on_records is not None:
                    on_records(len(chunk))
    except OSError as e:
        raise write_error(path, e) from e


class ShardParts:
    """Writes each bucket's records as one part, where they are sampled, for
    WriteRecordShards (`parts_given`). Where there are at least as many output shards as
    buckets, a bucket is its shard's only one: its part is streamed to the disk and becomes
    the shard by a rename. Otherwise its part stays in the page cache, and each shard's parts
    are concatenated."""

    def __init__(self, temp_dir: str, num_shards: int, on_records=None):
        if num_shards < 1:
            raise ValueError("num_shards must be at least 1")
        self.temp_dir = temp_dir
        self.num_shards = num_shards
        self._on_records = on_records  # a module-level function of each chunk's record count

    def write(self, bucket: int, chunks, alone: bool) -> tuple[int, tuple]:
        """(shard, (bucket, 0, path)) of a new part holding the record lists `chunks` of
        `bucket`, in their order; `alone`: the bucket is its shard's only one."""
        name = f"part-{bucket:06d}-{uuid.uuid4().hex[:8]}"  # one per attempt
        path = FileSystems.join(self.temp_dir, name)
        _write_part(path, chunks, alone, self._on_records)
        return bucket % self.num_shards, (bucket, 0, path)


@beam.typehints.with_output_types(str)
class WriteRecordShards(beam.PTransform):
    """(bucket, chunk, [record bytes]) -> `prefix-SSSSS-of-NNNNN` files, or one file `prefix`.

    With `parts_given`, the input is parts already written (ShardParts.write's
    (shard, (bucket, chunk, path))): a shard made of one local part is renamed, not copied.
    """

    def __init__(
        self,
        prefix: str,
        num_shards: int,
        single_file: bool,
        temp_dir: str,
        parts_given: bool = False,
    ):
        super().__init__()
        if num_shards < 1:
            raise ValueError("num_shards must be at least 1")
        self._prefix = prefix
        self._num_shards = num_shards
        self._single_file = single_file
        self._temp_dir = temp_dir
        self._parts_given = parts_given

    def final_paths(self) -> list[str]:
        if self._single_file:
            return [self._prefix]
        return [shard_name(self._prefix, i, self._num_shards) for i in range(self._num_shards)]

    class _WritePart(beam.DoFn):
        def __init__(self, temp_dir: str, num_shards: int):
            self._temp_dir = temp_dir
            self._num_shards = num_shards

        def process(self, element):
            bucket, chunk, records = element
            path = FileSystems.join(self._temp_dir, f"part-{bucket:06d}-{chunk:06d}")
            _write_part(path, [records])
            yield bucket % self._num_shards, (bucket, chunk, path)

    class _Concat(beam.DoFn):
        def __init__(self, paths: list[str], temp_dir: str):
            self._paths = paths
            self._temp_dir = temp_dir

        def process(self, shard_parts):
            shard, groups = shard_parts
            parts = sorted(groups["parts"])
            # Written in the temporary folder, then renamed: a run that is killed leaves no
            # truncated shard under its final name.
            final = self._paths[shard]
            temp = FileSystems.join(self._temp_dir, "shard-" + final.rsplit("/", 1)[-1])
            try:
                sources = [path for _, _, path in parts]
                if len(sources) == 1 and _renamed(sources[0], final):
                    sources = []  # nothing left to delete
                elif all(not has_scheme(p) for p in [final, temp, *sources]):
                    os.makedirs(os.path.dirname(os.path.abspath(temp)), exist_ok=True)
                    concat_files(temp, sources)  # to the disk as the shard grows, not the cache
                    os.replace(temp, final)
                elif gcs.can_compose(final, sources):  # no bytes through here; whole or none
                    scratch = f"{sources[0].rsplit('/', 1)[0]}/compose-{shard:05d}"  # temp
                    gcs.compose(final, sources, scratch)
                else:
                    with FileSystems.create(temp) as out:
                        for _, _, path in parts:
                            with FileSystems.open(path) as f:
                                while chunk := f.read(_COPY_CHUNK):
                                    out.write(chunk)
                    FileSystems.rename([temp], [final])
            except OSError as e:
                raise write_error(final, e) from e
            if sources:
                FileSystems.delete(sources)
            yield self._paths[shard]

    def expand(self, batches):
        shards = batches.pipeline | "ShardIds" >> beam.Create(
            [(i, None) for i in range(self._num_shards)]
        )
        if self._parts_given:
            parts = batches
        else:
            parts = batches | "Parts" >> beam.ParDo(
                self._WritePart(self._temp_dir, self._num_shards)
            )
        return (
            {"parts": parts, "shard": shards}
            | "GroupParts" >> beam.CoGroupByKey()
            | "Concat" >> beam.ParDo(self._Concat(self.final_paths(), self._temp_dir))
        )
