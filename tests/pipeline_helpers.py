"""Shared helpers for tests that run the sampling pipeline and its in-memory oracle."""

from __future__ import annotations

import collections
import glob

import tensorflow as tf

from pipelines import sample as sample_cli
from sampler.io.graph_tables import read_seed_ids, read_seed_pairs
from sampler.sample import in_memory, link
from sampler.sample.adjacency import make_seeds
from sampler.sample.dense import densify
from sampler.sample.encode import encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.sample.randomness import Randomness
from sampler.schema import load_graph
from tests.encode_oracle import encode_subgraph


def run_pipeline(schema: str, spec: str, output: str, *extra: str) -> None:
    argv = ["--graph_schema", schema, "--sampling_spec", spec, "--output_samples", output, *extra]
    assert sample_cli.main(argv) == 0


def read_records(pattern: str) -> list[bytes]:
    files = sorted(glob.glob(pattern))
    assert files, f"no output files match {pattern}"
    return [r.numpy() for f in files for r in tf.data.TFRecordDataset(f)]


def oracle_records(
    schema: str, spec: str, aggregation="edge", seed=0, input_seeds=None
) -> list[bytes]:
    """The in-memory sampler's records: an independent path over the same kernels."""
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation)
    mem = in_memory.load_dense_graph(graph, plan)
    ids = read_seed_ids(input_seeds) if input_seeds else mem.node_tables[plan.seed_set].rows.ids
    specs = encode_specs(graph.schema)
    counters = collections.Counter()
    subgraphs = in_memory.sample_in_memory(
        graph, plan, mem, make_seeds(ids), Randomness(seed), counters
    )
    return [encode_subgraph(s, specs) for s in subgraphs]


def link_oracle_subgraphs(
    schema: str,
    spec: str,
    seed_edge_set: str,
    *,
    seed=0,
    negatives=0,
    keep=False,
    input_seeds=None,
    aggregation="edge",
):
    """(subgraphs, encode specs) of the in-memory link kernel (what `--runner InMemory`
    samples): seeds from `input_seeds` or every edge of the seed edge set (edges with a
    missing endpoint too)."""
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), aggregation, seed_edge_set)
    nodes, adjacency = in_memory.load_tables(graph, plan)
    if input_seeds:
        pairs = read_seed_pairs(input_seeds)
    else:
        pairs = link.edge_pairs(adjacency[seed_edge_set])
    specs = encode_specs(link.link_output_schema(graph.schema, plan))
    subgraphs = link.sample_links_in_memory(
        graph,
        plan,
        densify(graph, nodes, adjacency),
        link.make_link_seeds(*pairs),
        Randomness(seed),
        collections.Counter(),
        negatives,
        keep,
    )
    return subgraphs, specs


def link_oracle_records(schema: str, spec: str, seed_edge_set: str, **options) -> list[bytes]:
    """The in-memory link kernel's records (link_oracle_subgraphs, encoded)."""
    subgraphs, specs = link_oracle_subgraphs(schema, spec, seed_edge_set, **options)
    return [encode_subgraph(s, specs) for s in subgraphs]
