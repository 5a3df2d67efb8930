"""The compiled kernels (sampler/jit.py) against the numpy kernels they replaced
(tests/kernel_oracles.py), on random inputs built to hit the corners: degree at, below and
above k, k = 0 and 1, hubs, tied and NaN/inf/negative weights. tests/test_kernel_digests.py
checks whole records against digests recorded before any kernel was compiled.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

from sampler import ids
from sampler.sample import choose_jit
from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K
from tests import kernel_oracles as oracles


def frontier(rng, rows: int, max_degree: int, weight_kind: str):
    degree = rng.integers(1, max_degree + 1, rows)
    degree[rng.random(rows) < 0.05] = max_degree * 20  # hubs
    start = np.cumsum(degree) - degree + rng.integers(0, 3)
    total = int(start[-1] + degree[-1]) + 3
    if weight_kind == "ties":
        weights = rng.integers(-1, 4, total).astype(np.float32)
    elif weight_kind == "odd":
        weights = rng.choice(np.array([np.nan, np.inf, -np.inf, 0, -1, 0.5, 2], np.float32), total)
    else:
        weights = rng.random(total).astype(np.float64)
    stream = ids.mix(rng.integers(0, 2**63, rows).astype(np.uint64))
    return start.astype(np.int64), degree.astype(np.int64), stream, weights


@pytest.mark.parametrize("strategy", [RANDOM_UNIFORM, TOP_K, RANDOM_WEIGHTED])
@pytest.mark.parametrize("weight_kind", ["plain", "ties", "odd"])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 40])
def test_choose_is_the_numpy_choose(strategy, weight_kind, k):
    rng = np.random.default_rng([k, len(strategy), len(weight_kind)])
    start, degree, stream, weights = frontier(rng, 300, 12, weight_kind)
    kwargs = {"sample_size": k, "strategy": strategy, "weights": weights}
    want = oracles.choose_numpy(start, degree, stream, **kwargs)
    got = choose_jit.choose(start, degree, stream, **kwargs)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_draw_is_ids_draws():
    from sampler.ids_jit import draw

    rng = np.random.default_rng(0)
    stream = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64)
    index = rng.integers(0, 2**40, 50)
    want = ids.draws(stream, index)
    got = np.array([draw(s, i) for s, i in zip(stream, index, strict=True)])
    np.testing.assert_array_equal(got, want)


# --------------------------------------------------------------------------- compile once

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY_SPEC = """
seed_op { op_name: "seed" node_set_name: "paper" }
sampling_ops { op_name: "hop" input_op_names: "seed" edge_set_name: "cites" sample_size: 2
  strategy: RANDOM_UNIFORM }
