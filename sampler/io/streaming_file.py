"""A local output file that hands its bytes to the disk as it goes and leaves the page cache.

Writing 10 GB of records through plain buffered writes leaves 10 GB of dirty pages that the
kernel writes back late and in bulk, and it keeps every written page cached afterwards: the
page cache fills, the writer's own writes start reclaiming memory (measured on this project's
2-core VM: 10 GB cost 7.0 CPU-s of write() against 1.0 CPU-s for the first 3 GB), and
everything else on the machine loses its cache to records nobody reads back soon.

`StreamingFile` writes through Python's buffered file in large blocks; every `window` bytes a
helper thread asks the kernel to start writing the window back
(`sync_file_range(SYNC_FILE_RANGE_WRITE)`), waits for the windows before it (already on their
way, so the wait is short) and drops them from the page cache
(`posix_fadvise(POSIX_FADV_DONTNEED)`). The writer itself waits only when the disk falls
`_BACKLOG` windows behind, so a few windows per file are dirty or cached at any time, and
write() errors and the disk's (EIO) are raised by write() or close(). The bytes of the file
are exactly those written. Without `sync_file_range` (not Linux) it is a plain buffered file.

Where the file takes O_DIRECT writes (a regular file on ext4, xfs, ...), the bytes skip the
page cache altogether: they are copied once into the file's aligned buffer, which goes to the
disk whole (`_DIRECT_STAGE` bytes per write): one copy of each byte in this process and none
into the page cache (about half the CPU of buffered writes of sample shards, measured on this
VM; 1 MB writes cost no more than 4 MB ones). The buffers of a process's files take at most
`_DIRECT_BUDGET` bytes (64 files at once); a file opened past that is written buffered. A
chunk of records framed in its own aligned buffer, placed where it falls in the file's blocks
(`write_placed`, sampler.io.framed), is written from that buffer, not copied. The last
partial block, and everything after a `flush`, `fileno` or `copy_from`, goes through
the buffered path above; a filesystem that refuses the first aligned write (EINVAL) gets the
buffered path from the start.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import fcntl
import functools
import mmap
import os
import queue
import stat
import struct
import threading

from sampler.io.no_follow import open_new

WINDOW = 16 << 20  # bytes handed to the disk at once
_DIRECT_BLOCK = 16 << 20  # bytes written at once by concat_files
_ALIGN = 4096  # O_DIRECT: buffer address, file offset and size in multiples of this
_DIRECT = getattr(os, "O_DIRECT", None)
_BUFFER = 1 << 20  # Python's write buffer: small pieces (headers, checksums) join here
_BACKLOG = 4  # windows handed over and not yet written back before the writer waits

_DIRECT_STAGE = 1 << 20  # a file's aligned buffer of direct writes (a multiple of _ALIGN)
_DIRECT_BUDGET = 64 << 20  # bytes of those buffers a process holds at once
_BUDGET = {"left": _DIRECT_BUDGET}
_BUDGET_LOCK = threading.Lock()

# sync_file_range flags (linux/fs.h)
_WAIT_BEFORE, _WRITE, _WAIT_AFTER = 1, 2, 4


@functools.cache
def _sync_file_range():
    """libc's sync_file_range, or None where there is none."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name, use_errno=True) if name else None
    except OSError:
        return None
    function = getattr(libc, "sync_file_range", None) if libc is not None else None
    if function is None or not hasattr(os, "posix_fadvise"):
        return None
    function.argtypes = (ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint)
    function.restype = ctypes.c_int
    return function


