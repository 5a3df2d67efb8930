"""The one source of randomness of sampling.

Every random choice is a pure function of (seed, op, sample, node, draw index): a frontier
row's stream key is `Randomness.stream(op key, sample key, node fingerprint)` and its draws
are `draw(stream, index)`. Both sampling kernels (`sampling.sample_frontier` for the
`sharded` placement, `dense.sample_chunk_columns` for `worker` and in-memory) get their streams here,
so the placements cannot drift apart.

How --seed reaches the kernels (one way): the CLI, or a user of
`sampler.beam.SampleGraphTensors`, makes one frozen `Randomness(seed)`; every layer passes
that object on unchanged (SampleGraphTensors -> SampleOnWorkers / SampleSubgraphs -> SampleOp
-> sample_frontier; sample_in_memory -> sample_chunk_columns). No layer takes a bare seed int.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from sampler import ids


@dataclasses.dataclass(frozen=True)
class Randomness:
    """--seed: same seed, same records."""

    seed: int = 0

    def stream(self, op_key: np.uint64, sample_key: np.ndarray, node_fp: np.ndarray) -> np.ndarray:
        """The random stream key of each frontier row (sample, node) of an op."""
        return ids.combine(np.uint64(self.seed), op_key, sample_key, node_fp)

    def stream_prefix(self, op_key: np.uint64) -> np.uint64:
        """`stream`'s hash before the sample and node are mixed in, the same for every row
        of an op: stream(op, s, n) == mix(mix(stream_prefix(op) ^ s) ^ n) (ids.combine's
        steps), which the compiled kernels (sampler/sample/sample_jit.py) finish per row."""
        return np.uint64(ids.combine(np.uint64(self.seed), op_key))

    def negatives(self, sample_key: np.ndarray) -> np.ndarray:
        """The stream of a link seed's negative targets: draw k is the k-th negative's."""
        return ids.combine(np.uint64(self.seed), NEGATIVES_KEY, sample_key)


NEGATIVES_KEY = ids.fingerprint_one("link prediction negatives")


def draw(stream: np.ndarray, index) -> np.ndarray:
    """The `index`-th uniform draw in [0, 1) of each stream."""
    return ids.draws(stream, index)
