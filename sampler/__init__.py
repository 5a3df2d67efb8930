"""Beam-free kernels and thin Beam transforms for sampling and partitioning graphs."""

import os

# tensorflow_gnn refuses to import under Keras 3 unless this is set before TensorFlow is
# imported. Setting it here covers console scripts and Beam workers that import `sampler` first.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
