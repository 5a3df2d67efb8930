"""Join: beam.CoGroupByKey whose values cross the Flatten and the GroupByKey as bytes.

A CoGroupByKey tags every input, flattens them and groups by key. The local runner
materializes a Flatten of several inputs as a stage of its own, which decodes every element
of every input and encodes it again for the GroupByKey: a pickling round trip of every value
for nothing. Here each value is pickled once where it is made, travels as `bytes` (which
Beam's coder copies without pickling) and is unpickled once by the consumer's step. The
result is CoGroupByKey's: (key, {tag: [values]}), the tags in the order given, as a
`Groups`, whose size Beam's element size sampling takes from the pickled values it was
made of instead of pickling every value again (the first ten elements of every bundle are
sampled, so nearly every group of a join of a few dozen keys would be).
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.coders import coder_impl
from apache_beam.typehints import KV

from sampler.beam.packing import packed, unpacked


def tagged(key, index: int, value):
    """An element of a Join's input as the Join carries it: value `index` of its tags."""
    return key, (index, packed(value))


def _tag(keyed, index: int):
    key, value = keyed
    return tagged(key, index, value)


class Groups(dict):
    """{tag: [values]} of one key; `nbytes`: the size of its values pickled."""

    nbytes: int = 0


def _dump_groups(groups: Groups) -> bytes:
    return packed((dict(groups), groups.nbytes))


def _load_groups(data: bytes) -> Groups:
    values, nbytes = unpacked(data)
    groups = Groups(values)
    groups.nbytes = nbytes
    return groups


class GroupsCoder(beam.coders.Coder):
    """Pickles a Groups where it crosses stages; estimates its size without pickling."""

    def encode(self, value: Groups) -> bytes:
        return _dump_groups(value)

    def decode(self, encoded: bytes) -> Groups:
        return _load_groups(encoded)

    def _create_impl(self):
        return coder_impl.CallbackCoderImpl(_dump_groups, _load_groups, lambda g: g.nbytes)

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return Groups


beam.coders.registry.register_coder(Groups, GroupsCoder)


def _collect(keyed, tags: tuple[str, ...]):
    key, tagged = keyed
    groups = Groups({tag: [] for tag in tags})
    for index, data in tagged:
        groups[tags[index]].append(unpacked(data))
        groups.nbytes += len(data)
    return key, groups


def many(tag: str, pcolls) -> dict:
    """Join inputs that join as one tag, as the Flatten of `pcolls` would, without a
    Flatten (a stage) of its own: {f"{tag}/{i}": pcoll}."""
    return {f"{tag}/{i}": pcoll for i, pcoll in enumerate(pcolls)}


class Grouped(beam.PTransform):
    """`tagged` elements of one PCollection -> (key, {tag: [values]}): a Join of inputs that
    one step makes together (no Flatten at all)."""

    def __init__(self, tags: tuple[str, ...]):
        super().__init__()
        self._tags = tuple(tags)

    def expand(self, pcoll):
        return (
            pcoll
            | "GroupByKey" >> beam.GroupByKey()
            | "Collect" >> beam.Map(_collect, self._tags).with_output_types(KV[Any, Groups])
        )


class Join(beam.PTransform):
    """{name: keyed PCollection} -> (key, {tag: [values of that key]}); the tag of a name
    is the name up to its first "/" (see `many`), the tags in the order given."""

    def expand(self, inputs: dict):
        tags = tuple(dict.fromkeys(name.split("/")[0] for name in inputs))
        tagged_inputs = [
            pcoll
            | f"Tag[{name}]"
            >> beam.Map(_tag, tags.index(name.split("/")[0])).with_output_types(KV[Any, Any])
            for name, pcoll in inputs.items()
        ]
        return tagged_inputs | "Flatten" >> beam.Flatten() | "Group" >> Grouped(tags)
