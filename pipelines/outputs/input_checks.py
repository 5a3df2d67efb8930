"""The input check of a run's output: refuse what could replace or re-read an input, and
nothing else (pipelines.reporting.accounting.check_output calls it before anything is written).

A run is refused when
* a file it writes or may delete (its patterns, the earlier run's manifest) is one of its
  input files (`check_replaced`): e.g. a schema given as out/schema.pbtxt, or an output named
  like the seeds table;
* an input file lies in a folder the run owns (part<i>/, node_ids/, .temp-samples-*/ ...,
  `owned_folders`), whose files it writes and deletes (`check_owned_folders`);
* an input pattern (a table glob, `base@N`, the seeds) would match a file the run writes
  (`check_re_read`): this run or the next would read its own output as input;
* a file it writes (its patterns, its marker) is a symbolic link in a local output folder, or a
  folder it writes into is one (`check_links`): the run would write into the link's target,
  another file of the user's; or that name holds a FIFO, a socket, a device or a directory:
  the run would wait on it, or fail once its records are written.
An output folder beside the inputs, inside an input folder or holding one, is otherwise fine.
"""

from __future__ import annotations

import os
import re
import stat

from sampler.errors import UserError
from sampler.io import files as io_files
from sampler.io import no_follow
from sampler.io.files import has_scheme

_SHARDS = re.compile(r"(?P<base>.+)@(?P<count>\d+)")


def canonical(path: str) -> str:
    if has_scheme(path):
        return path.rstrip("/")
    return os.path.realpath(os.path.abspath(path or "."))


def relative(path: str, folder: str) -> str | None:
    """`path` relative to `folder` (both canonical) when inside it, else None."""
    base = folder.rstrip("/") + "/"
    return path[len(base) :] if path.startswith(base) else None


def _first_component(pattern: str) -> str | None:
    """The part of a path regular expression before its first `/` outside a class, or None;
    also None when that `/` is inside a group (`(?:[^/]+/)*NAME`: a file at any depth names
    no folder of its own)."""
    in_class = False
    groups = 0
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            groups += 1
        elif c == ")":
            groups -= 1
        elif c == "/":
            return pattern[:i] if groups == 0 else None
        i += 1
    return None


def owned_folders(patterns: list[str]) -> re.Pattern:
    """The folders (directly in the output folder) that hold files of `patterns`: every folder
    a run writes, derived from the patterns of its files (never a list kept beside them)."""
    heads = sorted({h for h in map(_first_component, patterns) if h})
    return re.compile("|".join(f"(?:{h})" for h in heads) or r"(?!)")


def matcher(patterns: list[str]) -> re.Pattern:
    return re.compile("|".join(f"(?:{p})" for p in patterns) or r"(?!)")


def check_replaced(
    output_dir: str, patterns: list[str], listed: set[str], files: list[str], flag: str
) -> None:
    """UserError when a file the run writes or deletes (`patterns`, the earlier manifest's
    `listed` files) is one of its input `files` (canonical paths)."""
    base = canonical(output_dir)
    match = matcher(patterns)
    for path in files:
        rel = relative(path, base)
        if rel is not None and (rel in listed or match.fullmatch(rel)):
            raise UserError(
                f"{flag} {output_dir or '.'}: the run would replace its input {path}; write the output"
                " somewhere else"
            )


def check_owned_folders(output_dir: str, patterns: list[str], files: list[str], flag: str) -> None:
    """UserError when an input file lies in a folder of the output the run owns."""
    base = canonical(output_dir)
    folders = owned_folders(patterns)
    for path in files:
        rel = relative(path, base)
        if rel is not None and "/" in rel and folders.fullmatch(rel.split("/", 1)[0]):
            folder = rel.split("/", 1)[0]
            raise UserError(
                f"{flag} {output_dir or '.'}: the input {path} lies in {folder}/, a folder the run"
                " writes; write the output somewhere else"
            )


