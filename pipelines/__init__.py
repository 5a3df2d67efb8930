"""Beam pipeline entry points (thin CLIs)."""

import os
import signal
import sys

# Run as a program (python -m pipelines.X, or an installed script): a Ctrl-C while the CLI's
# modules still import (seconds: Beam, Arrow) ends in one line and exit 130, not a traceback;
# nothing is written yet. pipelines.runner.run_main takes over once the CLI body runs.
_SCRIPTS = {"-m", "beam-graph", "graph_sampler", "graph_partition"}


def _interrupted_while_starting(signum, frame):
    print("error: interrupted (Ctrl-C); nothing written", file=sys.stderr, flush=True)
    os._exit(130)


if sys.argv and os.path.basename(sys.argv[0]) in _SCRIPTS:
    try:
        signal.signal(signal.SIGINT, _interrupted_while_starting)
    except ValueError:  # not the main thread
        pass

import sampler  # noqa: E402, F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
