"""The local runner's data plane: no lost writes, and bounded messages to worker processes.

Beam's time-flushed stream is shown to drop a write made while its periodic flush waits on
the send queue, and a run of the local runner is shown to create none of them. The chunks are checked against Beam's own partition of the same grouped data (the same
elements, in the same order, for the same worker); a two-process pipeline checks that a
bundle whose input spans many messages runs to the right result (sending it all before the
bundle starts would block on the worker's input queue).
"""

from __future__ import annotations

import threading

import apache_beam as beam
from apache_beam import coders
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.coders.coders import GlobalWindowCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.runners.worker import data_plane
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, window

from pipelines.beam_patches import streamed_inputs
from pipelines.runtime.runner import LocalRunner

KEY_VALUE = coders.TupleCoder([coders.VarIntCoder(), coders.BytesCoder()])
GROUPED = coders.TupleCoder([coders.VarIntCoder(), coders.IterableCoder(coders.BytesCoder())])


def _buffer(values_per_key: int, value_bytes: int, keys: int) -> execution.GroupingBuffer:
    pre = coders.WindowedValueCoder(KEY_VALUE, GlobalWindowCoder())
    post = coders.WindowedValueCoder(GROUPED, GlobalWindowCoder())
    buffer = execution.GroupingBuffer(pre, post, core.Windowing(window.GlobalWindows()))
    stream = create_OutputStream()
    for i in range(keys * values_per_key):
        value = bytes([i % 251]) * value_bytes
        pre.get_impl().encode_to_stream(
            window.GlobalWindows.windowed_value((i % keys, value)), stream, True
        )
    buffer.append(stream.get())
    return buffer


def _elements(chunks: list[bytes]) -> list:
    impl = coders.WindowedValueCoder(GROUPED, GlobalWindowCoder()).get_impl()
    out = []
    for chunk in chunks:
        stream = create_InputStream(chunk)
        while stream.size() > 0:
            key, values = impl.decode_from_stream(stream, True).value
            out.append((key, list(values)))
    return out


def test_each_workers_part_is_beams_part_in_bounded_chunks():
    streamed_inputs.install()
    partition = execution.GroupingBuffer.partition
    beams = partition.__wrapped__(_buffer(4, 100_000, 120), 2)  # 48 MB, keys of 400 kB
    ours = partition(_buffer(4, 100_000, 120), 2)
    assert [len(part) for part in beams] == [1, 1]  # Beam: one blob per worker
    for mine, theirs in zip(ours, beams, strict=True):
        assert len(mine) >= 2
        assert all(len(chunk) < streamed_inputs.CHUNK_BYTES + 500_000 for chunk in mine)
        assert _elements(mine) == _elements(theirs)


def test_an_empty_part_sends_nothing():
    streamed_inputs.install()
    parts = execution.GroupingBuffer.partition(_buffer(2, 10, 1), 3)
    assert [len(part) for part in parts] == [1, 0, 0]


def _total(key_values):
    key, values = key_values
    return key, sum(len(v) for v in values)


def test_a_bundle_input_of_many_messages_reaches_worker_processes_whole():
    """40 MB through a GroupByKey to two worker processes: at least five 8 MB messages per
    worker, more than the worker's input queue holds before its bundle starts."""
    runner = LocalRunner()
    options = PipelineOptions(["--direct_running_mode=multi_processing", "--direct_num_workers=2"])
    with beam.Pipeline(runner=runner, options=options) as p:
        totals = (
            p
            | beam.Create([(k, k) for k in range(400)], reshuffle=False)
            | beam.MapTuple(lambda key, i: (key % 40, bytes([i % 251]) * 100_000))
            | beam.GroupByKey()
            | beam.Map(_total)
        )
        assert_that(totals, equal_to([(key, 10 * 100_000) for key in range(40)]))
    assert runner.worker_processes


def test_beams_time_flushed_stream_drops_a_write_made_during_its_flush():
    """Why install() turns the time-based flush off: the periodic flusher copies the buffer,
    waits on a full send queue, then clears the buffer, and `write` takes no lock."""
    sent, in_flush, queue_full = [], threading.Event(), threading.Event()

    def send(data: bytes) -> None:  # the flusher's hand-off to a send queue that is full
        sent.append(data)
        in_flush.set()
        queue_full.wait()

    # The first periodic flush comes 0.5 s after the stream starts, so that "first" is written
    # before it even on a loaded machine (an earlier, empty flush would block in `send`).
    stream = data_plane.TimeBasedBufferingClosableOutputStream(
        close_callback=sent.append, flush_callback=send, time_flush_threshold_ms=500
    )
    stream.write(b"first")
    assert in_flush.wait(10)
    stream.write(b"second")  # the writer goes on while the flusher waits
    queue_full.set()
    stream.close()
    assert b"".join(sent) == b"first"  # "second" is gone, and nothing said so


def test_the_local_runner_creates_no_time_flushed_stream(monkeypatch):
    """Worker threads (multi_threading) share the runner's gRPC data plane and flush their
    own outputs by time too in Beam 2.77; every stream of this run must be size-based."""
    limits = []
    create = data_plane.ClosableOutputStream.create

    def recorded(close_callback, flush_callback, data_buffer_time_limit_ms):
        limits.append(data_buffer_time_limit_ms)
        return create(close_callback, flush_callback, data_buffer_time_limit_ms)

    monkeypatch.setattr(data_plane.ClosableOutputStream, "create", staticmethod(recorded))
    options = PipelineOptions(["--direct_running_mode=multi_threading", "--direct_num_workers=2"])
    with beam.Pipeline(runner=LocalRunner(), options=options) as p:
        totals = (
            p
            | beam.Create([(k % 7, bytes(1000)) for k in range(70)], reshuffle=False)
            | beam.GroupByKey()
            | beam.Map(_total)
        )
        assert_that(totals, equal_to([(key, 10 * 1000) for key in range(7)]))
    assert limits and set(limits) == {0}