class StreamingFile:
    """A binary write stream creating the local file `path` (see the module docstring).

    `with StreamingFile(path) as f: f.write(data)`; `f.written` is the bytes written so far.
    """

    def __init__(self, path: str, window: int = WINDOW):
        if window < 1:
            raise ValueError("window must be at least 1 byte")
        self._file = open_new(path, "wb", _BUFFER)  # never through a link; closed by close()
        self._fd = self._file.fileno()
        self._window = window
        self._sync = _sync_file_range()
        self.written = 0
        self._started = 0  # bytes handed to the write-back thread
        self._dropped = 0  # bytes written back and dropped from the page cache (its thread's)
        self._jobs: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._error: OSError | None = None  # the write-back's error, until raised
        self._failed = False  # whether the write-back met an error (it stops then)
        self._broken = False  # whether a write raised (a full disk): close() then drops the rest
        self._stage: memoryview | None = None  # direct writes: the aligned buffer
        self._stage_map: mmap.mmap | None = None
        self._fill = 0  # bytes in the stage
        self._direct_bytes = 0  # bytes on the file written directly
        self._direct = self._sync is not None and _take_budget() and self._start_direct()

    def _start_direct(self) -> bool:
        if _set_direct(self._fd, True):
            return True
        _give_budget()
        return False

    def write(self, data) -> int:
        self._raise_error()
        if self._direct:
            return self._write_direct(data)
        try:
            count = self._file.write(data)
        except OSError:
            self._broken = True
            raise
        self.written += count
        if self._sync is not None and self.written - self._started >= self._window:
            self._hand_over()
        return count

    def _write_direct(self, data) -> int:
        """`data` copied into the stage; each time it is full, written to the disk whole."""
        stage, fill = self._new_stage(), self._fill
        source = memoryview(data).cast("B")
        count = len(source)
        if fill + count < _DIRECT_STAGE:  # (most pieces: one copy, no loop)
            stage[fill : fill + count] = source
            self._fill = fill + count
            self.written += count
            return count
        at = 0
        while at < count:
            step = min(count - at, _DIRECT_STAGE - fill)
            stage[fill : fill + step] = source[at : at + step]
            fill, at = fill + step, at + step
            if fill == _DIRECT_STAGE:
                if not self._put_blocks(stage):
                    self._fill = 0
                    self._refused([stage, source[at:]])
                    break
                fill = 0
        self._fill = fill if self._direct else 0
        self.written += count
        return count

    def write_placed(self, buffer, at: int, count: int) -> int:
        """Writes buffer[at:at + count] (a writable buffer), whose `_ALIGN` bytes before `at`
        may be written over. Written directly, where buffer[at] lies as many bytes past an
        aligned address as the file's next byte lies past a block: the bytes still in the
        stage go into those before `at`, and the whole blocks to the disk straight from
        `buffer`, not copied into the stage (sampler.io.framed)."""
        view = memoryview(buffer).cast("B")
        data = view[at : at + count]
        tail = self._fill % _ALIGN  # (what stays in the stage once its whole blocks are out)
        if not self._direct or at < _ALIGN or count < _ALIGN or (_address(data) - tail) % _ALIGN:
            return _write_in_pieces(self.write, data)
        self._raise_error()
        stage, fill = self._stage, self._fill
        if fill > tail:
            if not self._put_blocks(stage[: fill - tail]):
                return self._refused_placed([stage[:fill], data], count)
            stage[:tail] = stage[fill - tail : fill]
        start = at - tail
        if tail:
            view[start:at] = stage[:tail]
        blocks = (count + tail) // _ALIGN * _ALIGN
        for step in range(start, start + blocks, _DIRECT_BLOCK):  # (as concat_files writes)
            if not self._put_blocks(view[step : min(step + _DIRECT_BLOCK, start + blocks)]):
                return self._refused_placed([view[start : at + count]], count)  # (the first)
        rest = count + tail - blocks
        self._new_stage()[:rest] = view[start + blocks : at + count]
        self._fill = rest
        self.written += count
        return count

    def _refused_placed(self, rest: list, count: int) -> int:
        self._fill = 0
        self._refused(rest)
        self.written += count
        return count

    def _new_stage(self) -> memoryview:
        """The stage, made when first needed."""
        if self._stage is None:
            self._stage_map = mmap.mmap(-1, _DIRECT_STAGE)  # page-aligned, as O_DIRECT wants
            self._stage = memoryview(self._stage_map)
        return self._stage

    def _refused(self, rest: list) -> None:
        """The filesystem refused the first direct write: `rest` (every byte written so far)
        and all later ones through the buffered file."""
        self._direct = False
        _set_direct(self._fd, False)
        try:
            for part in rest:
                self._file.write(part)
        except OSError:
            self._broken = True
            raise
        finally:
            self._free_stage()

    def _put_blocks(self, blocks: memoryview) -> bool:
        """Writes whole blocks with O_DIRECT; False when the filesystem refused the first."""
        try:
            if not _write_aligned(self._fd, blocks, self._direct_bytes == 0):
                return False
        except OSError:
            self._broken = True
            raise
        self._direct_bytes += len(blocks)
        return True

    def _leave_direct(self) -> None:
        """The stage's whole blocks written directly, the rest and every later byte through
        the buffered file; the stage given back."""
        if not self._direct:
            return
        stage, fill = self._stage, self._fill
        whole = fill - fill % _ALIGN
        if whole and not self._put_blocks(stage[:whole]):
            whole = 0
        self._direct, self._fill = False, 0
        _set_direct(self._fd, False)
        self._started = self._dropped = self._direct_bytes
        try:
            if fill > whole and not self._broken:
                self._file.write(stage[whole:fill])
        except OSError:
            self._broken = True
            raise
        finally:
            self._free_stage()

    def _free_stage(self) -> None:
        self._stage = self._stage_map = None  # (freed with the last view: an error's frames)
        _give_budget()

    def _hand_over(self, last: bool = False) -> None:
        """Hands what was written since the last call to the write-back thread, which starts
        writing it back, then waits for and drops everything before it (the windows handed
        over earlier, most likely on the disk by then). The thread does the waiting, so the
        writer waits only when the disk is `_BACKLOG` windows behind."""
        self.flush()
        if self._thread is None:
            self._jobs = queue.Queue(maxsize=_BACKLOG)
            self._thread = threading.Thread(target=self._write_back, daemon=True)
            self._thread.start()
        self._jobs.put((self._started, self.written, last))
        self._started = self.written

    def _write_back(self) -> None:
        while (job := self._jobs.get()) is not None:
            start, end, last = job
            if self._failed or self._sync is None:
                continue  # drains the queue; the writer raises the error once
            try:
                self._range(start, end - start, _WRITE)
                if start > self._dropped and not last and self._sync is not None:
                    flags = _WAIT_BEFORE | _WRITE | _WAIT_AFTER
                    self._range(self._dropped, start - self._dropped, flags)
                    count = start - self._dropped
                    os.posix_fadvise(self._fd, self._dropped, count, os.POSIX_FADV_DONTNEED)
                    self._dropped = start
            except OSError as e:
                self._error, self._failed = e, True

    def _raise_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def copy_from(self, source, count: int) -> None:
        """Appends `count` bytes of the file object `source` from its position (opened
        unbuffered): copied by the kernel (copy_file_range) a window at a time, or read and
        written where the kernel cannot copy between these files."""
        self._raise_error()
        try:
            self._copy_from(source, count)
        except OSError:
            self._broken = True
            raise

    def _copy_from(self, source, count: int) -> None:
        self._leave_direct()
        self._file.flush()
        left, kernel = count, True
        while left > 0:
            step = min(left, self._window)
            copied = 0
            if kernel:
                try:
                    copied = os.copy_file_range(source.fileno(), self._fd, step)
                except OSError as e:  # another filesystem, or no such call for these files
                    if e.errno not in (errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                kernel = copied > 0
            if not kernel:
                data = source.read(step)
                if not data:
                    raise OSError(errno.EIO, f"{count - left} of {count} bytes, then the end")
                copied = self._file.write(data)
                self._file.flush()
            left -= copied
            self.written += copied
            if self._sync is not None and self.written - self._started >= self._window:
                self._hand_over()

    def _range(self, offset: int, count: int, flags: int) -> None:
        if self._sync(self._fd, offset, count, flags) == 0:
            return
        error = ctypes.get_errno()
        if error in (errno.EINVAL, errno.ESPIPE, errno.ENOSYS):  # not for this file: plain writes
            self._sync = None
            return
        raise OSError(error, os.strerror(error))

    def flush(self) -> None:
        self._leave_direct()
        try:
            self._file.flush()
        except OSError:
            self._broken = True
            raise

    def fileno(self) -> int:
        self._leave_direct()  # (the caller may write to it)
        return self._fd

    @property
    def closed(self) -> bool:
        return self._file.closed

    def close(self) -> None:
        """Flushes and closes; the last windows' write-back is started, not waited for.

        An error is raised once: after a write, flush or close that raised (a full disk), close
        drops what is still buffered and raises nothing more (the file is incomplete, and its
        writer removes it)."""
        if self._file.closed:
            return
        try:
            if not self._broken:
                self.flush()
                if self._sync is not None and self.written > self._started:
                    self._hand_over(last=True)
        finally:
            if self._direct:  # (a write raised: what the stage holds goes nowhere)
                self._direct = False
                self._free_stage()
            if self._thread is not None:
                self._jobs.put(None)
                self._thread.join()
            if self._broken:
                with contextlib.suppress(OSError):  # closes the file, also when its flush fails
                    self._file.close()
            else:
                self._file.close()
        if not self._broken:
            self._raise_error()

    def __enter__(self) -> StreamingFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _take_budget() -> bool:
    with _BUDGET_LOCK:
        if _BUDGET["left"] < _DIRECT_STAGE:
            return False
        _BUDGET["left"] -= _DIRECT_STAGE
        return True


def _give_budget() -> None:
    with _BUDGET_LOCK:
        _BUDGET["left"] += _DIRECT_STAGE


def _set_direct(fd: int, on: bool) -> bool:
    """O_DIRECT on or off for the regular file `fd`; False where it cannot be turned on."""
    if _DIRECT is None or not stat.S_ISREG(os.fstat(fd).st_mode):
        return False
    flags = fcntl.fcntl(fd, fcntl.F_GETFL)
    try:
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | _DIRECT if on else flags & ~_DIRECT)
    except OSError:
        return False
    return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & _DIRECT) == on


