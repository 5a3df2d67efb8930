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
* a file it writes (its patterns, its marker) is a symbolic link in a local output folder
  (`check_links`): the run would write into the link's target, another file of the user's.
An output folder beside the inputs, inside an input folder or holding one, is otherwise fine.
"""

from __future__ import annotations

import os
import re

from sampler.errors import UserError
from sampler.io import files as io_files
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


def check_links(output_dir: str, patterns: list[str], flag: str) -> None:
    """UserError when a name directly in the local `output_dir` that the run writes (full match
    of one of `patterns`) is a symbolic link. sampler.io.files and the output lock also open
    what they write without following links; this refuses before anything is written."""
    top = output_dir or "."
    if has_scheme(output_dir) or not os.path.isdir(top):
        return
    match = matcher(patterns)
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        if match.fullmatch(name) and os.path.islink(path):
            raise link_refusal(flag, output_dir, path)
