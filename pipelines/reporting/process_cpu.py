"""CPU seconds of this process and of every process below it, read from /proc (Linux).

The local runner's SDK workers are its grandchildren (forked by pipelines.runtime's fork
server); what a stage costs them is the change of this sum across the stage. A process
that has ended and been reaped counts in its parent's `cutime`/`cstime`, which are added
too, so nothing is counted twice and nothing that ended is lost. Elsewhere than Linux (no
/proc) the figures are None.
"""

from __future__ import annotations

import os

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            text = f.read().decode()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except OSError:
            continue
    return out


def descendants_cpu_seconds(pid: int | None = None) -> float | None:
    """CPU seconds (user + system) of every process below `pid` (default: this one), the
    ended ones included; None without /proc."""
    pid = os.getpid() if pid is None else pid
    own = _stat(pid)
    if own is None:
        return None
    ticks = int(own[13]) + int(own[14])  # cutime, cstime: the reaped children
    stack = _children(pid)
    while stack:
        child = stack.pop()
        fields = _stat(child)
        if fields is None:
            continue
        ticks += sum(int(v) for v in fields[11:15])  # utime, stime, cutime, cstime
        stack += _children(child)
    return ticks / _TICKS
