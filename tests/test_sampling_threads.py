"""Sampling and encoding on several threads (sampler.threads.ordered_map,
sampler.sample.chunk_stream): the same records, files and counters for any --sampling_threads,
on both sides of the chunk size (several chunks per bucket), for node and link seeds."""

from __future__ import annotations

import json
import pathlib
import threading

import pytest

from pipelines import sample as sample_cli
from sampler.sample import in_memory, link
from sampler.threads import ordered_map
from tests import test_kernel_digests as digests


def test_ordered_map_yields_in_item_order_when_later_items_finish_first():
    later_done = threading.Event()

    def fn(i: int) -> int:
        if i == 0:  # item 0 finishes only once item 3 has finished
            assert later_done.wait(30)
        if i == 3:
            later_done.set()
        return i * i

    assert list(ordered_map(fn, range(12), threads=4, ahead=4)) == [i * i for i in range(12)]
    assert list(ordered_map(fn, [], threads=3)) == []


def test_ordered_map_raises_the_first_failure_in_item_order_after_the_items_before_it():
    def fn(i: int) -> int:
        if i in (4, 6):
            raise ValueError(f"item {i}")
        return i

    got = []
    with pytest.raises(ValueError, match="item 4"):
        for value in ordered_map(fn, range(10), threads=3):
            got.append(value)
    assert got == [0, 1, 2, 3]


def test_ordered_map_takes_at_most_ahead_items_before_their_results_are_taken():
    taken = []

    def items():
        for i in range(100):
            taken.append(i)
            yield i

    results = ordered_map(lambda i: i, items(), threads=2, ahead=3)
    assert next(results) == 0
    assert len(taken) <= 4  # the 3 ahead, and the one that is then taken to refill
    results.close()
    count = len(taken)
    assert count < 100
    assert taken == list(range(count))


def test_ordered_map_on_one_thread_is_the_plain_loop_on_this_thread():
    caller = threading.get_ident()
    assert list(ordered_map(lambda i: (i, threading.get_ident()), range(3), threads=1)) == [
        (0, caller),
        (1, caller),
        (2, caller),
    ]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sampling_threads")
    return root, digests.make_inputs(root)


@pytest.fixture(scope="module")
def pinned():
    return json.loads(digests.DIGESTS.read_text())


def _run(paths, root: pathlib.Path, case: str, threads: int, beam: bool = False):
    spec, extra = digests.SAMPLE_CASES[case]
    out = root / f"out-{case}-{threads}-{'beam' if beam else 'mem'}"
    argv = ["--graph_schema", paths["schema"], "--sampling_spec", paths[spec]]
    argv += ["--output_samples", str(out / "samples@3"), *extra]
    argv += ["--sampling_threads", str(threads), "--overwrite"]
    argv += ["--graph_placement", "worker"] if beam else ["--runner", "InMemory"]
    assert sample_cli.main(argv) == 0
    return out


@pytest.mark.parametrize("case", ["mixed-edge-s0", "mag-node-s3", "link-edge-neg2"])
def test_any_number_of_threads_writes_the_pinned_records_in_the_same_files(
    inputs, pinned, case, monkeypatch
):
    """Chunks of 5 seeds: every bucket of the 160-paper graph has several chunks, which the
    threads finish in any order. The shards are the same bytes for 1, 2 and 5 threads, their
    records those pinned before threads existed, and the run's counters the same."""
    monkeypatch.setattr(in_memory, "CHUNK_SIZE", 5)
    monkeypatch.setattr(link, "LINK_CHUNK", 5)
    root, paths = inputs
    outs = [_run(paths, root, case, threads) for threads in (1, 2, 5)]
    files = [sorted(p.name for p in out.glob("samples-*")) for out in outs]
    assert files[0] == files[1] == files[2] and len(files[0]) == 3
    for name in files[0]:
        contents = {(out / name).read_bytes() for out in outs}
        assert len(contents) == 1, name
    assert digests._digest_records(str(outs[0])) == pinned["samples"][case]
    counters = [json.loads((out / "run_summary.json").read_text())["counters"] for out in outs]
    for c in counters:
        c.pop("seconds")
    assert counters[0] == counters[1] == counters[2]
    assert counters[0]["subgraphs"] > 3 * 5


@pytest.mark.parametrize("case", ["mag-node-s3", "link-edge-neg2"])
def test_the_worker_placement_on_several_threads_writes_in_memory_s_files(
    inputs, case, monkeypatch
):
    """Each SDK worker samples a bucket's chunks (2 seeds; 32 buckets of about 5 seeds) on 3
    threads: the shards are the bytes of --runner InMemory on one thread."""
    monkeypatch.setattr(in_memory, "CHUNK_SIZE", 2)
    monkeypatch.setattr(link, "LINK_CHUNK", 2)
    root, paths = inputs
    beam = _run(paths, root, case, 3, beam=True)
    mem = _run(paths, root, case, 1)
    names = sorted(p.name for p in mem.glob("samples-*"))
    assert names == sorted(p.name for p in beam.glob("samples-*"))
    for name in names:
        assert (beam / name).read_bytes() == (mem / name).read_bytes(), name
    beam_counters = json.loads((beam / "run_summary.json").read_text())["counters"]
    assert beam_counters["subgraphs"] > 32 * 2
