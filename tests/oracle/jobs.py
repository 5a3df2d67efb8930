"""The job loop both DGL oracle scripts share: `python <oracle>.py jobs.json`.

jobs.json is a list of jobs; each is run by the oracle's `run(job, base)`, where `base` is the
folder of jobs.json (the jobs' files are relative to it). Prints one JSON line of versions.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable


def run_jobs(run: Callable[[dict, str], None], versions: dict[str, str]) -> None:
    jobs_path = sys.argv[1]
    with open(jobs_path) as f:
        jobs = json.load(f)
    base = os.path.dirname(os.path.abspath(jobs_path))
    for job in jobs:
        run(job, base)
    print(json.dumps({**versions, "jobs": len(jobs)}))
