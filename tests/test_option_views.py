"""PipelineOptions.view_as remembered per options object and class (pipelines.beam_patches.option_views)."""

from __future__ import annotations

import gc
import threading

from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    StandardOptions,
    TypeOptions,
)

from pipelines.beam_patches import option_views


def _recording(classes: list):
    """Beam's view_as, appending the class of every view it makes to `classes`."""

    def view_as(options, cls):
        classes.append(cls)
        return _beams(options, cls)

    return view_as


def test_one_view_per_object_and_class_with_beams_answers():
    calls = []
    view_as = option_views.cached(_recording(calls))
    a = PipelineOptions(["--direct_num_workers=3", "--disable_beartype"])
    b = PipelineOptions([])
    for _ in range(3):
        assert view_as(a, DirectOptions).direct_num_workers == 3
        assert view_as(a, TypeOptions).disable_beartype is True
        assert view_as(b, TypeOptions).disable_beartype is False
    assert calls == [DirectOptions, TypeOptions, TypeOptions]
    assert view_as(a, TypeOptions) is view_as(a, TypeOptions)
    assert view_as(a, TypeOptions) is not view_as(b, TypeOptions)


def test_a_value_set_through_a_view_is_seen_by_every_view_and_the_object():
    view_as = option_views.cached(_beams)
    options = PipelineOptions([])
    view_as(options, StandardOptions).streaming = True
    assert view_as(options, StandardOptions).streaming is True
    assert _beams(options, StandardOptions).streaming is True  # a view Beam makes afresh
    assert options.get_all_options()["streaming"] is True


def test_the_views_of_an_object_go_with_it():
    made = []
    view_as = option_views.cached(_recording(made))
    options = PipelineOptions([])
    view_as(options, TypeOptions)
    assert len(view_as.cache) == 1
    del options
    gc.collect()
    assert view_as.cache == {}
    view_as(PipelineOptions([]), TypeOptions)  # a new object (even at a reused id): a new view
    assert made == [TypeOptions, TypeOptions]


def _beams(options, cls):
    view_as = PipelineOptions.view_as
    return getattr(view_as, "__wrapped__", view_as)(options, cls)


def test_an_object_collected_while_the_views_are_looked_up_does_not_deadlock():
    """A garbage collection inside a lookup (the lock held) forgets a dead object's views in
    the same thread; with a plain lock the CLI hung there (seen in a partition test)."""
    view_as = option_views.cached(_beams)
    options = PipelineOptions([])
    view_as(options, TypeOptions)

    def collect_under_the_lock() -> None:
        nonlocal options
        with option_views._lock:
            del options
            gc.collect()

    worker = threading.Thread(target=collect_under_the_lock, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive()
    assert view_as.cache == {}
