"""Ids of any length cost time linear in their bytes (class G).

The fingerprint of string ids stepped over byte positions in Python, so a batch cost
(its rows) x (its longest id): one 4 MB id in a 500-paper CSV graph made `sample` take
98 s instead of 1 s. These tests run such inputs in a subprocess under a generous
timeout (a hang fails, a fast machine cannot make them pass by luck), and check the
fingerprints against an independent pure-Python FNV-1a + splitmix64.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pyarrow as pa

from sampler import ids
from sampler.tools import synthetic

MASK = (1 << 64) - 1
LONG = 4 * 1024 * 1024  # bytes of the long id


def reference(value: bytes) -> int:
    """FNV-1a of the bytes, then splitmix64(splitmix64(h) ^ length), in Python ints."""

    def mix(z: int) -> int:
        z = (z + 0x9E3779B97F4A7C15) & MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    h = 0xCBF29CE484222325
    for byte in value:
        h = ((h ^ byte) * 0x100000001B3) & MASK
    return mix(mix(h) ^ len(value))


def test_fingerprints_match_the_reference():
    rng = np.random.default_rng(3)
    values = [b"", b"a", "é".encode(), b"\x00\xff" * 7]
    values += [rng.bytes(int(n)) for n in rng.integers(0, 300, 200)]
    arr = pa.array(values, pa.binary())
    want = np.array([reference(v) for v in values], np.uint64)
    np.testing.assert_array_equal(ids.fingerprint(arr), want)
    # a slice (offset into the buffers), a chunked array, strings, and one value at a time
    np.testing.assert_array_equal(ids.fingerprint(arr.slice(5, 50)), want[5:55])
    chunked = pa.chunked_array([arr.slice(0, 7), arr.slice(7)])
    np.testing.assert_array_equal(ids.fingerprint(chunked), want)
    assert ids.fingerprint(pa.array(["é"]))[0] == reference("é".encode())
    assert all(ids.fingerprint_one(v) == reference(v) for v in values[:20])


def _run(code: str, timeout: float) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=timeout,  # subprocess.TimeoutExpired fails the test: the quadratic cost
        env=dict(os.environ, TF_USE_LEGACY_KERAS="1"),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_one_long_id_among_many_costs_its_bytes():
    """20,000 short ids and one of 4 MB: before, 4M Python steps over 20,000 rows each."""
    code = f"""
import numpy as np, pyarrow as pa
from sampler import ids
values = [b"p%d" % i for i in range(20000)] + [b"x" * {LONG}]
fp = ids.fingerprint(pa.array(values, pa.binary()))
print(len(np.unique(fp)), fp[-1])
"""
    out = _run(code, timeout=60).split()
    assert out == ["20001", str(reference(b"x" * LONG))]


def test_sample_a_csv_graph_with_a_4mb_id(tmp_path):
    """The user's case: a 500-paper CSV graph where one paper's id is 4 MB long, sampled
    with --runner InMemory; its record holds the id whole."""
    graph = synthetic.generate_mag(500, seed=1, feature_dim=2)
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"), fmt="csv")
    long_id = "L" * LONG
    paper = tmp_path / "graph" / "paper.csv"
    rows = paper.read_text().splitlines()
    first = rows[1].split(",", 1)
    paper.write_text("\n".join([rows[0], *rows[1:], f"{long_id},{first[1]}"]) + "\n")
    with open(tmp_path / "graph" / "cites.csv", "a", encoding="utf-8") as f:
        f.write(f"{long_id},p0\np1,{long_id}\n")
    seeds = tmp_path / "graph" / "seeds.csv"
    seeds.write_text(f"#id\np1\n{long_id}\n")
    spec = synthetic.write_sampling_spec(
        synthetic.mag_sampling_spec(), str(tmp_path / "graph" / "spec.pbtxt")
    )
    out = tmp_path / "out"
    code = f"""
import sys
from pipelines import sample
sys.exit(sample.main(["--graph_schema", {schema!r}, "--sampling_spec", {spec!r},
    "--input_seeds", {str(seeds)!r}, "--output_samples", {str(out / "s@1")!r},
    "--runner", "InMemory"]))
"""
    _run(code, timeout=120)
    import tensorflow as tf

    records = [r.numpy() for r in tf.data.TFRecordDataset(str(out / "s-00000-of-00001"))]
    assert len(records) == 2
    assert sum(long_id.encode() in r for r in records) == 2  # p1 cites it; it is a seed
