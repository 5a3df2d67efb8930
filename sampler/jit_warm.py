"""`python -m sampler.jit_warm`: compiles (or loads from the cache) every compiled kernel,
so that no run pays for it; docker/Dockerfile runs it at build time. Apart from sampler/jit.py,
which every kernel module imports (no import circle)."""

from __future__ import annotations


def cache_dir() -> str:
    from sampler import jit  # chooses the cache folder before numba loads

    return jit.numba.config.CACHE_DIR or "the source tree"


def warm() -> list[str]:
    """Compiles (or loads) every kernel for the argument types the runs use; returns their
    names. `python -m sampler.jit_warm` runs it: docker/Dockerfile warms the image's cache so."""
    import importlib

    for module in WARMERS:
        warm_module(module)
    modules = [importlib.import_module(m) for m in WARMERS]
    return sorted(
        f"{m.__name__}.{name}"
        for m in modules
        for name, v in vars(m).items()
        if getattr(v, "__module__", None) == m.__name__ and hasattr(v, "signatures")
    )


def warm_module(module: str) -> None:
    """Compiles (or loads) the kernels of one module (a key of WARMERS); sampler.jit_loader
    calls it under a machine-wide lock the first time a process loads a module that is not
    cached yet."""
    WARMERS[module]()


def _warm_ids() -> None:
    import numpy as np
    import pyarrow as pa

    from sampler import ids
    from sampler.jit_loader import kernels

    ids.fingerprint(pa.array([b"a", b"b" * (ids._NUMPY_MAX_LEN + 1)], pa.binary()))
    ids_jit = kernels("sampler.ids_jit")
    ids_jit.draw(ids_jit.mix(np.uint64(1)), np.int64(0))  # callees of choose_jit, cached too
    fps = np.array([1, 2, 3], np.uint64)
    ids_jit.find_sorted(fps, fps)
    ids_jit.combine_words(fps, np.zeros((3, 2), np.uint64))


def _warm_tfrecord() -> None:
    from sampler.io import tfrecord

    tfrecord._frame_compiled(tfrecord.frame([b"a"]), 0, 2)


def _warm_adjacency() -> None:
    import numpy as np

    from sampler.jit_loader import kernels

    adjacency_jit = kernels("sampler.sample.adjacency_jit")
    fps = np.array([1, 2, 3], np.uint64)
    _, src, dst = adjacency_jit.csr_sort(fps, fps, fps)
    adjacency_jit.csr_rows(src, dst)


def _warm_choose() -> None:
    import numpy as np

    from sampler.jit_loader import kernels
    from sampler.sample.plan import RANDOM_UNIFORM, RANDOM_WEIGHTED, TOP_K

    choose_jit = kernels("sampler.sample.choose_jit")
    start, degree = np.array([0, 2], np.int64), np.array([2, 3], np.int64)
    stream, weights = np.array([1, 2], np.uint64), np.array([1.0, 2, 3, 4, 5])
    for strategy in (RANDOM_UNIFORM, TOP_K, RANDOM_WEIGHTED):
        choose_jit.choose(start, degree, stream, sample_size=1, strategy=strategy, weights=weights)


def _warm_assemble() -> None:
    import numpy as np

    from sampler.jit_loader import kernels

    assemble_jit = kernels("sampler.sample.assemble_jit")
    sample, row = np.array([0, 0, 1], np.int64), np.array([1, 0, 1], np.int64)
    for n_rows in (2, 1 << 20):  # the bitmap and the stamps
        bounds, rows = assemble_jit.unique_rows(sample, row, 2, n_rows)
    local, _ = assemble_jit.member_positions(bounds, rows, np.array([1, 1], np.int64), True)
    assemble_jit.find(bounds, rows, local, sample, row, 2)
    assemble_jit.unique_edges(sample, row, row, row.astype(np.uint64), np.array([0, 2, 4]))


def _warm_lp() -> None:
    """lp's counting sorts, with the index widths the runs use (int32 below 2**31 adjacency
    entries, else int64)."""
    import numpy as np

    from sampler.jit_loader import kernels

    lp_jit = kernels("sampler.partition.lp_jit")
    one = np.zeros(1, np.int64)
    for flag in (True, False):
        lp_jit.grouped_order(one, one, 1, flag)
    for small in (np.int32, np.int64):
        lp_jit.segment_part_counts(one.astype(small), one.astype(small), one, 1)
    lp_jit.sum_row_labels(one, one, one, 1)


