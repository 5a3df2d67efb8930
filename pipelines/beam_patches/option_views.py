"""Beam's option views, built once per options object and view class.

`PipelineOptions.view_as(cls)` builds an argparse parser of every option of `cls` and parses
the flags again. Beam 2.77 calls it for every type check of every transform
(`typehints.is_consistent_with` reads `TypeOptions.disable_beartype`): about 1,400 times to
build the `random` partition pipeline at 100k papers, 0.9 of its 1.5 s, and 1.3 s of `lp`'s
2.6 s. The views of one options object hold no values of their own: each reads and writes the
object's `_all_options`, so one view per class answers every caller the same. `install()`
remembers them per options object (by identity, while the object lives).
"""

from __future__ import annotations

import threading
import weakref

from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.beam_patches import targets

BEAM_VERSIONS = ("2.77",)  # the Beam versions this patch was written for
# What it replaces: (owner, attribute, source digest), checked by install() (beam_patches.targets).
TARGETS = ((PipelineOptions, "view_as", "3fd63693be9c56f3"),)

# Reentrant: an options object may be collected, and its views forgotten (`_forget`), by a
# garbage collection that runs while this thread holds the lock.
_lock = threading.RLock()


def cached(view_as):
    """`view_as` remembering its view per (options object, view class)."""
    views: dict[int, tuple] = {}

    def view(options, cls):
        with _lock:
            hit = views.get(id(options))
            if hit is None or hit[0]() is not options:
                hit = views[id(options)] = (weakref.ref(options, _forget(views, id(options))), {})
            made = hit[1].get(cls)
        if made is None:
            made = view_as(options, cls)
            with _lock:
                made = hit[1].setdefault(cls, made)
        return made

    view.__wrapped__ = view_as
    view.cache = views  # options id -> (weak reference, {class: view})
    return view


def _forget(views: dict, key: int):
    def forget(ref) -> None:
        with _lock:
            if key in views and views[key][0] is ref:
                del views[key]

    return forget


def install() -> None:
    """Makes `PipelineOptions.view_as` remember its views (once per process)."""
    with _lock:
        if not hasattr(PipelineOptions.view_as, "__wrapped__"):
            targets.check(__name__, BEAM_VERSIONS, TARGETS)
            PipelineOptions.view_as = cached(PipelineOptions.view_as)
