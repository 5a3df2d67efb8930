"""Seeds that get no subgraph because their id is not in the seed node set (the counter
`seeds_not_in_node_set`): one dead-letter JSON line per seed occurrence."""

from __future__ import annotations

import json

import numpy as np

from sampler.batches import Seeds


def rejected_seed_lines(seeds: Seeds, node_fps: np.ndarray, seed_set: str) -> list[str]:
    """`{"set": "seeds", "seed_id", "reason"}` for each seed whose fingerprint is not among
    `node_fps` (the seed node set's fingerprints, sorted), in sample-id order."""
    node_fps = np.asarray(node_fps, dtype=np.uint64)
    if len(node_fps):
        pos = np.minimum(np.searchsorted(node_fps, seeds.node), len(node_fps) - 1)
        missing = node_fps[pos] != seeds.node
    else:
        missing = np.ones(len(seeds.node), dtype=bool)
    reason = f"not in node set {seed_set!r}"
    out = []
    for i in sorted(np.flatnonzero(missing).tolist(), key=lambda i: seeds.sample_id[i]):
        seed_id = seeds.seed_id[i]
        text = (
            seed_id.decode("utf-8", "backslashreplace") if isinstance(seed_id, bytes) else seed_id
        )
        out.append(json.dumps({"set": "seeds", "seed_id": text, "reason": reason}))
    return out