def _warm_lookup() -> None:
    import numpy as np

    from sampler.jit_loader import kernels

    kernels("sampler.partition.lookup_jit").positions(
        np.zeros(2, np.uint64), np.zeros(1, np.uint64), 1
    )


def _warm_sampling() -> None:
    """The fused sampling kernels (sampler/sample/dense_fused.py), with the argument types
    that module passes."""
    import numpy as np

    from sampler.jit_loader import kernels

    sample_jit = kernels("sampler.sample.sample_jit")

    i64 = np.array([0, 1], np.int64)
    keys = np.array([1, 2], np.uint64)
    for n_rows in (2, 1000):  # flags and stamps
        bounds, rows = sample_jit.unique_parts(np.array([[0, 1, 2]], np.int64), i64, n_rows)
    fs, fr, fbounds = sample_jit.live_frontier(bounds, rows, np.array([1, 1], np.int64))
    sample_jit.streams(fs, fr, keys, keys, np.uint64(3))
    picks, pos, _ = sample_jit.pick_uniform(fs, fr, i64, i64 + 1, i64, keys, keys, np.uint64(3), 1)
    sample_jit.picks_by_row(i64, i64, 2, i64)
    local = np.zeros(2, np.int64)
    for identity in (False, True):
        sample_jit.chunk_edges(
            *(fs, fr, picks[:-1], picks[1:], pos, identity, np.array([0, 2], np.int64), 2),
            *(bounds, rows, local, 2, bounds, rows, local, 2, i64, keys),
        )


def _warm_encoder() -> None:
    """Every encoder kernel, through chunks with each payload source (float32 and int64
    rows, ids of a table and of a chunk, edge indices, #size)."""
    import numpy as np

    from sampler.batches import NodeBatch, bytes_array
    from sampler.features import FeatureSpec
    from sampler.sample import encode as enc
    from sampler.sample import encode_compiled
    from sampler.sample.subgraph import NodeRowsOfChunk, SubgraphChunk

    keys = tuple(
        enc.FeatureKey(FeatureSpec(name, kind, (1,)), f"nodes/n.{name}")
        for name, kind in (("f", "float"), ("i", "int"))
    )
    nodes = enc.NodeSetEncoding("n", "nodes/n.#size", "nodes/n.#id", keys)
    edges = enc.EdgeSetEncoding("e", "n", "n", "e.#size", "e.#source", "e.#target", ())
    specs = enc.EncodeSpecs({"n": nodes}, {"e": edges})
    features = {"f": np.ones((2, 1), np.float32), "i": np.ones((2, 1), np.int64)}
    batch = NodeBatch(np.arange(2, dtype=np.uint64), bytes_array([b"a", b"b"]), features)
    names = bytes_array([b"s0", b"s1"])
    direct = encode_compiled._direct_bytes()
    for index in (None, np.array([1, 0])):  # rows given per chunk; rows of a table
        rows = {"n": NodeRowsOfChunk(batch, index, np.array([0, 1, 2]))}
        edge_rows = {"e": (np.zeros((2, 1), np.int64), {}, np.array([0, 1, 1]))}
        for way in (direct, None):  # into bytes objects (CPython; else None again), a buffer
            encode_compiled._DIRECT = way
            try:
                encode_compiled.encode_chunk_compiled(
                    SubgraphChunk(names, names, rows, edge_rows), specs
                )
            finally:
                encode_compiled._DIRECT = direct


# Each kernel module, and what compiles its kernels for the types the runs use.
WARMERS = {
    "sampler.ids_jit": _warm_ids,
    "sampler.io.tfrecord_jit": _warm_tfrecord,
    "sampler.sample.adjacency_jit": _warm_adjacency,
    "sampler.partition.lp_jit": _warm_lp,
    "sampler.partition.lookup_jit": _warm_lookup,
    "sampler.sample.choose_jit": _warm_choose,
    "sampler.sample.assemble_jit": _warm_assemble,
    "sampler.sample.sample_jit": _warm_sampling,
    "sampler.sample.encode_jit": _warm_encoder,
}


if __name__ == "__main__":
    print(f"compiled kernels ready in {cache_dir()}: {warm()}")
