"""File names of Unigraph tables: resolving, expanding shard patterns and globs, guessing formats.

Paths with a scheme (`gs://`, `s3://`, ...) go through Beam's `FileSystems`. This is the one
kernel module that touches Beam, and it imports it lazily, only for such a path: local paths
are handled here with `os` and `open`, as Beam's LocalFileSystem handles them (the same glob
rules, `.gz`/`.bz2`/`.xz` names decompressed), so a local run never loads apache_beam.

A table file name may be
  * a plain path (`nodes.csv`),
  * a glob (`nodes-*.parquet`), or
  * a TF-GNN/Beam shard pattern `base@N`, meaning the N files
    `base-00000-of-0000N` ... `base-0000(N-1)-of-0000N` (5 digits each), all of which must exist.
"""

from __future__ import annotations

import bz2
import contextlib
import errno
import gzip
import io
import lzma
import os
import re
import shutil

from sampler.errors import UserError
from sampler.io import gcs
from sampler.io.no_follow import open_new  # noqa: F401 - files.open_new for its callers

FORMATS = ("csv", "tfrecord", "parquet")

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://")
_SHARD_PATTERN = re.compile(r"^(?P<base>.+)@(?P<count>\d+)$")
_SHARD_SUFFIX = re.compile(r"-(\d{5,}|\*|\?+)-of-(\d{5,}|\*|\?+)$")
_FORMAT_ALIASES = {
    "csv": "csv",
    "tfrecord": "tfrecord",
    "tfrecords": "tfrecord",
    "tfr": "tfrecord",
    "parquet": "parquet",
    "pq": "parquet",
}
_EXTENSIONS = {
    ".csv": "csv",
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfr": "tfrecord",
    ".parquet": "parquet",
    ".pq": "parquet",
}


def _filesystems():
    """Beam's FileSystems, imported on first use (apache_beam is heavy and kernels avoid it)."""
    from apache_beam.io.filesystems import FileSystems

    gcs.prepare()  # an emulator's anonymous access, bounded retries (before a GCS client)
    return FileSystems


def has_scheme(path: str) -> bool:
    """True for URLs such as `gs://bucket/x` (anything `scheme://...`)."""
    return bool(_SCHEME.match(path))


# --------------------------------------------------------------------------- local paths
# What Beam's LocalFileSystem does, without importing Beam.

_DECOMPRESS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open, ".lzma": lzma.open}
_BEAM_ONLY_SUFFIXES = (".deflate", ".zst", ".zstd")


def _translate(pattern: str) -> str:
    """A glob as a regular expression, as Beam's FileSystem.translate_pattern: `*` does not
    cross `/`, `**` does, `?` is any character, `[...]` a class."""
    i, n, out = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                out += ".*"
                i += 1
            else:
                out += r"[^/\\]*"
        elif c == "?":
            out += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                out += f"[{stuff}]"
        else:
            out += re.escape(c)
    return r"(?ms)" + out + r"\Z"


def _local_match(pattern: str) -> list[tuple[str, int, float]]:
    """(path, size, mtime) of what Beam's FileSystems.match lists for a local pattern: the
    path itself (file or folder) when it has no glob character, else the files below the
    folder of the part before the first glob character whose path matches it."""
    if pattern.endswith(("/", "\\")):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)
    if prefix == pattern:
        if not os.path.exists(pattern):
            return []
        return [(pattern, os.path.getsize(pattern), os.path.getmtime(pattern))]
    root = os.path.dirname(prefix)
    if not os.path.exists(root):
        return []
    matches = re.compile(_translate(pattern)).match
    found = []
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if matches(path):
                try:
                    found.append((path, os.path.getsize(path), os.path.getmtime(path)))
                except OSError:  # removed while listing
                    pass
    return found


def _local_open(path: str):
    opener = _DECOMPRESS.get(os.path.splitext(path)[1].lower())
    return opener(path, "rb") if opener else open(path, "rb")  # noqa: SIM115 - returned


def _local_create(path: str):
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    return open_new(path)


