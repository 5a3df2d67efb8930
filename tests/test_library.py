"""The library entry point, sampler.beam.SampleGraphTensors, inside a user's own pipeline."""

from __future__ import annotations

import collections

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from sampler.beam import SampledExamples, SampleGraphTensors
from sampler.sample import link
from sampler.sample.encode import decode_subgraph, encode_specs
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests import pipeline_helpers as helpers
from tests.pipeline_helpers import oracle_records

LINK_SPEC = """
symmetric_link_seed_op { op_name: "seed" }
sampling_ops { op_name: "papers" input_op_names: "seed" edge_set_name: "writes" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "authors" input_op_names: "seed" edge_set_name: "written" sample_size: 3
  strategy: RANDOM_UNIFORM }
sampling_ops { op_name: "cited" input_op_names: "seed" input_op_names: "papers"
  edge_set_name: "cites" sample_size: 2 strategy: RANDOM_UNIFORM }
"""


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("lib_mag")
    graph = synthetic.generate_mag(80, seed=4, feature_dim=3, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="tfrecord")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return schema, spec


@pytest.fixture(scope="module")
def mag_links(tmp_path_factory):
    """(schema, link spec, seeds.csv of 3 writes edges, the writes edges as id pairs)."""
    root = tmp_path_factory.mktemp("lib_links")
    graph = synthetic.generate_mag(40, seed=4, feature_dim=3)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="tfrecord")
    (root / "spec.pbtxt").write_text(LINK_SPEC)
    writes = graph.tables["writes"]
    pairs = list(
        zip(writes.column("#source").to_pylist(), writes.column("#target").to_pylist(), strict=True)
    )
    seeds = root / "seeds.csv"
    seeds.write_text(
        "#source,#target\n" + "".join(f"{s.decode()},{t.decode()}\n" for s, t in pairs[:3])
    )
    return schema, str(root / "spec.pbtxt"), str(seeds), pairs


def link_oracle_records(schema, spec, seed, negatives, keep, input_seeds=None) -> list[bytes]:
    """The in-memory link kernel's records (what `--runner InMemory` writes)."""
    return helpers.link_oracle_records(
        schema,
        spec,
        "writes",
        seed=seed,
        negatives=negatives,
        keep=keep,
        input_seeds=input_seeds,
    )


def run_links(schema, spec, expected, seed=5, **options) -> None:
    """Samples in a user's pipeline; asserts the examples are `expected` (any order)."""
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        sampled = pipeline | "Links" >> SampleGraphTensors(
            schema, spec, seed=seed, num_shards=3, num_buckets=4, **options
        )
        assert_that(sampled.examples, equal_to(expected), label="SameRecords")
        assert_that(sampled.bad_records, equal_to([]), label="NoBadRecords")


def decode_links(schema, spec, records):
    graph = load_graph(schema)
    plan = make_plan(graph, load_sampling_spec(spec), "edge", "writes")
    specs = encode_specs(link.link_output_schema(graph.schema, plan))
    return [decode_subgraph(r, specs) for r in records]


def test_link_examples_equal_in_memory_every_edge_with_negatives(mag_links):
    schema, spec, _, pairs = mag_links
    expected = link_oracle_records(schema, spec, 5, negatives=1, keep=False)
    # One positive and one negative per writes edge of the generated graph.
    labels = collections.Counter(
        int(sub.node_sets[link.READOUT].features[link.LABEL][0])
        for sub in decode_links(schema, spec, expected)
    )
    assert labels == {0: len(pairs), 1: len(pairs)}
    run_links(schema, spec, expected, seed_edge_set="writes", negatives_per_seed=1)


def test_link_examples_from_input_seeds_keep_seed_edges(mag_links):
    schema, spec, seeds, pairs = mag_links
    kept = link_oracle_records(schema, spec, 5, 0, True, seeds)
    dropped = link_oracle_records(schema, spec, 5, 0, False, seeds)
    assert len(kept) == len(dropped) == 3

    def has_seed_edge(sub):
        a, p = sub.node_sets["author"].ids, sub.node_sets["paper"].ids
        w, r = sub.edge_sets["writes"], sub.edge_sets["written"]
        edges = {(a[s], p[t]) for s, t in zip(w.source, w.target, strict=True)}
        edges |= {(a[t], p[s]) for s, t in zip(r.source, r.target, strict=True)}
        assert (a[0], p[0]) in set(pairs[:3])  # the seed edge's endpoints are node 0
        return (a[0], p[0]) in edges

    # Sample size 3 may miss the seed edge when kept; it is never there when dropped.
    assert any(has_seed_edge(s) for s in decode_links(schema, spec, kept))
    assert not any(has_seed_edge(s) for s in decode_links(schema, spec, dropped))
    run_links(schema, spec, kept, seed_edge_set="writes", input_seeds=seeds, keep_seed_edges=True)
    for placement in ("topology", "sharded"):
        run_links(
            schema, spec, dropped, seed_edge_set="writes", input_seeds=seeds, placement=placement
        )


def test_link_options_are_checked(mag, mag_links):
    schema, spec, _, _ = mag_links
    with pytest.raises(ValueError, match="symmetric_link_seed_op"):
        SampleGraphTensors(*mag, negatives_per_seed=1)
    with pytest.raises(ValueError, match="negatives_per_seed"):
        SampleGraphTensors(schema, spec, seed_edge_set="writes", negatives_per_seed=-1)


@pytest.mark.parametrize(
    ("placement", "aggregation"), [("worker", "node"), ("topology", "node"), ("sharded", "edge")]
)
def test_sample_graph_tensors_equals_in_memory_oracle(mag, placement, aggregation):
    schema, spec = mag
    expected = oracle_records(schema, spec, aggregation, seed=5)
    assert len(expected) == 80
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        sampled = pipeline | "MySampling" >> SampleGraphTensors(
            schema,
            load_sampling_spec(spec),  # a proto works as well as a path
            seed=5,
            placement=placement,
            aggregation=aggregation,
            num_shards=3,
            num_buckets=4,
        )
        assert isinstance(sampled, SampledExamples)
        # A user's own stage downstream: the examples are bytes, the records of the oracle.
        lengths = sampled.examples | "Sizes" >> beam.Map(len)
        assert_that(sampled.examples, equal_to(expected), label="SameRecords")
        assert_that(lengths, equal_to([len(r) for r in expected]), label="Bytes")
        assert_that(sampled.bad_records, equal_to([]), label="NoBadRecords")


def test_other_seed_gives_other_records(mag):
    schema, spec = mag
    with beam.Pipeline(runner=FnApiRunner()) as pipeline:
        sampled = pipeline | SampleGraphTensors(schema, spec, seed=6, num_shards=2, num_buckets=2)
        assert_that(sampled.examples, equal_to(oracle_records(schema, spec, "edge", seed=6)))
    assert sorted(oracle_records(schema, spec, "edge", seed=6)) != sorted(
        oracle_records(schema, spec, "edge", seed=5)
    )


def test_unknown_placement_is_refused(mag):
    schema, spec = mag
    with pytest.raises(ValueError, match="placement"):
        SampleGraphTensors(schema, spec, placement="everywhere")
