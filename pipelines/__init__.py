"""Beam pipeline entry points (thin CLIs)."""

import os
import signal
import sys

# Run as a program (python -m pipelines.X, or an installed script): a Ctrl-C, SIGTERM or SIGHUP
# while the CLI's modules still import (seconds: Beam, Arrow) ends in one line and exit
# 128 + the signal, not a traceback (or, for SIGTERM and SIGHUP, no line at all); nothing is
# written yet. pipelines.runtime.runner.run_main takes over once the CLI body runs, and hands back
# once it has ended (RUN_ENDED): a signal then ends the exiting process in one line too.
_SCRIPTS = {"-m", "beam-graph", "graph_sampler", "graph_partition"}
_WORDS = {signal.SIGINT: "Ctrl-C", signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}
RUN_ENDED = [False]


def _interrupted_outside_a_run(signum, frame):
    what = _WORDS.get(signum, str(signum))
    if RUN_ENDED[0]:
        line = f"interrupted ({what}) while exiting; the run had ended"
    else:
        line = f"error: interrupted ({what}); nothing written"
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):  # a terminal that hung up
        pass
    os._exit(128 + signum)


AS_PROGRAM = bool(sys.argv) and os.path.basename(sys.argv[0]) in _SCRIPTS
if AS_PROGRAM:
    from pipelines.runtime.program_exit import reopen_closed_streams

    reopen_closed_streams()  # `>&-`: before any file the run opens could take descriptor 1 or 2
    for _signum in _WORDS:
        try:
            signal.signal(_signum, _interrupted_outside_a_run)
        except ValueError:  # not the main thread
            break

import sampler  # noqa: E402, F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
