"""Partitioning a Unigraph into DGL partitions: pure numpy kernels (no Beam).

  graph.py   node/edge types, fingerprint-range node shards, original type-wise ids
  assign.py  the partition methods: random, metis (pymetis), balanced label propagation
  layout.py  DGL's reshuffled id spaces, one partition's graph.dgl / feature files, the JSON
  report.py  edge cut and balance

`sampler/beam/partition.py` wraps them in PTransforms; `pipelines/partition.py` is the CLI.
"""
