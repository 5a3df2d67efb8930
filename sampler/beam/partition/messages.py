"""Message rounds: every shard's state and the messages its neighbours send it, by shard key.

One ParDo emits both the state (to its own key) and the messages (to the neighbours' keys)
into one PCollection that a single GroupByKey groups. A CoGroupByKey of two outputs would
Flatten them first, and the local runner materializes every Flatten of several inputs as a
stage of its own: one more encode and decode of every state and message in every round.
Messages travel as bytes (compact.pack_arrays), which Beam's coder copies without pickling.
"""

from __future__ import annotations

from typing import Any

import apache_beam as beam
from apache_beam.typehints import KV

from sampler.partition.compact import pack_arrays, unpack_arrays

_STATE, _MESSAGE = 0, 1


class _Send(beam.DoFn):
    """(key, state) -> (key, (_STATE, state)) and (neighbour key, (_MESSAGE, message)) for
    every neighbour shard; `messages(state)` lists (neighbour key, *message arrays)."""

    def __init__(self, messages):
        self._messages = messages

    def process(self, keyed):
        key, state = keyed
        yield key, (_STATE, state)
        for target, *message in self._messages(state):
            yield target, (_MESSAGE, pack_arrays(message))


def split(keyed):
    """A Gather element as (key, {"state": [state or nothing], "messages": [message, ...]}).

    Called by the consumer of Gather itself: a Map of its own would be one more operation
    per round, whose output (every message, unpacked) Beam pickles to sample its size."""
    key, values = keyed
    groups = {"state": [], "messages": []}
    for tag, value in values:
        if tag == _MESSAGE:
            groups["messages"].append(unpack_arrays(value))
        else:
            groups["state"].append(value)
    return key, groups


class Gather(beam.PTransform):
    """Keyed states -> (key, tagged states and packed messages), which `split` reads."""

    def __init__(self, messages):
        super().__init__()
        self._messages = messages

    def expand(self, state):
        return (
            state
            | "Send" >> beam.ParDo(_Send(self._messages)).with_output_types(KV[Any, Any])
            | "Group" >> beam.GroupByKey()
        )
