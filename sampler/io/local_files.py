"""Local paths without Beam: what Beam's LocalFileSystem does, for the paths it does the same.

sampler/io/files.py sends a path here when it has no scheme (`gs://` and friends go to Beam's
FileSystems) and, when reading, no name that Beam would decompress (.gz, .bz2, ...). The
results are Beam's: the same files matched (its glob syntax: `*` within a folder, `**` across
folders), parent folders created on writing, folders deleted recursively. A run on local
files (the partition stage's --runner InMemory) thus never imports apache_beam.
"""

from __future__ import annotations

import os
import re
import shutil

# Suffixes Beam's CompressionTypes.AUTO decompresses (apache_beam.io.filesystem).
COMPRESSED = (".bz2", ".deflate", ".gz", ".zst", ".zstd", ".xz", ".lzma")


def compressed(path: str) -> bool:
    return path.lower().endswith(COMPRESSED)


def join(base: str, *names: str) -> str:
    return os.path.join(base, *names)


def exists(path: str) -> bool:
    return os.path.exists(path)


def open_read(path: str):
    return open(path, "rb")


def create(path: str):
    """A binary write stream of `path`, its folder created first (as Beam does)."""
    folder = os.path.dirname(path)
    if folder:
        os.makedirs(folder, exist_ok=True)
    return open(path, "wb")


def delete(paths: list[str]) -> None:
    """Removes files, and folders with everything in them; a missing path is an OSError."""
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.remove(path)


def translate_pattern(pattern: str) -> str:
    """Beam's FileSystem.translate_pattern: fnmatch, with `*` = `[^/\\]*` and `**` = `.*`."""
    i, n, res = 0, len(pattern), ""
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if i < n and pattern[i] == "*":
                res += ".*"
                i += 1
            else:
                res += r"[^/\\]*"
        elif c == "?":
            res += "."
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                res += r"\["
            else:
                stuff = pattern[i:j].replace("\\", "\\\\")
                i = j + 1
                if stuff[0] == "!":
                    stuff = "^" + stuff[1:]
                elif stuff[0] == "^":
                    stuff = "\\" + stuff
                res = f"{res}[{stuff}]"
        else:
            res += re.escape(c)
    return r"(?ms)" + res + r"\Z"


def match(pattern: str) -> list[tuple[str, int, float]]:
    """(path, size, modification time) of what Beam's FileSystems.match([pattern]) lists:
    the path itself (a file or a folder) when it has no glob character, else every file
    under the folder of the part before the first one that matches the pattern."""
    if pattern.endswith("/") or pattern.endswith("\\"):
        pattern += "*"
    prefix = re.match(r"^[^[*?]*", pattern).group(0)
    if prefix == pattern:
        if not os.path.exists(pattern):
            return []
        return [(pattern, os.path.getsize(pattern), os.path.getmtime(pattern))]
    folder = os.path.dirname(prefix)
    if not os.path.exists(folder):
        return []
    wanted = re.compile(translate_pattern(pattern)).match
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(dirpath, name)
            if wanted(path):
                try:
                    out.append((path, os.path.getsize(path), os.path.getmtime(path)))
                except OSError:  # gone since the listing (as Beam skips it)
                    pass
    return out
