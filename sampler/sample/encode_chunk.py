"""A chunk of subgraphs encoded as GraphTensor tf.Examples at once.

`encode_chunk(chunk, specs)` returns, for a SubgraphChunk, the records `encode_subgraph`
(sampler.sample.encode) writes for its subgraphs one by one: the same bytes
(tests/test_encode_chunk.py compares them, and decodes them independently). The compiled
encoder (sampler.sample.encode_compiled) writes them; a chunk it does not take (or one the
checks reject) goes to the numpy encoder (sampler.sample.encode_numpy), which gives the same
bytes (tests/test_encode_compiled.py) and raises the checks' errors.
"""

from __future__ import annotations

from sampler.sample.encode import EncodeSpecs
from sampler.sample.encode_compiled import Unsupported, encode_chunk_compiled
from sampler.sample.encode_numpy import (  # noqa: F401  (the varint helpers' old home)
    encode_chunk_numpy,
    framed_bytes,
    varint_lengths,
    varint_matrix,
    varints,
)
from sampler.sample.subgraph import SubgraphChunk


def encode_chunk(chunk: SubgraphChunk, specs: EncodeSpecs) -> list[bytes]:
    """The serialized tf.Example of every subgraph of `chunk`, in order: byte for byte what
    `encode_subgraph` gives for each (same checks, ValueError naming the set and feature)."""
    try:
        return encode_chunk_compiled(chunk, specs)
    except Unsupported:
        return encode_chunk_numpy(chunk, specs)
