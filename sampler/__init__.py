"""Beam-free kernels and thin Beam transforms for sampling and partitioning graphs."""
