"""Join: beam.CoGroupByKey whose values cross the Flatten and the GroupByKey as bytes.

A CoGroupByKey tags every input, flattens them and groups by key. The local runner
materializes a Flatten of several inputs as a stage of its own, which decodes every element
of every input and encodes it again for the GroupByKey: a pickling round trip of every value
for nothing. Here each value is pickled once where it is made, travels as `bytes` (which
Beam's coder copies without pickling) and is unpickled once by the consumer's step. The
result is CoGroupByKey's: (key, {tag: [values]}), the tags in the order given.
"""

from __future__ import annotations

import pickle
from typing import Any

import apache_beam as beam
from apache_beam.typehints import KV


def tagged(key, index: int, value):
    """An element of a Join's input as the Join carries it: value `index` of its tags."""
    return key, (index, pickle.dumps(value, pickle.HIGHEST_PROTOCOL))


def _tag(keyed, index: int):
    key, value = keyed
    return tagged(key, index, value)


def _collect(keyed, tags: tuple[str, ...]):
    key, tagged = keyed
    groups = {tag: [] for tag in tags}
    for index, data in tagged:
        groups[tags[index]].append(pickle.loads(data))
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
            | "Collect" >> beam.Map(_collect, self._tags).with_output_types(KV[Any, Any])
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