def _native(path: str) -> bool:
    """Whether this module handles `path` itself (local, and no compression only Beam reads)."""
    return not has_scheme(path) and not path.lower().endswith(_BEAM_ONLY_SUFFIXES)


def resolve_pattern(filename: str, schema_dir: str) -> str:
    """Resolves a table file name from a schema against the schema's directory.

    Absolute paths and URLs with a scheme are returned unchanged; relative names are joined to
    `schema_dir` (which may itself be a `gs://` URL).
    """
    if not filename:
        raise UserError("empty table file name in the schema")
    if has_scheme(filename) or os.path.isabs(filename) or not schema_dir:
        return filename
    return join(schema_dir, filename)


def join(base: str, name: str) -> str:
    """`base/name` for a local directory or a URL such as gs://bucket/dir."""
    if not has_scheme(base):
        return os.path.join(base, name)
    return _filesystems().join(base, name)


def match(pattern: str) -> list[str]:
    """Paths matching a glob (files and directories as the filesystem lists them), unsorted."""
    if not has_scheme(pattern):
        return [path for path, _, _ in _local_match(pattern)]
    with gcs.failures_named(pattern):
        return [m.path for m in _filesystems().match([pattern])[0].metadata_list]


def shard_name(base: str, index: int, count: int) -> str:
    """The name of shard `index` of `count`: `base-0000i-of-0000N`."""
    return f"{base}-{index:05d}-of-{count:05d}"


def _is_local_dir(path: str) -> bool:
    return not has_scheme(path) and os.path.isdir(path)


