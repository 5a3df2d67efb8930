"""The docs stay navigable and true to the CLIs.

- Every relative link of README.md and docs/*.md, and every `docs/...` path they name, exists
  (globs match a file; `#anchor`s match a heading of the target).
- Every command in a code block that starts with `beam-graph` or `python -m pipelines.X`
  (also `.venv/bin/python`, `$ ` prompts in output blocks) parses with its CLI's own argument
  parser, without running anything; flags the CLI leaves to Beam must be Beam options. A code
  block whose opening fence follows a `<!-- illustrative -->` line is exempt (elisions such
  as `...` or `[--flag value]`).
- Every subcommand's --help ends with its guide, and that guide exists.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

from pipelines import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ILLUSTRATIVE = "<!-- illustrative -->"
# Notes that other branches add for the lead to fold into the guides are not guides.
DOCS = ["README.md"] + sorted(
    os.path.relpath(p, ROOT)
    for p in glob.glob(os.path.join(ROOT, "docs", "*.md"))
    if not os.path.basename(p).startswith("notes-issue-")
)
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
DOCS_PATH = re.compile(r"(?<![\w/.$<{-])docs/[\w./*#-]*[\w*]")


def read(path: str) -> str:
    with open(os.path.join(ROOT, path)) as f:
        return f.read()


def blocks(text: str):
    """(fence info, preceding non-blank line, lines) of every fenced code block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            before = next((x for x in reversed(lines[:i]) if x.strip()), "")
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            yield lines[i][3:].strip(), before.strip(), lines[i + 1 : j]
            i = j
        i += 1


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: str) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose(read(path)).split("\n"):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def check_target(target: str, base_dir: str, where: str) -> list[str]:
    """Problems with one link target (relative to base_dir, a folder under ROOT)."""
    path, _, anchor = target.partition("#")
    full = os.path.normpath(os.path.join(ROOT, base_dir, path)) if path else None
    if full is not None:
        matches = glob.glob(full) if "*" in path else ([full] if os.path.exists(full) else [])
        if not matches:
            return [f"{where}: {target} does not exist"]
    if anchor:
        page = os.path.relpath(full, ROOT) if full else where.split(":")[0]
        if page.endswith(".md") and anchor not in anchors(page):
            return [f"{where}: {target}: no heading with anchor #{anchor} in {page}"]
    return []


@pytest.mark.parametrize("doc", DOCS)
def test_links_and_docs_paths_exist(doc):
    text = read(doc)
    problems = []
    for target in LINK.findall(prose(text)):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        problems += check_target(target, os.path.dirname(doc), doc)
    for target in DOCS_PATH.findall(text):
        problems += check_target(target.rstrip("."), "", doc)
    assert not problems, "\n".join(problems)


def test_the_guides_are_linked_from_the_readme():
    readme = read("README.md")
    linked = {os.path.normpath(t.partition("#")[0]) for t in LINK.findall(readme)}
    missing = [d for d in DOCS if d != "README.md" and d not in linked]
    assert not missing, f"README.md links no guide of {missing}"
    assert len(readme.splitlines()) <= 150, "README.md is a landing page: at most ~150 lines"
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert command in readme


def commands(doc: str):
    """(line, words) of every CLI command in the code blocks of `doc` not marked illustrative."""
    for info, before, lines in blocks(read(doc)):
        if before == ILLUSTRATIVE or info not in ("", "bash", "sh", "console"):
            continue
        for line in "\n".join(lines).replace("\\\n", " ").split("\n"):
            shell = info in ("bash", "sh")
            if line.startswith("$ "):
                line, shell = line[2:], True
            if not shell:
                continue  # output lines of a plain block
            try:
                words = shlex.split(line, comments=True)
            except ValueError:
                continue
            if words[:1] == ["beam-graph"] or (words[:1] and words[0].endswith("/beam-graph")):
                yield line, words[1:]
            elif (
                len(words) >= 3
                and re.fullmatch(r"(\S*/)?python3?", words[0])
                and words[1] == "-m"
                and words[2].startswith("pipelines.")
            ):
                yield line, [words[2].split(".", 1)[1], *words[3:]]


def beam_unknown(args: list[str]) -> list[str]:
    """The flags among `args` that no Beam PipelineOptions class defines."""
    from apache_beam.options.pipeline_options import PipelineOptions, _BeamArgumentParser

    parser = _BeamArgumentParser(allow_abbrev=False)
    classes = {}
    for cls in PipelineOptions.__subclasses__():
        classes.setdefault(str(cls), cls)
    for cls in classes.values():
        cls._add_argparse_args(parser)
    return parser.parse_known_args(args)[1]