def _glob_regex(pattern: str) -> re.Pattern:
    """An input pattern (plain path, glob, `base@N`) as a regular expression of canonical
    paths: its folder before the first glob character is resolved as a path is."""
    shards = _SHARDS.fullmatch(pattern)
    if shards:
        count = int(shards.group("count"))
        pattern = f"{shards.group('base')}-[0-9][0-9][0-9][0-9][0-9]-of-{count:05d}"
    if not has_scheme(pattern):
        pattern = os.path.abspath(pattern)
        fixed = re.match(r"^[^[*?]*", pattern).group(0)
        head = fixed.rsplit("/", 1)[0] if "/" in fixed else ""
        if head:
            pattern = os.path.realpath(head) + pattern[len(head) :]
    return re.compile(io_files._translate(pattern))  # Beam's glob rules (sampler.io.files)


def check_re_read(output_dir: str, examples: list[str], inputs: list[str], flag: str) -> None:
    """UserError when an input pattern matches one of `examples`: names (relative to the
    output folder) of the files the run writes, one per kind."""
    base = canonical(output_dir)
    paths = [f"{base.rstrip('/')}/{name}" for name in examples]
    for pattern in inputs:
        regex = _glob_regex(pattern)
        hit = next((p for p in paths if regex.match(p)), None)
        if hit is not None:
            raise UserError(
                f"{flag} {output_dir or '.'}: the input {pattern} would read the output {hit} as"
                " input; write the output somewhere else, or name the input files more narrowly"
            )


def link_refusal(flag: str, output_dir: str, path: str) -> UserError:
    return UserError(
        f"{flag} {output_dir or '.'}: {path} is a symbolic link; the run writes nothing through a"
        " link (remove it, or write the output somewhere else)"
    )


def kind_refusal(flag: str, output_dir: str, path: str, mode: int) -> UserError:
    return UserError(
        f"{flag} {output_dir or '.'}: {path} is {no_follow.describe(mode)}, not a regular file;"
        " the run writes only regular files there (remove it, or write the output somewhere"
        " else)"
    )


def _is_folder_name(match: re.Pattern, rel: str) -> bool:
    """Whether the run's patterns put files under `rel` (a folder of the run, not a file)."""
    return bool(match.fullmatch(rel + "/\x00"))


def _check_entry(flag: str, output_dir: str, path: str, rel: str, match, in_owned: bool) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:  # removed meanwhile
        return
    if stat.S_ISLNK(mode):
        # A name the run writes, or a folder inside one of its folders: the run would write
        # into the link's target.
        if match.fullmatch(rel) or (in_owned and os.path.isdir(path)):
            raise link_refusal(flag, output_dir, path)
    elif not no_follow.allowed(mode, devices=True) and match.fullmatch(rel):
        if not _is_folder_name(match, rel):
            raise kind_refusal(flag, output_dir, path, mode)


def check_links(output_dir: str, patterns: list[str], flag: str) -> None:
    """UserError, before anything is written, when a name in the local `output_dir` that the run
    writes (a full match of one of `patterns`, directly in it or in a folder it owns) is a
    symbolic link, or is something else than a regular file (a FIFO, a socket, a device, a
    directory: the run would block on it, or fail once its records are written); and when a
    folder the run writes into (owned_folders, and any folder inside one) is a symbolic link.
    sampler.io.files and the output lock also open what they write without following links
    and refuse what is not a regular file (sampler.io.no_follow); this refuses first."""
    top = output_dir or "."
    if has_scheme(output_dir) or not os.path.isdir(top):
        return
    match = matcher(patterns)
    folders = owned_folders(patterns)
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        owned = bool(folders.fullmatch(name))
        _check_entry(flag, output_dir, path, name, match, owned)
        if not owned or os.path.islink(path) or not os.path.isdir(path):
            continue
        for folder, dirs, names in os.walk(path):  # never into a link
            for entry in sorted([*dirs, *names]):
                inner = os.path.join(folder, entry)
                rel = os.path.relpath(inner, top).replace(os.sep, "/")
                _check_entry(flag, output_dir, inner, rel, match, True)
