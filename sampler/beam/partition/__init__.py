"""The partition stage's PTransforms, one module per job:

  config.py     PartitionConfig, METHODS and helpers every job shares
  read.py       read and number: node and edge shards with original ids
  classes.py    the balance class and in-degree of every node
  methods.py    the methods: random, metis, label propagation (from clustering.py's start)
  new_ids.py    DGL's new ids of nodes and edges
  write.py      the files of every part, node id tables, partition JSON and report
  halo.py       HALO hops 2..--num_hops
  stage.py      PartitionGraph: all of the above
  combiners.py  the CombineFns of the stage
  sized.py      ArraysCoder: shards whose size Beam estimates without pickling them

Joins are sampler/beam/join.py (shared with sampling). The numpy kernels they call are in
sampler/partition/; pipelines/partition.py is the CLI.

Exported lazily: config.py imports no Beam, so the CLI's in-memory runner
(pipelines/partition_in_memory.py) takes the same PartitionConfig without loading apache_beam.
"""

__all__ = ["METHODS", "PartitionConfig", "PartitionGraph", "PartitionOutputs"]


def __getattr__(name: str):
    if name in ("METHODS", "PartitionConfig"):
        from sampler.beam.partition import config

        return getattr(config, name)
    if name in ("PartitionGraph", "PartitionOutputs"):
        from sampler.beam.partition import stage

        return getattr(stage, name)
    raise AttributeError(f"module 'sampler.beam.partition' has no attribute {name!r}")