def parse(name: str, argv: list[str]) -> list[str]:
    """Parses argv with the subcommand's own parser; returns the flags it leaves to Beam."""
    if name == "sample":
        from pipelines import sample_config

        return sample_config.make_parser().parse_known_args(argv)[1]
    if name == "partition":
        from pipelines import partition

        return partition.parse_args(argv)[1]
    if name in ("validate", "estimate", "stats", "show", "generate"):
        module = __import__(f"pipelines.{name}", fromlist=["parse_args"])
        module.parse_args(argv)
        return []
    raise AssertionError(f"no parser to check '{name}' against: mark the block {ILLUSTRATIVE}")


@pytest.mark.parametrize("doc", DOCS)
def test_documented_commands_parse(doc, capsys):
    problems = []
    for line, (name, *argv) in commands(doc):
        if name not in cli.SUBCOMMANDS:
            problems.append(f"{doc}: unknown subcommand '{name}': {line}")
            continue
        try:
            unknown = beam_unknown(parse(name, argv))
        except SystemExit:
            err = capsys.readouterr().err.strip().splitlines()
            problems.append(f"{doc}: {line}\n    {err[-1] if err else 'exit'}")
            continue
        if unknown:
            problems.append(f"{doc}: {line}\n    neither the CLI's nor Beam's flags: {unknown}")
    assert not problems, "\n".join(problems)


def test_commands_are_found():
    """The extraction itself: the README's quickstart and the guides' commands are seen."""
    found = {d: [n for _, (n, *_) in commands(d)] for d in DOCS}
    assert found["README.md"] == ["validate", "estimate", "sample", "stats", "partition"]
    assert "sample" in found["docs/sampling.md"] and "estimate" in found["docs/dataflow.md"]
    assert "partition" in found["docs/benchmarks-history.md"]


def test_a_bad_command_fails_the_check(tmp_path, capsys):
    """What the check must catch: an unknown flag, a missing required flag, a bad value."""
    with pytest.raises(SystemExit):
        parse("validate", ["--graph_schema", "g", "--sampling_spec", "s", "--rowz", "3"])
    with pytest.raises(SystemExit):
        parse("partition", ["--graph_schema", "g", "--output_dir", "o", "--graph_name", "m"])
    with pytest.raises(SystemExit):
        parse("sample", ["--graph_schema", "g", "--sampling_spec", "s", "--output_samples",
                         "o", "--graph_placement", "everywhere"])  # fmt: skip
    rest = parse("sample", ["--graph_schema", "g", "--sampling_spec", "s", "--output_samples",
                            "o", "--num_shardz", "3", "--direct_num_workers=2"])  # fmt: skip
    assert beam_unknown(rest) == ["--num_shardz", "3"]
    capsys.readouterr()


def test_links_are_checked():
    assert check_target("docs/no-such-guide.md", "", "x") != []
    assert check_target("sampling.md#no-such-section", "docs", "x") != []
    assert check_target("sampling.md#placements-and-how-to-choose", "docs", "x") == []
    assert check_target("docs/bench_*.json", "", "x") == []
    assert slug("Serving the partitions with DistDGL: `examples/distdgl_local.py`") == (
        "serving-the-partitions-with-distdgl-examplesdistdgl_localpy"
    )


@pytest.mark.parametrize("name", [n for n in cli.SUBCOMMANDS if n != "demo"])
def test_help_ends_with_the_guide(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([name, "--help"])
    assert e.value.code == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == cli.guide(name)
    for path in re.findall(r"docs/[\w.-]+\.md", last):
        assert os.path.exists(os.path.join(ROOT, path)), path


def test_demo_help_ends_with_its_guide_and_beam_graph_lists_every_subcommand():
    # demo imports TensorFlow: a process of its own.
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-m", "pipelines.cli", "demo", "--help"], cwd=ROOT,
                         env=env, capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.strip().splitlines()[-1] == cli.guide("demo")
    usage = cli.usage().splitlines()
    for name, (_, help_) in cli.SUBCOMMANDS.items():
        assert sum(line.split()[:1] == [name] for line in usage) == 1, name
        assert help_ and "\n" not in help_
    assert set(cli.GUIDES) == set(cli.SUBCOMMANDS)
