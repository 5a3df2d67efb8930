from __future__ import annotations

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.transforms import userstate

from pipelines.beam_patches import dofn_specs


class _Plain(beam.DoFn):
    def process(self, x):
        yield x


class _Stateful(beam.DoFn):
    COUNT = userstate.ReadModifyWriteStateSpec("count", VarIntCoder())

    def process(self, x, count=beam.DoFn.StateParam(COUNT)):  # noqa: B008 (Beam's API)
        yield x


def test_cached_specs_are_beams_and_asked_once_per_instance():
    calls = []

    def counting(dofn):
        calls.append(dofn)
        return userstate.get_dofn_specs(dofn)

    get = dofn_specs.cached(counting)
    plain, stateful = _Plain(), _Stateful()
    for dofn in (plain, stateful, plain, stateful):
        assert get(dofn) == userstate.get_dofn_specs(dofn)
    assert calls == [plain, stateful]
    state, _ = get(stateful)
    state.clear()  # a caller's copy: the remembered answer stays
    assert get(stateful) == userstate.get_dofn_specs(stateful)
    assert get(_Plain()) == (set(), set()) and len(calls) == 3
