"""The project's numeric environment settings (BEAM_GRAPH_*_S), read in one way.

A setting is a number of seconds. Unset or empty, it takes its default; anything else that is
not a finite number in its range (`abc`, `nan`, `inf`, `-1`) is a user mistake, refused in one
line that names the setting and what it accepts (a UserError). The CLIs check every setting
when a run starts (`check_all`, pipelines.runtime.runner.run_main), so that a worker process
never meets a bad one in the middle of a run.
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

from sampler.errors import UserError


class Seconds(NamedTuple):
    default: float
    zero: bool  # whether 0 is accepted
    means: str  # what the number sets, for the line


COMPILE_WAIT_S = "BEAM_GRAPH_COMPILE_WAIT_S"
GCS_RETRY_S = "BEAM_GRAPH_GCS_RETRY_S"
SETTINGS = {
    COMPILE_WAIT_S: Seconds(120.0, True, "how long a run waits for the kernel compile lock"),
    GCS_RETRY_S: Seconds(30.0, False, "how long an outage of Google Cloud is retried"),
}


def seconds(name: str) -> float:
    """The value of the setting `name` (a key of SETTINGS): its default when unset or empty."""
    spec = SETTINGS[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return spec.default
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and (value > 0 or (spec.zero and value == 0)):
        return value
    least = "0 or more" if spec.zero else "more than 0"
    raise UserError(
        f"{name}={os.environ[name]!r}: expected a number of seconds, {least} ({spec.means};"
        f" unset or empty: {spec.default:g})"
    )


def check_all() -> None:
    """Every setting of SETTINGS that is set is valid (else the UserError of the first)."""
    for name in SETTINGS:
        seconds(name)
