"""Local files the project writes beside a user's data, opened without following a symbolic
link: a link planted under an output's name must not make a run write into another file."""

from __future__ import annotations

import errno
import os

from sampler.errors import UserError


def open_new(path: str, mode: str = "wb", buffering: int = -1):
    """A local file opened for writing ("wb" or "w": UTF-8 text), created or truncated, never
    through a symbolic link: a link at `path` is a UserError naming it (what the project
    writes beside a user's data must not land in another file of theirs)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UserError(
                f"{path} is a symbolic link; nothing is written through a link (remove it, or"
                " write the output somewhere else)"
            ) from e
        raise
    encoding = "utf-8" if "b" not in mode else None
    return open(fd, mode, buffering=buffering, encoding=encoding)  # noqa: SIM115
