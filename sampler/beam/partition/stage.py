"""The whole partition stage as one PTransform: read, classes, method, write."""

from __future__ import annotations

from typing import NamedTuple

import apache_beam as beam

from sampler.beam.partition.classes import ClassifyNodes
from sampler.beam.partition.config import PartitionConfig
from sampler.beam.partition.methods import (
    LabelPropagation,
    LPInputs,
    MethodInputs,
    MetisParts,
    RandomParts,
)
from sampler.beam.partition.read import ReadPartitionGraph
from sampler.beam.partition.write import WriteInputs, WritePartitions
from sampler.schema import GraphInfo


class PartitionOutputs(NamedTuple):
    """What PartitionGraph returns."""

    report: beam.PCollection  # singleton partition report, once every file is written
    bad_records: beam.PCollection  # dead-letter lines of every input table


class PartitionGraph(beam.PTransform):
    """The whole stage: read, classes, parts by --part_method, write the DGL folder."""

    def __init__(
        self, graph: GraphInfo, config: PartitionConfig, output_dir: str, max_bad_records: int = 0
    ):
        super().__init__()
        self._graph = graph
        self._config = config
        self._types = config.graph_types(graph)
        self._out = output_dir
        self._max_bad = max_bad_records

    def expand(self, pbegin) -> PartitionOutputs:
        config, types = self._config, self._types
        read = pbegin | "Read" >> ReadPartitionGraph(
            self._graph, types, config.num_shards, self._max_bad
        )
        classes = (read.nodes, read.edges, read.starts) | "Classes" >> ClassifyNodes(
            types, config.balance_ntypes
        )
        facts = MethodInputs(classes.info, read.edges, read.starts, classes.class_table)
        if config.part_method == "metis":
            parts = facts | "Metis" >> MetisParts(config, types)
        else:
            parts = classes.info | "Random" >> RandomParts(config)
            if config.part_method == "lp":
                lp = LPInputs(*facts, initial=parts)
                parts = lp | "LabelPropagation" >> LabelPropagation(config, types)
        written = WriteInputs(
            read.nodes, read.edges, read.starts, parts, classes.info, classes.class_table
        )
        report = written | "Write" >> WritePartitions(config, types, self._out)
        return PartitionOutputs(report, read.bad_records)
