"""Flag checks every CLI shares: unknown flags, and the ranges of counts and seeds.

* `parse(parser, argv)`: this CLI's flags, and the rest for Beam's PipelineOptions. A flag that
  neither the CLI nor any of Beam's option classes defines (a typo such as `--nu_shards 3`) is a
  UserError naming it and the closest known flag: Beam's options would drop it silently, and
  the run would go on with the default. Beam and Dataflow options (`--project`, `--region`,
  `--temp_location`, `--direct_num_workers`, `--experiments`, ...) pass through unchanged.
* `check_range(flag, value, low, high)`: one line stating the valid range. Every count flag has
  an upper bound too: a count past it would only exhaust memory or write empty files.
* `check_bounds(args, BOUNDS)`: every flag of a table of ranges that `args` has. `SAMPLE_BOUNDS`
  holds the flags `sample` and `estimate` share (estimate predicts a sample run: the same
  values pass), `PARTITION_BOUNDS` partition's.
* `check_runner(name)`: --runner is a runner this project or Beam can make (Beam would only
  say so when the pipeline runs, in a traceback); a typo names the close match.
* `check_runner_flags(...)` (through `parse(..., rules)`): the pass-through values Beam
  checks only when it runs (--direct_num_workers), and every flag the chosen runner would
  ignore: `--runner InMemory` runs no Beam pipeline (every Beam flag, and the CLI's
  Beam-only flags in `rules.in_memory_ignores`), the Beam runners ignore
  `rules.beam_ignores`, and Dataflow ignores the local runner's options (--direct_*).
* `check_graph_name(name)`: a partition folder's `<graph_name>.json` must not pass for a
  partition or clash with the folder's other files.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import math
import re
import sys

from sampler.errors import UserError

SEED_MAX = 2**64 - 1  # seeds are 64-bit (sampler.ids hashes them as uint64)
# Output shards are named -SSSSS-of-NNNNN (five digits); more shards than this only write empty
# files (each shard is one open file while the run writes).
MAX_OUTPUT_SHARDS = 10_000
MAX_NODE_SHARDS = 65_536  # sample --num_shards / --num_buckets: keys of the grouping stages


def check_range(flag: str, value, low=None, high=None) -> None:
    """UserError `FLAG VALUE: must be ...` unless low <= value <= high (either may be None);
    a float must also be finite."""
    if isinstance(value, float) and not math.isfinite(value):
        raise UserError(f"{flag} {value}: must be a finite number{_range(low, high)}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise UserError(f"{flag} {value}: must be{_range(low, high)}")


def check_positive(flag: str, value: float) -> None:
    """UserError unless `value` is a finite number > 0 (a size or a budget)."""
    if (isinstance(value, float) and not math.isfinite(value)) or value <= 0:
        raise UserError(f"{flag} {value}: must be a finite number > 0")


@dataclasses.dataclass(frozen=True)
class Bound:
    """The valid values of one flag: low <= value <= high (None: open), or any finite number
    > 0 (`positive`: a size or a budget)."""

    low: float | None = None
    high: float | None = None
    positive: bool = False


# Each negative is a whole subgraph: more than this per seed is not a training set.
MAX_NEGATIVES = 1_000
# estimate --probe_seeds: each is sampled for real, in one process.
MAX_PROBE_SEEDS = 1_000_000

# The flags of `sample`; `estimate` predicts a sample run and checks the ones it shares.
SAMPLE_BOUNDS = {
    "seed": Bound(0, SEED_MAX),
    "num_shards": Bound(1, MAX_NODE_SHARDS),
    "num_buckets": Bound(1, MAX_NODE_SHARDS),
    "negatives_per_seed": Bound(0, MAX_NEGATIVES),
    "max_bad_records": Bound(0),
    "worker_memory_mb": Bound(positive=True),
    "sampling_threads": Bound(0, 1024),
    "progress_interval": Bound(0.0),
}
ESTIMATE_BOUNDS = {
    **SAMPLE_BOUNDS,
    "probe_seeds": Bound(0, MAX_PROBE_SEEDS),
    "target_minutes": Bound(positive=True),
}

# partition: the layout tables hold num_parts x num_shards counts per node and edge type,
# every HALO hop and label propagation round is a stage.
MAX_PARTS = 4_096
MAX_PARTITION_SHARDS = 1_024
MAX_HOPS = 16
MAX_ROUNDS = 100
PARTITION_BOUNDS = {
    "num_parts": Bound(1, MAX_PARTS),
    "num_hops": Bound(1, MAX_HOPS),
    "seed": Bound(0, SEED_MAX),
    "num_shards": Bound(1, MAX_PARTITION_SHARDS),
    "lp_rounds": Bound(0, MAX_ROUNDS),
    "lp_cluster_rounds": Bound(0, MAX_ROUNDS),
    "metis_max_adjacency": Bound(0),
    "memory_mb": Bound(positive=True),
    "max_bad_records": Bound(0),
}


def check_bounds(args, bounds: dict[str, Bound]) -> None:
    """One line for the first flag of `bounds` whose value in `args` (an object whose
    attributes are the flags' dests) is out of its range; flags `args` lacks, and None
    values (not given, no default), are skipped."""
    for dest, bound in bounds.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if bound.positive:
            check_positive(f"--{dest}", value)
        else:
            check_range(f"--{dest}", value, bound.low, bound.high)


def _range(low, high) -> str:
    def fmt(x):
        return f"{x:,}" if isinstance(x, int) else f"{x:g}"

    if low is not None and high is not None:
        return f" between {fmt(low)} and {fmt(high)}"
    if low is not None:
        return f" >= {fmt(low)}"
    if high is not None:
        return f" <= {fmt(high)}"
    return ""


def _beam_parser() -> argparse.ArgumentParser:
    """Every flag of Beam's option classes, as PipelineOptions.get_all_options collects them."""
    from apache_beam.options import pipeline_options as po

    class Parser(po._BeamArgumentParser):  # noqa: SLF001 - Beam's own option parser
        def error(self, message):
            raise UserError(message)

    parser = Parser(allow_abbrev=False, add_help=False)
    seen = set()
    for cls in po.PipelineOptions.__subclasses__():
        if str(cls) in seen:
            continue
        seen.add(str(cls))
        try:
            cls._add_argparse_args(parser)  # noqa: SLF001
        except argparse.ArgumentError:  # a flag two classes define: Beam keeps the first
            continue
    return parser


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    return [s for action in parser._actions for s in action.option_strings]  # noqa: SLF001


def check_unknown(parser: argparse.ArgumentParser, beam_args: list[str]) -> None:
    """UserError naming the first argument that neither `parser` nor Beam knows (Beam's option
    classes are imported only when there is something left to check)."""
    if not beam_args:
        return
    beam = _beam_parser()
    unknown = beam.parse_known_args(list(beam_args))[1]
    if not unknown:
        return
    flags = [a for a in unknown if a.startswith("-") and a not in ("-", "--")]
    if not flags:
        raise UserError(f"unexpected argument '{unknown[0]}' (flags take the form --name value)")
    name = flags[0].split("=", 1)[0]
    known = sorted({*option_strings(parser), *option_strings(beam)} - {"-h", "--help"})
    close = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {close[0]}?" if close else f"; see {parser.prog} --help"
    raise UserError(f"unknown flag {name}{hint}")


def parse(
    parser: argparse.ArgumentParser, argv, rules: RunnerRules | None = None
) -> tuple[argparse.Namespace, list[str]]:
    """(this CLI's flags, the rest: Beam's PipelineOptions); an unknown flag is a UserError,
    and so (with `rules`: a CLI with --runner) is a flag the runner would ignore."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args, beam_args = parser.parse_known_args(argv)
    check_unknown(parser, beam_args)
    if rules is not None:
        check_runner_flags(parser, argv, args.runner, beam_args, rules)
    return args, beam_args


# ------------------------------------------------------------------------------- runners

IN_MEMORY = "InMemory"  # pipelines.sample_in_memory / partition_in_memory: no Beam
# --runner values that run on this machine through pipelines.runtime.local_runner (Beam's FnApiRunner).
LOCAL_RUNNERS = {None, "", "DirectRunner", "direct", "FnApiRunner"}
# --direct_num_workers: 0 is one per CPU; more workers than this only thrash a machine.
MAX_LOCAL_WORKERS = 256
# Options of the local runner (Beam's DirectOptions): a remote runner ignores them.
LOCAL_RUNNER_OPTIONS = ("--direct_num_workers", "--direct_running_mode",
                        "--direct_runner_bundle_repeat", "--no_direct_runner_use_stacked_bundle",
                        "--direct_embed_docker_python", "--direct_test_splits")  # fmt: skip


def check_runner(name: str | None) -> None:
    """UserError unless --runner `name` is InMemory, the local runner, a runner Beam knows
    by name (as Beam's create_runner looks it up: any case, `Runner` optional) or an
    importable `module.Class`. Beam itself says so only when the pipeline runs."""
    if name in LOCAL_RUNNERS or name == IN_MEMORY:
        return
    if "." in name:
        module, _, cls = name.rpartition(".")
        try:
            getattr(importlib.import_module(module), cls)
        except (ImportError, AttributeError) as e:
            raise UserError(f"--runner {name}: cannot import this runner class ({e})") from None
        return
    from apache_beam.options.pipeline_options import StandardOptions
    from apache_beam.runners.runner import _RUNNER_MAP  # noqa: PLC2701 - Beam's own table

    lower = name.lower()
    if lower in _RUNNER_MAP or lower + "runner" in _RUNNER_MAP:
        return
    known = {n.lower(): n for n in [IN_MEMORY, *StandardOptions.KNOWN_RUNNER_NAMES]}
    close = difflib.get_close_matches(lower, list(known), n=1)
    hint = (
        f"; did you mean {known[close[0]]}?"
        if close
        else " (use InMemory, DirectRunner (the default), DataflowRunner, or another Beam runner)"
    )
    raise UserError(f"--runner {name}: no such runner{hint}")


@dataclasses.dataclass(frozen=True)
class RunnerRules:
    """A CLI's flags (argparse dests) that one kind of runner ignores."""

    in_memory_ignores: tuple[str, ...] = ()  # Beam-only flags of the CLI
    beam_ignores: tuple[str, ...] = ()  # InMemory-only flags of the CLI


def given_dests(parser: argparse.ArgumentParser, argv) -> list[str]:
    """The dests of the CLI flags that `argv` sets, as argparse parses them (abbreviations
    included); a flag left at its default is not set."""
    actions = parser._actions  # noqa: SLF001
    saved = [action.default for action in actions]
    try:
        for action in actions:
            action.default = argparse.SUPPRESS
        namespace = parser.parse_known_args(argv)[0]
    finally:
        for action, default in zip(actions, saved, strict=True):
            action.default = default
    return list(vars(namespace))


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def check_runner_flags(
    parser: argparse.ArgumentParser, argv, runner: str | None, beam_args, rules: RunnerRules
) -> None:
    """The runner, the values Beam checks only when it runs, and every flag the runner would
    ignore: one line each (see the module docstring)."""
    check_runner(runner)
    beam_flags = [a for a in beam_args if a.startswith("--")]
    if runner == IN_MEMORY:
        if beam_flags:
            raise UserError(
                f"--runner InMemory runs no Beam pipeline: it would ignore the Beam option "
                f"{_flag_name(beam_flags[0])}; leave it out"
            )
        ignored = [d for d in given_dests(parser, argv) if d in rules.in_memory_ignores]
        if ignored:
            raise UserError(
                f"--runner InMemory would ignore --{ignored[0]} (it sets up the Beam "
                "pipeline); leave it out"
            )
        return
    ignored = [d for d in given_dests(parser, argv) if d in rules.beam_ignores]
    if ignored:
        raise UserError(
            f"--{ignored[0]} is an option of --runner InMemory; the Beam runner would ignore "
            "it: leave it out, or add --runner InMemory"
        )
    if beam_flags:
        _check_beam_values(runner, beam_args)


_REMOTE = re.compile(r"dataflow", re.IGNORECASE)


def _check_beam_values(runner: str | None, beam_args) -> None:
    """--direct_num_workers in range (Beam fails with a traceback, or starts 100,000
    threads, only when it runs); the local runner's options on Dataflow (ignored there)."""
    names = [_flag_name(a) for a in beam_args if a.startswith("--")]
    local = [n for n in names if n in LOCAL_RUNNER_OPTIONS]
    if runner and _REMOTE.search(runner) and local:
        raise UserError(
            f"--runner {runner} would ignore {local[0]} (an option of the local runner); "
            "leave it out"
        )
    values = _beam_parser().parse_known_args(list(beam_args))[0]
    if "--direct_num_workers" in names:
        workers = values.direct_num_workers
        if not 0 <= workers <= MAX_LOCAL_WORKERS:
            raise UserError(
                f"--direct_num_workers {workers}: must be between 0 (one per CPU) and "
                f"{MAX_LOCAL_WORKERS}"
            )
    if "--direct_runner_bundle_repeat" in names:
        check_range("--direct_runner_bundle_repeat", values.direct_runner_bundle_repeat, 0)


# ------------------------------------------------------------------------ partition names

# GraphStorm takes every entry of a partition folder whose name starts with "part" for a
# partition (sampler/partition/report.py); these names are the folder's other files.
RESERVED_GRAPH_NAMES = ("cut_report", "run_summary", "partition_report")
_GRAPH_NAME = re.compile(r"^[A-Za-z0-9_]+$")


def check_graph_name(name: str) -> None:
    """`<name>.json` beside part<i>/: DGL's characters, and nothing the folder already uses
    (the same rule for every --layout: a DGL folder may be loaded by GraphStorm too)."""
    if not _GRAPH_NAME.match(name):
        raise UserError(f"--graph_name '{name}': use only letters, digits and underscores")
    if name.startswith("part"):
        raise UserError(
            f"--graph_name '{name}': must not start with 'part' (GraphStorm takes every entry"
            f" of the folder named part* for a partition, so {name}.json would be one)"
        )
    if name in RESERVED_GRAPH_NAMES:
        raise UserError(
            f"--graph_name '{name}': {name}.json is a file the partition folder already has;"
            " choose another name"
        )
