"""Partitioning a Unigraph into DGL partitions: pure numpy kernels (no Beam).

  graph.py   node/edge types, fingerprint-range node shards, original type-wise ids
  assign.py  the partition methods random and metis (pymetis)
  label_propagation.py, clustering.py  lp: balanced label propagation and its clustered start
  numbering.py, classes.py, random_deal.py, new_ids.py, to_parts.py  per-shard kernels of
             the Beam jobs of sampler/beam/partition/
  dgl_format.py, dgl_read.py  DGL's binary files, written and read (docs/DGL_FORMAT.md)
  layout.py  DGL's reshuffled id spaces, one partition's graph.dgl / feature files, the JSON
  output_format.py  what the files hold for their consumer: --layout dgl|graphstorm, masks
             and --split, GraphStorm's raw id mappings
  report.py  edge cut and balance (cut_report.json)

`sampler/beam/partition/` wraps them in PTransforms; `pipelines/partition.py` is the CLI.
"""