def _match_one(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of the files matching a glob or plain path; directories are skipped."""
    try:
        if has_scheme(pattern):
            listed = [
                (m.path, int(m.size_in_bytes))
                for m in _filesystems().match([pattern])[0].metadata_list
            ]
        else:
            listed = [(path, size) for path, size, _ in _local_match(pattern)]
    except Exception as e:  # Beam raises BeamIOError and friends; report one line.
        raise UserError(f"cannot list table files '{pattern}': {_reason(pattern, e)}") from e
    return [(path, size) for path, size in listed if not _is_local_dir(path)]


def expand_files(pattern: str, allow_empty: bool = False) -> list[str]:
    """The sorted list of files named by a plain path, a glob or a `base@N` shard pattern.

    Raises UserError if a shard of `base@N` is missing, if nothing matches, or (unless
    `allow_empty`: e.g. a finished output with no record) if every matching file is empty.
    """
    shards = _SHARD_PATTERN.match(pattern)
    if shards:
        base, count = shards.group("base"), int(shards.group("count"))
        if count < 1:
            raise UserError(
                f"table files '{pattern}': the shard count after '@' must be at least 1"
            )
        found = []
        # On gs:// and friends one listing of every shard (a match per name costs a few
        # requests each); locally a check per name.
        listed = dict(_match_one(f"{base}-*-of-{count:05d}")) if has_scheme(base) else None
        for index in range(count):
            name = shard_name(base, index, count)
            if listed is not None:
                match = [(name, listed[name])] if name in listed else []
            else:
                match = _match_one(name)
            if not match:
                raise UserError(f"table files '{pattern}': shard '{name}' does not exist")
            found.append(match[0])
    else:
        found = _match_one(pattern)
        if not found:
            raise UserError(f"table files '{pattern}': no file matches")
    if not allow_empty and all(size == 0 for _, size in found):
        raise UserError(f"table files '{pattern}': all matching files are empty (0 bytes)")
    return sorted(path for path, _ in found)


def file_size(path: str) -> int:
    """Size in bytes of one existing file (any Beam filesystem)."""
    found = _match_one(path)
    if not found:
        raise UserError(f"table file '{path}' does not exist")
    return found[0][1]


def guess_format(path: str, override: str | None = None) -> str:
    """'csv', 'tfrecord' or 'parquet' for a table file name (or pattern), or `override` if given.

    Looks at the extension after stripping `@N` and a shard suffix such as `-00000-of-00004`;
    any name containing 'tfrecord' is TFRecord.
    """
    if override:
        fmt = _FORMAT_ALIASES.get(override.strip().lower())
        if fmt is None:
            raise UserError(
                f"unknown table format '{override}' for '{path}'; use one of {', '.join(FORMATS)}"
            )
        return fmt
    name = path.rstrip("/")
    name = name.rsplit("/", 1)[-1]
    shards = _SHARD_PATTERN.match(name)
    if shards:
        name = shards.group("base")
    name = _SHARD_SUFFIX.sub("", name)
    name = name.rstrip("*?-_")
    lower = name.lower()
    for extension, fmt in _EXTENSIONS.items():
        if lower.endswith(extension):
            return fmt
    if "tfrecord" in lower:
        return "tfrecord"
    raise UserError(
        f"cannot tell the format of table file '{path}' from its name; "
        "name it .csv, .tfrecord or .parquet (or .tfrecords, .tfr, .pq)"
    )


def check_format(fmt: str) -> str:
    """Normalizes a format name ('tfrecords' -> 'tfrecord'), raising UserError if unknown."""
    normal = _FORMAT_ALIASES.get(str(fmt).strip().lower())
    if normal is None:
        raise UserError(f"unknown table format '{fmt}'; use one of {', '.join(FORMATS)}")
    return normal


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _reason(path: str, error: BaseException) -> str:
    """Why a call on `path` failed, in a few words: on gs:// what the server answered, or
    'cannot reach SERVER: CAUSE (retried ...)' (sampler.io.gcs), else the first line."""
    reason = gcs.failure_reason(error, path) if has_scheme(path) else None
    return reason or _first_line(error)


def open_stream(path: str):
    """Like open_file, but Beam's own errors (OSError subclasses) pass through unchanged; a
    GCS failure is one line (UserError) naming the path and the cause."""
    if _native(path):
        return _local_open(path)
    gcs.check_object_name(path)
    with gcs.failures_named(path, "cannot open: "):
        stream = _filesystems().open(path)
    return gcs.named_stream(stream, path, "read")


def open_file(path: str):
    """A binary read stream of `path` (local, gs://, ...); `.gz`/`.bz2` names are decompressed."""
    try:
        return open_stream(path)
    except UserError:
        raise
    except Exception as e:  # Beam wraps OSError in BeamIOError; report one line.
        raise UserError(f"{path}: cannot open: {_reason(path, e)}") from e


def create_file(path: str):
    """A binary write stream creating `path` (local, gs://, ...), written as is (uncompressed)."""
    try:
        return _create(path)
    except UserError:
        raise
    except Exception as e:  # Beam wraps OSError in BeamIOError; report one line.
        raise UserError(f"{path}: cannot create: {_reason(path, e)}") from e


def create_stream(path: str):
    """create_file for a long output written front to back (sample shards): a local file is a
    sampler.io.streaming_file.StreamingFile, handed to the disk as it is written and not kept in
    the page cache."""
    if has_scheme(path):
        return create_file(path)
    from sampler.io.streaming_file import StreamingFile

    try:
        folder = os.path.dirname(path)
        if folder:
            os.makedirs(folder, exist_ok=True)
        return StreamingFile(path)
    except Exception as e:  # noqa: BLE001 - one line, as create_file
        raise UserError(f"{path}: cannot create: {_reason(path, e)}") from e


def _create(path: str):
    if not has_scheme(path):
        return _local_create(path)
    gcs.check_object_name(path)
    stream = _filesystems().create(path, compression_type="uncompressed")
    return gcs.named_stream(stream, path, "write")


def partial_name(path: str) -> str:
    """Where `path` is written before it is complete: `.NAME.partial-PID` beside it (a folder
    listing never shows a half-written file under its final name; PARTIAL_PATTERN)."""
    folder, name = os.path.split(path)
    return os.path.join(folder, f".{name}.partial-{os.getpid()}")


# The names partial_name gives, relative to the output folder (an output's owned files).
PARTIAL_PATTERN = r"(?:[^/]+/)*\.[^/]+\.partial-\d+"


@contextlib.contextmanager
def write_output(path: str):
    """`with write_output(path) as f:` a binary write stream creating `path`, like create_file;
    an OS error while creating, writing or closing it (a full disk: ENOSPC) becomes one line
    naming the path (write_error). A local file is written under partial_name(path) and
    renamed to `path` once closed: a run that is killed leaves no half-written file under
    its final name (an object store shows an object only once it is closed)."""
    target = path if has_scheme(path) else partial_name(path)
    try:
        stream = _create(target)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - OSError locally, BeamIOError (an OSError) remotely
        raise write_error(path, e) from e
    try:
        with stream as f:
            yield _PythonWrites(f) if isinstance(f, io.BufferedWriter) else f
        if target != path:
            os.replace(target, path)
    except OSError as e:
        raise write_error(path, e) from e
    finally:
        if target != path and os.path.exists(target):
            with contextlib.suppress(OSError):
                os.remove(target)


def rename(source: str, target: str) -> None:
    """Moves a finished file to its final name (local: atomic; an object store: copy, delete)."""
    if not has_scheme(source) and not has_scheme(target):
        os.replace(source, target)
        return
    with gcs.failures_named(target, "cannot write: "):
        _filesystems().rename([source], [target])


class _PythonWrites:
    """A local output stream whose every write goes through Python's io, which reports the
    OS's reason for a failed write (ENOSPC: no space left on device).

    Writers in C that take a real file (numpy.save's ndarray.tofile) write through stdio and
    report a full disk as `N requested and M written`, without errno; handed this stream, they
    write through its write() instead (numpy: in 16 MiB chunks).
    """

    def __init__(self, stream):
        self._stream = stream

    def write(self, data) -> int:
        return self._stream.write(data)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def write_error(path: str, error: BaseException) -> UserError:
    """'cannot write the output PATH: REASON'; a full disk reads 'no space left on device'."""
    reason = gcs.failure_reason(error, path) if has_scheme(path) else None
    if reason:
        return UserError(f"cannot write the output {path}: {reason}")
    return UserError(f"cannot write the output {path}: {os_reason(error)}")


def os_reason(error: BaseException) -> str:
    """The first OS error's reason in `error`'s chain (Beam wraps them), else its first line;
    a full disk (ENOSPC) reads 'no space left on device'."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno == errno.ENOSPC:
            return "no space left on device"
        if isinstance(seen, OSError) and seen.strerror:
            return seen.strerror
        seen = seen.__cause__ or seen.__context__
    return _first_line(error)


def stat_files(paths: list[str]) -> list[tuple[str, int, float | None]]:
    """(path, size in bytes, modification time or None) of existing files (one listing call)."""
    if not paths:
        return []
    if not any(has_scheme(path) for path in paths):
        return [found for path in paths for found in _local_match(path)]
    try:
        results = _filesystems().match(list(paths))
    except Exception as e:  # Beam raises BeamIOError and friends; report one line.
        raise UserError(f"cannot list files '{paths[0]}'...: {_reason(paths[0], e)}") from e
    out = []
    for result in results:
        for metadata in result.metadata_list:
            mtime = getattr(metadata, "last_updated_in_seconds", None)
            out.append((metadata.path, int(metadata.size_in_bytes), mtime))
    return out


def exists(path: str) -> bool:
    """True if `path` (local, gs://, ...) exists."""
    if not has_scheme(path):
        return os.path.exists(path)
    gcs.check_object_name(path)
    with gcs.failures_named(path):
        return _filesystems().exists(path)


def delete(paths: list[str]) -> None:
    """Deletes files and folders (recursively), local or gs://...; OSError if one fails."""
    remote = [path for path in paths if has_scheme(path)]
    if remote:
        with gcs.failures_named(remote[0], "cannot delete: "):
            _filesystems().delete(remote)
    for path in paths:
        if has_scheme(path):
            continue
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def write_text(path: str, text: str) -> None:
    """Writes UTF-8 text to a local path (parent directories created) or a URL such as gs://."""
    if has_scheme(path):
        with create_file(path) as f:
            f.write(text.encode("utf-8"))
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open_new(path, "w") as f:
        f.write(text)
