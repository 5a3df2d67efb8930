"""Values pickled once for their trip through the runner, unpickled by the step that gets them.

Only values that this project's own steps made cross here, between the stages of one
pipeline: Beam's default coder pickles the same values anyway when they have no coder of
their own. Packing them once, where they are made, lets them cross the local runner's
Flatten stages and shuffles as bytes, which it copies without unpickling them. No input
file is ever unpickled: tests/test_bad_records.py allows `pickle` to load only here.
"""

from __future__ import annotations

import pickle


def packed(value) -> bytes:
    """`value` as bytes, for `unpacked` in a later step of the same pipeline."""
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


def unpacked(data: bytes):
    """The value `packed` made `data` from."""
    return pickle.loads(data)
