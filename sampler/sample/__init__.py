"""The sampling stage's kernels: plan, adjacency, sampling, assembly, encoding (no Beam, no TF)."""
