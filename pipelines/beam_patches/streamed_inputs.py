"""How the local runner moves data to and from SDK workers: bounded messages, no lost writes.

Two problems of Beam 2.77's FnApiRunner with gRPC workers (`--direct_running_mode=
multi_processing`, and `multi_threading`, whose workers are threads behind the same gRPC data
plane), and what `install()` (once per process; `LocalRunner` calls it) does about them:

1. **Lost writes.** The runner's data plane (and, with `multi_threading`, each worker's)
   buffers an output stream with a 1 s periodic flush (`worker_handlers.
   DATA_BUFFER_TIME_LIMIT_MS`, `data_plane.TimeBasedBufferingClosableOutputStream`). Its
   flush takes a lock but `write` does not: the flusher copies the buffer, hands the copy to
   the send queue, which blocks while the queue is full, and then clears the buffer, so
   whatever was written meanwhile is dropped without an error. Runs at 10k-100k papers lost
   grouped rows that way, with worker processes (the `topology` placement) and with worker
   threads (a partition run lost 22k edges of two parts). `install()` sets the time limit to
   0, so every stream is Beam's size-based one, flushed only by the thread that writes it
   (tests/test_streamed_inputs.py reproduces the loss on Beam's class). A batch pipeline
   loses nothing by it: buffers are still sent at 10 MB and when a stream closes.
2. **Whole inputs in one message.** The runner sent each worker its whole share of a stage's
   input as one gRPC message: a GroupByKey's output is encoded as one blob per worker
   (`GroupingBuffer.partition`), and `BundleManager._send_input_to_worker` writes every blob
   of a bundle before it starts the bundle. At 100k papers the `topology` placement's
   workers each received 718 MB messages and peaked at 4 GB; at 2 GB a message passes
   protobuf's limit. Dataflow streams a shuffle's output to its workers in bounded reads.
   Here, a GroupByKey's output for each worker is cut into chunks of about CHUNK_BYTES, at
   element boundaries, and with gRPC workers a bundle's input is written chunk by chunk, each
   chunk its own message, by a thread of its own while the bundle runs. Sending the whole
   input before starting the bundle would block on the worker's input queue (5 messages),
   which the worker only drains once its bundle has started.

Same elements in the same order, so a run's outputs are the same bytes. In-process workers
(the default `in_memory` mode) run a bundle within the call that starts it, so they get
their input as before: all of it, before the bundle starts.
"""

from __future__ import annotations

import logging
import threading

from apache_beam.coders.coder_impl import create_OutputStream
from apache_beam.runners.portability.fn_api_runner import execution, fn_runner, worker_handlers
from apache_beam.runners.worker import data_plane
from apache_beam.transforms import trigger
from apache_beam.transforms.window import GlobalWindow, GlobalWindows
from apache_beam.utils import windowed_value

from pipelines.beam_patches import targets

BEAM_VERSIONS = ("2.77",)  # the Beam versions this patch was written for
# What it replaces or relies on: (owner, attribute, source digest; None: it must exist), checked
# by install() (beam_patches.targets).
TARGETS = (
    (worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", None),  # set to 0 (problem 1)
    (data_plane, "TimeBasedBufferingClosableOutputStream", "40058eca2d66462e"),  # its lost writes
    (execution.GroupingBuffer, "__init__", "f71fb81f6a060108"),  # the fields chunked() reads
    (execution.GroupingBuffer, "partition", "140537a87a1f2648"),  # replaced by chunked_partition
    (fn_runner.BundleManager, "_send_input_to_worker", "ac21c0a68b72104a"),  # by streamed_send
)

CHUNK_BYTES = 8 << 20  # below the data plane's 10 MB flush threshold
_lock = threading.Lock()


def _windowed_key_values(windowing):
    """(key, values) -> the grouped elements, as Beam 2.77's GroupingBuffer.partition makes them."""
    if not windowing.is_default():
        return trigger.create_trigger_driver(windowing, True).process_entire_key
    pane = windowed_value.PaneInfo(
        is_first=True,
        is_last=True,
        timing=windowed_value.PaneInfoTiming.ON_TIME,
        index=0,
        nonspeculative_index=0,
    )
    in_window = GlobalWindows.windowed_value(
        None, timestamp=GlobalWindow().max_timestamp(), pane_info=pane
    ).with_value
    return lambda key, values: [in_window((key, values))]


def chunked_partition(partition):
    """GroupingBuffer.partition with each worker's part in chunks of about CHUNK_BYTES (cut
    between keys) instead of one blob; keys go to workers as in Beam's (key i to i % n)."""

    def chunked(self, n: int) -> list[list[bytes]]:
        if self._grouped_output:  # Beam partitions a buffer once
            return self._grouped_output
        elements = _windowed_key_values(self._windowing)
        coder, key_coder = self._post_grouped_coder.get_impl(), self._key_coder.get_impl()
        parts: list[list[bytes]] = [[] for _ in range(n)]
        streams = [create_OutputStream() for _ in range(n)]
        for index, encoded_key in enumerate(list(self._table)):
            values = self._table.pop(encoded_key)  # each key's values freed once encoded
            part = index % n
            for element in elements(key_coder.decode(encoded_key), values):
                coder.encode_to_stream(element, streams[part], True)
            if streams[part].size() >= CHUNK_BYTES:
                parts[part].append(streams[part].get())
                streams[part] = create_OutputStream()
        for part, stream in enumerate(streams):
            if stream.size():
                parts[part].append(stream.get())
        self._grouped_output = parts
        self._table.clear()
        return parts

    chunked.__wrapped__ = partition
    return chunked


def streamed_send(send):
    """BundleManager._send_input_to_worker, sending chunk by chunk from a thread of its own
    to a worker process; in-process workers get their input as before."""

    def send_streamed(self, process_bundle_id, read_transform_id, byte_streams) -> None:
        if isinstance(self._worker_handler.data_conn, data_plane.InMemoryDataChannel):
            return send(self, process_bundle_id, read_transform_id, byte_streams)
        out = self._worker_handler.data_conn.output_stream(process_bundle_id, read_transform_id)

        def write() -> None:
            try:
                for chunk in byte_streams or []:
                    out.write(chunk)
                    out.maybe_flush()
                out.close()
            except Exception:  # the worker's channel failed; the bundle fails with it
                logging.exception("sending the input of %s failed", process_bundle_id)
                raise

        threading.Thread(target=write, name=f"input-{process_bundle_id}", daemon=True).start()

    send_streamed.__wrapped__ = send
    return send_streamed


def install() -> None:
    """Size-based data plane streams, chunked partitions and streamed inputs (once per
    process)."""
    with _lock:
        if not hasattr(execution.GroupingBuffer.partition, "__wrapped__"):
            targets.check(__name__, BEAM_VERSIONS, TARGETS)
        # Read when the runner starts its gRPC data plane and its in-process gRPC workers.
        worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0
        if hasattr(execution.GroupingBuffer.partition, "__wrapped__"):
            return
        execution.GroupingBuffer.partition = chunked_partition(execution.GroupingBuffer.partition)
        manager = fn_runner.BundleManager
        manager._send_input_to_worker = streamed_send(manager._send_input_to_worker)