"""


def run_python(code: str, cwd, env: dict, drop_capabilities=False) -> subprocess.CompletedProcess:
    """`python -c code` with only `env` set (plus TF_USE_LEGACY_KERAS); without root's
    capabilities when asked (root ignores file modes; without CAP_DAC_OVERRIDE it obeys)."""
    cmd = [sys.executable, "-c", code]
    if drop_capabilities:
        cmd = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--", *cmd]
    env = {"PATH": os.environ["PATH"], "TF_USE_LEGACY_KERAS": "1", **env}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_help_and_the_tools_do_not_import_numba():
    """--help stays fast: numba (0.5 s to import) loads only when a kernel first runs."""
    code = (
        "import sys\n"
        "import pipelines.sample, pipelines.partition, pipelines.cli, pipelines.show\n"
        "import pipelines.stats, pipelines.validate, pipelines.estimate\n"
        "import sampler.sample.dense, sampler.sample.in_memory, sampler.ids\n"
        "print(sorted(m for m in ('numba', 'llvmlite') if m in sys.modules))\n"
    )
    proc = run_python(code, ROOT, {"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux)")
def test_a_read_only_install_runs(tmp_path):
    """The package on a read-only path (site-packages on a worker): the kernels cache in the
    user's cache folder; with that read-only too, in a temporary folder; records the same."""
    from sampler.tools import synthetic

    install = tmp_path / "site"
    for package in ("sampler", "pipelines"):
        shutil.copytree(ROOT / package, install / package, ignore=shutil.ignore_patterns("__py*"))
    graph = synthetic.generate_mag(30, seed=2, feature_dim=2)
    schema = synthetic.write_graph(graph, str(tmp_path / "graph"), fmt="csv")
    (tmp_path / "graph" / "spec.pbtxt").write_text(TINY_SPEC)
    home, locked_home = tmp_path / "home", tmp_path / "locked-home"
    home.mkdir()
    locked_home.mkdir()
    for path in [install, *install.rglob("*"), locked_home]:
        path.chmod(path.stat().st_mode & ~0o222)
    outputs = {}
    for name, user_home in (("home", home), ("locked", locked_home), ("again", home)):
        out = tmp_path / f"out-{name}"
        code = (
            "import sys, sampler\n"
            f"assert sampler.__file__.startswith({str(install)!r}), sampler.__file__\n"
            "from pipelines import sample\n"
            f"code = sample.main(['--graph_schema', {schema!r}, '--sampling_spec',"
            f" {str(tmp_path / 'graph' / 'spec.pbtxt')!r}, '--output_samples',"
            f" {str(out / 's@1')!r}, '--runner', 'InMemory', '--progress_interval', '0'])\n"
            "print('CACHE', sys.modules['numba'].config.CACHE_DIR)\n"
            "sys.exit(code)\n"
        )
        env = {"PYTHONPATH": str(install), "HOME": str(user_home), "TMPDIR": str(tmp_path)}
        proc = run_python(code, tmp_path, env, drop_capabilities=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cache = proc.stdout.split("CACHE ")[-1].strip()
        outputs[name] = ((out / "s-00000-of-00001").read_bytes(), cache)
    user_cache = home / ".cache" / "beam-graph-sampler" / "numba"
    assert outputs["home"][1] == outputs["again"][1] == str(user_cache)
    assert list(user_cache.rglob("*.nbc")), "no kernel was cached in the user's cache folder"
    assert outputs["locked"][1].startswith(str(tmp_path / "sampler-numba-"))
    assert outputs["home"][0] == outputs["locked"][0] == outputs["again"][0]
    assert not list(install.rglob("*.nb[ic]"))
    assert not list(tmp_path.glob("sampler-numba-*")), "the temporary cache was left behind"


# --------------------------------------------------------------------------- members


@pytest.mark.parametrize("n_rows", [1, 7, 3000])
@pytest.mark.parametrize("m", [0, 50, 20000])
def test_member_positions_seed_first_then_by_row(n_rows, m):
    from sampler.sample import assemble_jit

    rng = np.random.default_rng([n_rows, m])
    n_samples = 40
    keys = np.unique(np.sort(rng.integers(0, n_samples, m)) * n_rows + rng.integers(0, n_rows, m))
    rows = keys % n_rows
    bounds = np.searchsorted(keys // n_rows, np.arange(n_samples + 1))
    seed_row = rng.integers(0, n_rows, n_samples)
    local, order = assemble_jit.member_positions(bounds, rows, seed_row, True)
    for s in range(n_samples):
        mine = rows[bounds[s] : bounds[s + 1]]
        want = sorted(mine, key=lambda r, s=s: (r != seed_row[s], r))
        np.testing.assert_array_equal(rows[order[bounds[s] : bounds[s + 1]]], want)
        np.testing.assert_array_equal(
            local[bounds[s] : bounds[s + 1]], [want.index(r) for r in mine]
        )


@pytest.mark.parametrize("m", [0, 1, 60, 5000])
@pytest.mark.parametrize("sorted_samples", [True, False])
def test_unique_pairs_is_the_lexsort_one(m, sorted_samples):
    """SampleNodes.unique_index: the first of each (sample, node) in (sample, node) order,
    as np.lexsort's, on a batch sorted by sample (an op's edges) and on one that is not."""
    from sampler.batches import SampleNodes

    rng = np.random.default_rng(m)
    sample = rng.integers(0, 7, m).astype(np.uint64) * np.uint64(2**61)
    if sorted_samples:
        sample = np.sort(sample)
    node = rng.integers(0, 30, m).astype(np.uint64)
    order = np.lexsort((node, sample))
    keep = np.ones(m, bool)
    keep[1:] = (sample[order][1:] != sample[order][:-1]) | (node[order][1:] != node[order][:-1])
    got = SampleNodes(sample, node).unique_index()
    np.testing.assert_array_equal(got, order[keep] if m else np.zeros(0, np.int64))


@pytest.mark.parametrize("m", [0, 40, 5000])
def test_find_members_is_a_search_of_each_samples_members(m):
    """(sample, fp) -> its member's position and found: a search of the sample's sorted fps
    alone (an fp that another sample holds is not found), the bucket-wide searchsorted's."""
    from sampler.sample import assemble_jit

    rng = np.random.default_rng(m)
    n_samples = 9
    sample = np.sort(rng.integers(0, n_samples, m))
    fp = rng.integers(0, 50, m).astype(np.uint64)
    keys = np.unique((sample.astype(np.uint64) << np.uint64(32)) | fp)
    member_sample, member_fp = (keys >> np.uint64(32)).astype(np.int64), keys & np.uint64(2**32 - 1)
    bounds = np.searchsorted(member_sample, np.arange(n_samples + 1)).astype(np.int64)
    local = rng.permutation(len(keys)).astype(np.int64)
    repeats = rng.integers(1, 4, 3 * m + 1)  # runs of one (sample, fp): a source's edges
    ask_sample = np.repeat(rng.integers(0, n_samples, 3 * m + 1), repeats)
    ask_fp = np.repeat(rng.integers(0, 55, 3 * m + 1).astype(np.uint64), repeats)
    got, found = assemble_jit.find_members(member_fp, bounds, local, ask_sample, ask_fp)
    ask = (ask_sample.astype(np.uint64) << np.uint64(32)) | ask_fp
    pos = np.minimum(np.searchsorted(keys, ask), max(len(keys) - 1, 0))
    want_found = keys[pos] == ask if len(keys) else np.zeros(len(ask), bool)
    np.testing.assert_array_equal(found, want_found)
    np.testing.assert_array_equal(got[found], local[pos[want_found]])
    assert not got[~found].any()


@pytest.mark.parametrize("m", [0, 1, 70, 6000])
def test_member_orders_are_the_numpy_ones(m):
    """A bucket's members by (sample, fp, row) and by (sample, seed first, fp, row), and the
    samples' bounds: numpy's stable sorts of the whole bucket (the assembly's before), with
    repeated fps, samples without members, and a seed or none per sample."""
    from sampler.sample import assemble_jit

    rng = np.random.default_rng(m)
    n_samples = 11
    sample = rng.integers(0, n_samples - 2, m)
    fp = rng.choice(np.array([0, 5, 2**63, 2**64 - 1, 7], np.uint64), m)
    fp[m // 2 :] = rng.integers(0, 2**64 - 1, m - m // 2, np.uint64)
    is_seed = rng.random(m) < 0.05
    by_fp = np.argsort(fp, kind="stable")
    want_by_sample = by_fp[np.argsort(sample[by_fp], kind="stable")]
    want_order = by_fp[np.argsort(2 * sample[by_fp] + (~is_seed[by_fp]), kind="stable")]
    by_sample, order, bounds = assemble_jit.member_orders(sample, fp, is_seed, n_samples)
    np.testing.assert_array_equal(by_sample, want_by_sample)
    np.testing.assert_array_equal(order, want_order)
    np.testing.assert_array_equal(
        bounds, np.searchsorted(np.sort(sample), np.arange(n_samples + 1))
    )


@pytest.mark.parametrize("per_sample", [0, 1, 2, 3, 900])
def test_find_in_directory_is_a_search_of_each_samples_members(per_sample):
    """member_directory + find_in_directory: what a search of the sample's sorted fps finds,
    on uniform 64-bit fps (a slot a member or so), the extremes 0 and 2**64 - 1, fps that
    another sample holds, and samples of no member, one, a few."""
    from sampler.sample import assemble_jit

    rng = np.random.default_rng(per_sample)
    counts = np.array([per_sample, 0, 1, per_sample, 2, per_sample // 3])
    edge = np.array([0, 1, 2**63, 2**64 - 2, 2**64 - 1], np.uint64)
    fps = [np.unique(np.concatenate([rng.integers(0, 2**64 - 1, c, np.uint64), edge[: c // 2]]))
           for c in counts]  # fmt: skip
    bounds = np.concatenate([[0], np.cumsum([len(f) for f in fps])]).astype(np.int64)
    member_fp = np.concatenate(fps).astype(np.uint64)
    local = rng.permutation(len(member_fp)).astype(np.int64)
    pool = np.concatenate([member_fp, member_fp + np.uint64(1), edge])
    ask_sample = rng.integers(0, len(counts), 4000)
    ask_fp = rng.choice(pool, 4000) if len(pool) else np.zeros(4000, np.uint64)
    directory = assemble_jit.member_directory(member_fp, bounds)
    got, found = assemble_jit.find_in_directory(member_fp, local, *directory, ask_sample, ask_fp)
    for i in range(len(ask_sample)):
        mine = member_fp[bounds[ask_sample[i]] : bounds[ask_sample[i] + 1]]
        at = np.searchsorted(mine, ask_fp[i])
        hit = at < len(mine) and mine[at] == ask_fp[i]
        assert found[i] == hit
        assert got[i] == (local[bounds[ask_sample[i]] + at] if hit else 0)


@pytest.mark.parametrize("n_keys", [1, 2, 108])
@pytest.mark.parametrize("m", [0, 1, 5000])
def test_sample_positions_is_the_searchsorted_one(n_keys, m):
    """A bucket's sample fingerprints -> (the sample's index, found), np.searchsorted's
    position clipped to the last key: on runs of one key (a piece's rows) and keys not there
    (below, between and above the bucket's)."""
    from sampler.sample import assemble_jit

    rng = np.random.default_rng([n_keys, m])
    sorted_keys = np.unique(rng.integers(1, 2**63, n_keys).astype(np.uint64) * np.uint64(2))
    key_order = rng.permutation(len(sorted_keys)).astype(np.int64)
    asked = np.concatenate(
        [sorted_keys, sorted_keys + np.uint64(1), np.array([0, 2**64 - 1], np.uint64)]
    )
    keys = np.repeat(rng.choice(asked.astype(np.uint64), m), rng.integers(1, 4, m))
    got, found = assemble_jit.sample_positions(sorted_keys, key_order, keys)
    pos = np.minimum(np.searchsorted(sorted_keys, keys), len(sorted_keys) - 1)
    np.testing.assert_array_equal(found, sorted_keys[pos] == keys)
    np.testing.assert_array_equal(got, key_order[pos])


@pytest.mark.parametrize("m", [0, 30, 5000])
def test_unique_edges_is_the_numpy_one(m):
    """Order (sample, source, target, edge key, input), each (sample, edge key) kept once
    where it repeats its predecessor; with parallel edges, repeats and hubs (long runs)."""
    from sampler.sample import assemble_jit

    rng = np.random.default_rng(m)
    n_samples = 12
    members = rng.integers(0, 9, n_samples)
    members[3] = 0
    src_bounds = np.concatenate([[0], np.cumsum(members)]).astype(np.int64)
    sample = rng.choice(np.flatnonzero(members), m) if m else np.zeros(0, np.int64)
    src = (rng.random(m) * members[sample]).astype(np.int64)
    src[: m // 3] = 0  # a hub: long runs of one source
    dst = rng.integers(0, 6, m)
    ekey = rng.integers(0, 40, m).astype(np.uint64)
    order = rng.permutation(m)
    sample, src, dst, ekey = sample[order], src[order], dst[order], ekey[order]
    want = oracles.unique_edges_numpy(sample, src, dst, ekey)
    got, bounds = assemble_jit.unique_edges(sample, src, dst, ekey, src_bounds)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(bounds, np.searchsorted(sample[want], np.arange(n_samples + 1)))
