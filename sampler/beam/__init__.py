"""Beam PTransforms of the sampler; `SampleGraphTensors` is the library entry point.

Exported lazily, so that importing one transform module (say, the partition stage's) does
not import the sampling stage.
"""

from sampler.io import gcs

gcs.prepare()  # in SDK workers too: an emulator's anonymous access, bounded GCS retries

__all__ = ["SampleGraphTensors", "SampledExamples", "SamplingOptions"]


def __getattr__(name: str):
    if name in __all__:
        from sampler.beam.sample import graph_tensors

        return getattr(graph_tensors, name)
    raise AttributeError(f"module 'sampler.beam' has no attribute {name!r}")
