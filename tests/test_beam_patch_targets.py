"""Each Beam patch checks at install that what it replaces is what it was written for
(pipelines.beam_patches.targets): a Beam upgrade that changed it fails in one line naming the
patch and the Beam versions, never runs a patch over other code. And Beam's own behaviour that
the two speed patches change (streamed_inputs' is in tests/test_streamed_inputs.py)."""

from __future__ import annotations

import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions, TypeOptions
from apache_beam.runners import common
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.transforms import userstate

from pipelines.beam_patches import dofn_specs, option_views, streamed_inputs, targets

PATCHES = (dofn_specs, option_views, streamed_inputs)


@pytest.mark.parametrize("patch", PATCHES, ids=lambda m: m.__name__)
def test_the_installed_beam_is_what_each_patch_was_written_for(patch):
    assert patch.BEAM_VERSIONS == ("2.77",) and beam.__version__.startswith("2.77.")
    patch.install()  # installed or not, its targets are checked on Beam's originals
    targets.check(patch.__name__, patch.BEAM_VERSIONS, patch.TARGETS)


class _ChangedBuffer:
    """A GroupingBuffer of a Beam that changed `partition`."""

    def partition(self, n):
        return [[] for _ in range(n)]


def test_a_changed_target_fails_naming_the_patch_and_the_versions():
    digest = targets.source_digest(execution.GroupingBuffer.partition)
    with pytest.raises(targets.BeamChanged) as failed:
        targets.check("some_patch", ("2.77",), [(_ChangedBuffer, "partition", digest)])
    line = str(failed.value)
    assert "Beam patch some_patch was written for Apache Beam 2.77" in line
    assert f"this is Beam {beam.__version__}" in line and "_ChangedBuffer.partition" in line
    assert "is not the code the patch replaces" in line and "\n" not in line


def test_a_target_that_is_gone_fails():
    with pytest.raises(targets.BeamChanged, match=r"_ChangedBuffer\.append is gone"):
        targets.check("some_patch", ("2.77",), [(_ChangedBuffer, "append", None)])
    with pytest.raises(targets.BeamChanged, match=r"apache_beam\.transforms\.userstate\.gone is"):
        targets.check("some_patch", ("2.77",), [(userstate, "gone", None)])


def _changed(*args):  # a Beam function whose source is not the one a patch expects
    return args


@pytest.mark.parametrize(
    "patch, owner, name",
    [
        (dofn_specs, userstate, "get_dofn_specs"),
        (option_views, PipelineOptions, "view_as"),
        (streamed_inputs, execution.GroupingBuffer, "partition"),
    ],
    ids=["dofn_specs", "option_views", "streamed_inputs"],
)
def test_install_refuses_a_changed_beam_and_patches_nothing(monkeypatch, patch, owner, name):
    monkeypatch.setattr(owner, name, _changed)
    with pytest.raises(targets.BeamChanged, match=patch.__name__.replace(".", r"\.")):
        patch.install()
    assert getattr(owner, name) is _changed


def test_beams_view_as_builds_a_new_view_for_every_call():
    view_as = targets.original(PipelineOptions.view_as)
    options = PipelineOptions(["--disable_beartype"])
    first, second = view_as(options, TypeOptions), view_as(options, TypeOptions)
    assert first is not second and first.disable_beartype and second.disable_beartype


def test_beams_get_dofn_specs_inspects_every_method_on_every_call(monkeypatch):
    wrapped = []
    method_wrapper = common.MethodWrapper

    def counting(dofn, name):
        wrapped.append(name)
        return method_wrapper(dofn, name)

    monkeypatch.setattr(common, "MethodWrapper", counting)
    get = targets.original(userstate.get_dofn_specs)

    class Plain(beam.DoFn):
        def process(self, x):
            yield x

    dofn = Plain()
    get(dofn)
    once = len(wrapped)
    get(dofn)
    assert once > 10 and len(wrapped) == 2 * once


# each module's number of Beam functions it replaces or wraps
RUNNER_WRAPPERS = {"pipelines.runtime.worker_deaths": 6, "pipelines.reporting.resources": 4}


@pytest.mark.parametrize("module, count", RUNNER_WRAPPERS.items())
def test_the_runtimes_wrappers_of_beams_runner_match_an_unpatched_beam(module, count):
    """worker_deaths and resources replace Beam's runner code too; checked in a fresh process,
    whose Beam none of them has patched yet."""
    check = (
        "import importlib\n"
        "from pipelines.beam_patches import targets\n"
        f"m = importlib.import_module({module!r})\n"
        "assert m.BEAM_VERSIONS == ('2.77',)\n"
        "targets.check(m.__name__, m.BEAM_VERSIONS, m.TARGETS)\n"
        "print(len(m.TARGETS))\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == str(count), done.stderr


def test_the_runtimes_wrappers_refuse_a_changed_beam(monkeypatch):
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    from pipelines.reporting import resources
    from pipelines.runtime import worker_deaths

    handler = worker_handlers.SubprocessSdkWorkerHandler
    monkeypatch.setattr(handler, "close", _changed)
    monkeypatch.setattr(handler, "start_worker", _changed)
    with pytest.raises(
        targets.BeamChanged, match=r"worker_deaths was written for Apache Beam 2\.77"
    ):
        worker_deaths.install()
    assert handler.close is _changed and handler.start_worker is _changed
    monkeypatch.setattr(execution.BundleContextManager, "get_buffer", _changed)
    with pytest.raises(targets.BeamChanged, match=r"resources was written for .*get_buffer"):
        resources._install()
    assert execution.BundleContextManager.get_buffer is _changed
