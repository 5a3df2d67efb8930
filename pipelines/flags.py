"""Flag checks every CLI shares: unknown flags, and the ranges of counts and seeds.

* `parse(parser, argv)`: this CLI's flags, and the rest for Beam's PipelineOptions. A flag that
  neither the CLI nor any of Beam's option classes defines (a typo such as `--nu_shards 3`) is a
  UserError naming it and the closest known flag: Beam's options would drop it silently, and
  the run would go on with the default. Beam and Dataflow options (`--project`, `--region`,
  `--temp_location`, `--direct_num_workers`, `--experiments`, ...) pass through unchanged.
* `check_range(flag, value, low, high)`: one line stating the valid range. Every count flag has
  an upper bound too: a count past it would only exhaust memory or write empty files.
"""

from __future__ import annotations

import argparse
import difflib
import math

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
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag} {value}: must be a finite number > 0")


def check_seed(flag: str, value: int) -> None:
    check_range(flag, value, 0, SEED_MAX)


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


def parse(parser: argparse.ArgumentParser, argv) -> tuple[argparse.Namespace, list[str]]:
    """(this CLI's flags, the rest: Beam's PipelineOptions); an unknown flag is a UserError."""
    args, beam_args = parser.parse_known_args(argv)
    check_unknown(parser, beam_args)
    return args, beam_args
