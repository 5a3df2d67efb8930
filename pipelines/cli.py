"""`beam-graph SUBCOMMAND ...`: one entry point for every pipeline and tool.

Each subcommand is a module of `pipelines` with a `main(argv) -> int`; the
registry below is explicit (no import side effects). `beam-graph sample` is the
same program as `python -m pipelines.sample` and the `graph_sampler` script.
"""

from __future__ import annotations

import importlib
import sys

SUBCOMMANDS = {
    "sample": ("pipelines.sample", "sample subgraphs into GraphTensor tf.Examples"),
    "generate": ("pipelines.generate", "write a synthetic OGBN-MAG-shaped graph"),
    "demo": ("pipelines.demo", "sample the embedded default graph"),
    "validate": ("pipelines.validate", "check schema, spec and tables without sampling"),
    "estimate": ("pipelines.estimate", "predict output sizes and Dataflow workers"),
    "stats": ("pipelines.stats", "summarize samples or a partition folder (JSON + PNG)"),
    "show": ("pipelines.show", "print (and draw) one sampled subgraph"),
    "partition": ("pipelines.partition", "write DGL partitions"),
}

# The guide each subcommand's --help ends with (paths in the repository; tests/test_docs.py).
GUIDES = {
    "sample": "docs/sampling.md",
    "generate": "docs/inputs.md",
    "demo": "docs/sampling.md",
    "validate": "docs/inputs.md",
    "estimate": "docs/sampling.md",
    "stats": "docs/sampling.md (samples), docs/partitioning.md (--partition)",
    "show": "docs/sampling.md",
    "partition": "docs/partitioning.md",
}


def guide(name: str) -> str:
    """The last line of `name`'s --help: where its guide is."""
    return f"Guide: {GUIDES[name]}"


def usage() -> str:
    lines = ["usage: beam-graph SUBCOMMAND [flags]   (SUBCOMMAND --help for its flags)", ""]
    lines += [f"  {name:10s} {help_}" for name, (_, help_) in SUBCOMMANDS.items()]
    lines += ["", "Guides: README.md, then docs/ (one guide per task)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        return _report(lambda: print(usage()) or (0 if argv else 2))
    name, rest = argv[0], argv[1:]
    if name not in SUBCOMMANDS:
        return _report(
            lambda: print(f"error: unknown subcommand '{name}'\n{usage()}", file=sys.stderr) or 2
        )
    module = importlib.import_module(SUBCOMMANDS[name][0])
    return module.main(rest)


def _report(body) -> int:
    """body() -> exit code, its report on streams that may not be writable (run_main)."""
    from pipelines.runtime.runner import run_main

    return run_main(lambda _: body(), [])


if __name__ == "__main__":
    raise SystemExit(main())
