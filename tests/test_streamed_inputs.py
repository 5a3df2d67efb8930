"""The local runner sends worker processes their input in bounded messages (streamed_inputs).

The chunks are checked against Beam's own partition of the same grouped data (the same
elements, in the same order, for the same worker); a two-process pipeline checks that a
bundle whose input spans many messages runs to the right result (sending it all before the
bundle starts would block on the worker's input queue).
"""

from __future__ import annotations

import apache_beam as beam
from apache_beam import coders
from apache_beam.coders.coder_impl import create_InputStream, create_OutputStream
from apache_beam.coders.coders import GlobalWindowCoder
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.portability.fn_api_runner import execution
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import core, window

from pipelines import streamed_inputs
from pipelines.runner import LocalRunner

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
