"""Local files the project writes beside a user's data, opened without following a symbolic
link: a link planted under an output's name must not make a run write into another file.

They are regular files or nothing: a named pipe (FIFO), a socket, a block device or a folder at
such a name is refused in one line (`not_regular`); so is a character device, except as a
written output (`devices`: /dev/null or /dev/full take writes as a file does). The open never
blocks on one: it is made with O_NONBLOCK (a FIFO opens at once, or fails with ENXIO when
nobody reads it), and what was opened is checked with fstat, so a file swapped in after an
earlier check is refused too.
"""

from __future__ import annotations

import errno
import os
import stat

from sampler.errors import UserError


def describe(mode: int) -> str:
    """What a file of `mode` is, in a few words ('a named pipe (FIFO)')."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    return "not a regular file"


def not_regular(path: str, mode: int) -> UserError:
    return UserError(
        f"{path} is {describe(mode)}, not a regular file; nothing is read or written there"
        " (remove it, or write the output somewhere else)"
    )


def link_refusal(path: str) -> UserError:
    return UserError(
        f"{path} is a symbolic link; nothing is written through a link (remove it, or"
        " write the output somewhere else)"
    )


def allowed(mode: int, devices: bool = False) -> bool:
    """Whether a file of `mode` may be opened: a regular file (or, with `devices`, a
    character device such as /dev/null)."""
    return stat.S_ISREG(mode) or (devices and stat.S_ISCHR(mode))


def check_kind(path: str, follow: bool = True, devices: bool = False) -> None:
    """UserError when something that is not a regular file is at `path` (a link too, unless
    `follow`; a character device is fine with `devices`); nothing there is fine."""
    try:
        mode = (os.stat if follow else os.lstat)(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISLNK(mode):
        raise link_refusal(path)
    if not allowed(mode, devices):
        raise not_regular(path, mode)


def open_regular(
    path: str, flags: int, mode: int = 0o644, follow: bool = True, devices: bool = False
) -> int:
    """os.open(path, flags, mode) of a regular file, or a UserError naming what is there
    instead; never blocks on a FIFO or a device. Without `follow`, a link at `path` is a
    UserError too (O_NOFOLLOW); with `devices`, a character device is opened as a file is."""
    check_kind(path, follow, devices)  # before the open: a block device is not even opened
    flags |= os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno == errno.ELOOP and not follow:
            raise link_refusal(path) from e
        if e.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV, errno.EOPNOTSUPP):
            check_kind(path, follow, devices)  # swapped in since the check: named
        raise
    try:
        found = os.fstat(fd).st_mode
        if not allowed(found, devices):
            raise not_regular(path, found)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_new(path: str, mode: str = "wb", buffering: int = -1):
    """A local file opened for writing ("wb" or "w": UTF-8 text), created or truncated, never
    through a symbolic link: a link at `path` is a UserError naming it (what the project
    writes beside a user's data must not land in another file of theirs), and so is anything
    else that is not a regular file or a character device (open_regular)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
    fd = open_regular(path, flags, 0o644, follow=False, devices=True)
    encoding = "utf-8" if "b" not in mode else None
    return open(fd, mode, buffering=buffering, encoding=encoding)  # noqa: SIM115


def read_regular(path: str) -> bytes:
    """The bytes of the local regular file `path` (a file the project wrote beside a user's
    data: a manifest, a cache); a FIFO, a device or a folder there is a UserError naming it,
    never a read that waits. FileNotFoundError when there is nothing."""
    with open(open_regular(path, os.O_RDONLY), "rb") as f:
        return f.read()
