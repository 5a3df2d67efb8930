"""The output files of the inspection tools (estimate's --json and --stats_cache, show --png, the
files in stats' --output_dir), checked before the tool writes anything, as a run's outputs are
(pipelines.outputs.input_checks): a tool never writes over one of its own inputs, through a
symbolic link, or into a FIFO, a socket, a device or a directory at the output's name."""

from __future__ import annotations

import os
import stat

from pipelines.outputs.input_checks import canonical
from sampler.errors import UserError
from sampler.io import no_follow
from sampler.io.files import has_scheme


def _where(path: str) -> str:
    """`path` as input_checks.canonical names an input file, without following a link at
    its own name (a link there is refused by itself)."""
    folder, name = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(folder), name)


def _same_file(path: str, inputs: list[str]) -> str | None:
    """The input that `path` is (same name, or the same file under another name), or None."""
    where = _where(path)
    try:
        found = os.stat(path)
    except OSError:
        found = None
    for name in inputs:
        if has_scheme(name):
            continue
        if canonical(name) == where:
            return name
        if found is not None:
            try:
                other = os.stat(name)
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (found.st_dev, found.st_ino):
                return name
    return None


def check(flag: str, value: str, path: str, inputs: list[str]) -> None:
    """UserError when the local output file `path` (named by `flag value`) is one of the tool's
    input files `inputs`, or is a symbolic link, or something else than a regular file is at
    its name. A path with a scheme (gs://...) is checked against the inputs by name only."""
    if has_scheme(path):
        hit = next((i for i in inputs if i.rstrip("/") == path.rstrip("/")), None)
    else:
        hit = _same_file(path, inputs)
    if hit is not None:
        raise UserError(
            f"{flag} {value}: the tool would replace its input {hit}; write the output"
            " somewhere else"
        )
    if has_scheme(path):
        return
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return
    if stat.S_ISLNK(mode):
        raise UserError(
            f"{flag} {value}: {path} is a symbolic link; the tool writes nothing through a link"
            " (remove it, or write the output somewhere else)"
        )
    if not no_follow.allowed(mode, devices=True):  # /dev/null takes an output as a file does
        raise UserError(
            f"{flag} {value}: {path} is {no_follow.describe(mode)}, not a regular file (remove"
            " it, or write the output somewhere else)"
        )
