"""Beam pipeline entry points (thin CLIs)."""

import sampler  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow is imported)
