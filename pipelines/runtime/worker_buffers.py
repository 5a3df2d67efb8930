"""Bounds on what an SDK worker process buffers for the local runner's data plane.

Measured (`sharded` placement, 20k papers, 2k seeds, 2 SDK worker processes): Beam
2.77's SDK worker buffers each output stream of a bundle up to 10 MB before it sends it
(`data_plane.SizeBasedBufferingClosableOutputStream`, a buffer that grows by doubling, so up
to 16 MB), and queues up to 100 MB of sent messages twice over (`_DEFAULT_SEND_QUEUE_MAX_BYTES`,
its staging queue and its send queue). A fused stage of the `sharded` placement writes one
stream per shuffle it feeds (every op's frontier, every node set's requests, every bucket
piece): dozens of streams, so hundreds of MB that do not depend on the graph. With the
thresholds below the largest SDK worker peaked at 0.57-0.64 GB instead of 0.84-0.90 GB, with
the same records. glibc's arenas are capped at 2 (Beam's gRPC threads otherwise each get one,
and freed memory stays with the arena that held it), and each bundle's freed pages are given
back when it ends (`malloc_trim`): the heap's free share had reached 0.2 GB at 50k papers.

`bound()` runs in each SDK worker process that `pipelines.runtime.sdk_fork_server` forks, before Beam's
harness starts; Beam's own cold workers (BEAM_GRAPH_FORK_WORKERS=0) and Dataflow's keep Beam's
defaults.
"""

from __future__ import annotations

import inspect

from sampler import memory

STREAM_FLUSH_BYTES = 1 << 20  # an output stream is sent once it holds this many bytes
SEND_QUEUE_BYTES = 16 << 20  # each of the two send queues
MALLOC_ARENAS = 2
_M_ARENA_MAX = -8  # glibc's mallopt parameter


def bound() -> None:
    """Smaller data plane buffers and fewer malloc arenas in this SDK worker process."""
    from apache_beam.runners.worker import data_plane

    data_plane._DEFAULT_SEND_QUEUE_MAX_BYTES = SEND_QUEUE_BYTES  # read by each new channel
    init = data_plane.SizeBasedBufferingClosableOutputStream.__init__
    names = list(inspect.signature(init).parameters)
    defaults = list(init.__defaults__)
    # The default of size_flush_threshold, found by its name: a Beam whose stream lacks it
    # stops here (KeyError/ValueError) instead of changing another parameter.
    defaults[names.index("size_flush_threshold") - (len(names) - len(defaults))] = (
        STREAM_FLUSH_BYTES
    )
    init.__defaults__ = tuple(defaults)
    libc = memory.glibc()
    if libc is None:
        return
    libc.mallopt(_M_ARENA_MAX, MALLOC_ARENAS)
    from apache_beam.runners.worker import bundle_processor

    process_bundle = bundle_processor.BundleProcessor.process_bundle
    if getattr(process_bundle, "_trims", False):
        return

    def trimmed(self, *args, **kwargs):
        try:
            return process_bundle(self, *args, **kwargs)
        finally:
            libc.malloc_trim(0)  # the bundle's freed pages back to the system

    trimmed._trims = True
    bundle_processor.BundleProcessor.process_bundle = trimmed
