"""Thin Beam PTransforms wiring the numpy/Arrow kernels of `sampler`."""