def concat_files(target: str, parts: list[str], block: int = _DIRECT_BLOCK) -> None:
    """`target` made of the files `parts`, one after the other. Where the filesystem takes
    O_DIRECT writes, the parts are read (from the page cache, mostly: they were just written)
    into one aligned buffer and written from it straight to the disk: one copy of each byte
    in this process, none into the page cache for `target` (half the CPU of the kernel's
    copy_file_range into cached pages, measured on this VM). Elsewhere: StreamingFile.copy_from."""
    if block % _ALIGN:
        raise ValueError(f"block must be a multiple of {_ALIGN} bytes")
    if _DIRECT is not None:
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | _DIRECT
            fd = os.open(target, flags, 0o644)
        except OSError as e:
            if e.errno == errno.ELOOP:
                open_new(target)  # the one-line refusal of a link
            if e.errno != errno.EINVAL:
                raise
        else:
            try:
                if _concat_direct(fd, target, parts, block):
                    return
            finally:
                os.close(fd)
    with StreamingFile(target) as out:
        for path in parts:
            with open(path, "rb", buffering=0) as f:
                out.copy_from(f, os.fstat(f.fileno()).st_size)


def _concat_direct(fd: int, target: str, parts: list[str], block: int) -> bool:
    """The O_DIRECT copy of concat_files into `fd`; False when the filesystem refused the
    first aligned write (nothing written then)."""
    buffer = mmap.mmap(-1, block)  # page-aligned, as O_DIRECT wants
    view = memoryview(buffer)
    written = filled = 0
    try:
        for path in parts:
            with open(path, "rb", buffering=0) as f:
                while count := f.readinto(view[filled:]):
                    filled += count
                    if filled == block:
                        if not _write_aligned(fd, view, written == 0):
                            return False
                        written += block
                        filled = 0
        if filled:  # the tail, not a whole number of blocks: through the page cache
            with open(target, "r+b") as f:
                f.seek(written)
                f.write(view[:filled])
        return True
    finally:
        view.release()
        buffer.close()


