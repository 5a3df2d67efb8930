"""Beam's state and timer introspection of a DoFn, once per DoFn instance.

`userstate.get_dofn_specs` wraps every method of a DoFn (about thirty, most of them DoFn's
own) in a MethodWrapper, each an `inspect.signature`, to find state and timer parameters.
Beam 2.77 asks it about eight times per ParDo (at construction, validation, translation to
the pipeline proto and in every bundle processor): at 100k papers the `random` partition
asked 1,293 times for 0.64 s. The answer of one DoFn instance does not change, so
`install()` remembers it per instance (by identity, as long as the instance lives).
"""

from __future__ import annotations

import threading
import weakref

from apache_beam.transforms import userstate

from pipelines.beam_patches import targets

BEAM_VERSIONS = ("2.77",)  # the Beam versions this patch was written for
# What it replaces: (owner, attribute, source digest), checked by install() (beam_patches.targets).
TARGETS = ((userstate, "get_dofn_specs", "eeb36145d3115aa0"),)

_lock = threading.Lock()


def cached(get_dofn_specs):
    """`get_dofn_specs` remembering its answer per DoFn instance."""
    cache: dict[int, tuple] = {}

    def get(dofn):
        hit = cache.get(id(dofn))
        if hit is not None and hit[0]() is dofn:
            state, timers = hit[1]
            return set(state), set(timers)
        state, timers = get_dofn_specs(dofn)
        try:
            ref = weakref.ref(dofn)
        except TypeError:  # no weak references to it: not remembered
            return state, timers
        cache[id(dofn)] = (ref, (frozenset(state), frozenset(timers)))
        return state, timers

    get.__wrapped__ = get_dofn_specs
    return get


def install() -> None:
    """Makes Beam's `userstate.get_dofn_specs` remember its answers (once per process)."""
    with _lock:
        if not hasattr(userstate.get_dofn_specs, "__wrapped__"):
            targets.check(__name__, BEAM_VERSIONS, TARGETS)
            userstate.get_dofn_specs = cached(userstate.get_dofn_specs)
