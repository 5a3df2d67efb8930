"""The library entry point, sampler.beam.SampleGraphTensors, inside a user's own pipeline."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.runners.portability.fn_api_runner import FnApiRunner
from apache_beam.testing.util import assert_that, equal_to

from sampler.beam import SampledExamples, SampleGraphTensors
from sampler.sample.plan import load_sampling_spec
from sampler.tools import synthetic
from tests.pipeline_helpers import oracle_records


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("lib_mag")
    graph = synthetic.generate_mag(80, seed=4, feature_dim=3, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="tfrecord")
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    return schema, spec


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