def _write_in_pieces(write, data: memoryview) -> int:
    """`data` (a chunk of records framed a while before) written a quarter of the file's
    `_BUFFER` at a time, each through its buffer: whole chunks of tens of MB in one write()
    each into the page cache cost more CPU (a `worker` run at 200k papers with framed parts:
    25 CPU-s written whole, 18-23 in pieces)."""
    step = _BUFFER // 4
    for at in range(0, len(data), step):
        write(data[at : at + step])
    return len(data)


def _address(view: memoryview) -> int:
    """The address of the first byte of a writable, non-empty view."""
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def _write_aligned(fd: int, view: memoryview, first: bool) -> bool:
    at = 0
    while at < len(view):
        try:
            count = os.write(fd, view[at:])
        except OSError as e:
            if first and at == 0 and e.errno == errno.EINVAL:  # O_DIRECT opened, not written
                return False
            raise
        if count % _ALIGN and at + count < len(view):
            raise OSError(errno.EIO, f"short write of {count} bytes")
        at += count
    return True


def write_records(stream, records) -> int:
    """Writes `records` (bytes-like) to `stream` in TFRecord framing (sampler.io.tfrecord.frame's
    bytes), each record passed as it is, not copied into one joined buffer; returns the bytes
    written. Records framed already (sampler.io.framed.FramedRecords) go in one write, and
    their buffer back to its pool."""
    from sampler.io.framed import FramedRecords
    from sampler.io.tfrecord import masked_crc

    if isinstance(records, FramedRecords):
        total = len(records.data)
        if isinstance(stream, StreamingFile):
            stream.write_placed(records.buffer, records.at, total)
        else:
            _write_in_pieces(stream.write, records.data)
        records.release()  # (written: the stream holds none of it)
        return total
    total = 0
    for record in records:
        length = _LENGTH.pack(len(record))
        stream.write(length + _CRC.pack(masked_crc(length)))
        stream.write(record)
        stream.write(_CRC.pack(masked_crc(record)))
        total += len(record) + 16
    return total


_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
