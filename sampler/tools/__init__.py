"""Kernels of the interactive tools: estimate, probe, statistics, rendering, the graph generator."""
