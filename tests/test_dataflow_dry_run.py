"""The Dataflow job of each stage builds offline: Beam's DataflowRunner with --dry_run=True.

The dry run goes through the real CLI code path (argument parsing, graph loading, plan,
pipeline construction) and the whole DataflowRunner translation up to the job request,
which it does not send: no network, no credentials. On top of it the tests check:
  * every transform pickles, and its pickled form loads in a fresh interpreter that has
    only the installed packages (as a Dataflow worker has);
  * the options are accepted: none is unknown to Beam, and they reach the job request
    (worker pool, container image, experiments), built with Beam's own request builder;
  * the job graph holds the expected stages.
Input files are listed when the pipeline is built, so a small local graph stands in for
gs://; the output path is gs:// (nothing is written at construction time).
"""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.internal import pickler
from apache_beam.internal.cloudpickle import cloudpickle
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.portability import common_urns, python_urns
from apache_beam.portability.api import beam_runner_api_pb2
from apache_beam.runners.dataflow.internal import apiclient

from pipelines import partition as partition_cli
from pipelines import sample as sample_cli
from sampler.sample.plan import load_sampling_spec, make_plan
from sampler.schema import load_graph
from sampler.tools import synthetic
from tests.test_launch_dataflow import commands, launch, stage_command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IMAGE = "europe-west4-docker.pkg.dev/fake-project/graphs/graph-sampler:test"
DATAFLOW = [
    "--runner",
    "DataflowRunner",
    "--project",
    "fake-project",
    "--region",
    "europe-west4",
    "--temp_location",
    "gs://fake-bucket/tmp",
    "--staging_location",
    "gs://fake-bucket/staging",
    "--sdk_container_image",
    IMAGE,
    "--experiments=use_runner_v2",
    "--job_name",
    "graph-sample-dry-run",
    "--max_num_workers",
    "12",
    "--machine_type",
    "n2-highmem-4",
    "--subnetwork",
    "regions/europe-west4/subnetworks/private",
    "--no_use_public_ips",
    "--service_account_email",
    "sampler@fake-project.iam.gserviceaccount.com",
    "--dry_run=True",
]
PARDO = common_urns.primitives.PAR_DO.urn
BUILT_IN_DOFNS = {python_urns.KEY_WITH_NONE_DOFN}  # CombineGlobally's KeyWithVoid
COMBINE_URNS = {
    common_urns.composites.COMBINE_PER_KEY.urn,
    common_urns.composites.COMBINE_GLOBALLY.urn,
    common_urns.combine_components.COMBINE_PER_KEY_PRECOMBINE.urn,
    common_urns.combine_components.COMBINE_PER_KEY_MERGE_ACCUMULATORS.urn,
    common_urns.combine_components.COMBINE_PER_KEY_EXTRACT_OUTPUTS.urn,
    common_urns.combine_components.COMBINE_GROUPED_VALUES.urn,
}


@pytest.fixture(scope="module")
def mag(tmp_path_factory):
    root = tmp_path_factory.mktemp("dry_mag")
    graph = synthetic.generate_mag(40, seed=2, feature_dim=4, edge_weights=True)
    schema = synthetic.write_graph(graph, str(root / "graph"), fmt="tfrecord", num_shards=2)
    spec = synthetic.write_sampling_spec(synthetic.mag_sampling_spec(), str(root / "spec.pbtxt"))
    seeds = root / "seeds.csv"
    seeds.write_text("#id\np1\np2\np1\n")
    return schema, spec, str(seeds)


def dry_run_sample(argv):
    """Builds the sample stage exactly as `python -m pipelines.sample argv` does, and runs it
    on the DataflowRunner in dry-run mode. Returns (construction, result)."""
    job = sample_cli.construct(argv)
    result = job.pipeline.run()
    return job, result


def sample_argv(mag, *extra):
    schema, spec, _ = mag
    return [
        "--graph_schema",
        schema,
        "--sampling_spec",
        spec,
        "--output_samples",
        "gs://fake-bucket/samples/samples@16",
        *extra,
        *DATAFLOW,
    ]


def job_request_environment(job: apiclient.Job):
    """The `environment` part of the Dataflow job request, built by Beam's own code, as the
    real submission does after staging (staging itself needs GCS and is skipped)."""
    return apiclient.Environment(
        packages=[],
        options=job.options,
        environment_version=apiclient._FNAPI_ENVIRONMENT_MAJOR_VERSION,
        proto_pipeline_staged_url="gs://fake-bucket/staging/pipeline.pb",
        proto_pipeline=job.proto_pipeline,
    ).proto


def pickled_payloads(proto: beam_runner_api_pb2.Pipeline) -> dict[str, tuple[str, bytes]]:
    """{transform name: (kind, pickled payload)} of every DoFn and CombineFn in the job."""
    out = {}
    for transform in proto.components.transforms.values():
        urn = transform.spec.urn
        if urn == PARDO:
            payload = beam_runner_api_pb2.ParDoPayload.FromString(transform.spec.payload)
            if payload.do_fn.urn in BUILT_IN_DOFNS:  # Beam's own, with no pickled payload
                continue
            assert payload.do_fn.urn == python_urns.PICKLED_DOFN_INFO, transform.unique_name
            out[transform.unique_name] = ("dofn", payload.do_fn.payload)
        elif urn in COMBINE_URNS:
            payload = beam_runner_api_pb2.CombinePayload.FromString(transform.spec.payload)
            out[transform.unique_name] = ("combinefn", payload.combine_fn.payload)
    return out


def stage_names(proto) -> set[str]:
    return {t.unique_name for t in proto.components.transforms.values()}


def unknown_options(argv: list[str]) -> set[str]:
    options = PipelineOptions(argv)
    known = set(options.get_all_options())
    return set(options.get_all_options(retain_unknown_options=True)) - known


def check_job(job, result, image=IMAGE):
    """What every dry-run job must show: built, Docker environment, picklable transforms."""
    assert result.state == beam.runners.runner.PipelineState.DONE
    dataflow_job = result.job
    assert isinstance(dataflow_job, apiclient.Job)
    proto = dataflow_job.proto_pipeline
    envs = proto.components.environments
    assert envs, "the job has no environment"
    for env in envs.values():
        assert env.urn == common_urns.environments.DOCKER.urn
        docker = beam_runner_api_pb2.DockerPayload.FromString(env.payload)
        assert docker.container_image == image
    return dataflow_job, proto


WORKER_CHECK = """
import pickle, sys
from apache_beam.internal import pickler
import apache_beam as beam
payloads = pickle.load(open(sys.argv[1], "rb"))
for name, (kind, data) in sorted(payloads.items()):
    obj = pickler.loads(data)
    fn = obj[0] if kind == "dofn" else obj
    want = beam.DoFn if kind == "dofn" else beam.CombineFn
    assert isinstance(fn, want), (name, type(fn))
    if kind == "dofn":
        fn.setup()
        fn.teardown()
print(len(payloads))
"""


@pytest.mark.parametrize("placement", ["sharded", "worker"])
def test_sample_job_builds_on_dataflow_dry_run(mag, tmp_path, placement):
    schema, spec, _ = mag
    job, result = dry_run_sample(sample_argv(mag, "--seed", "4", "--graph_placement", placement))
    dataflow_job, proto = check_job(job, result)
    assert dataflow_job.proto.name == "graph-sample-dry-run"

    # The expected stages, named as on the Dataflow console.
    plan = make_plan(load_graph(schema), load_sampling_spec(spec), "edge")
    assert len(plan.ops) == 5
    names = stage_names(proto)
    expected = {"ReadGraph", "Seeds", "Sample", "Write", "Write/Concat"}
    if placement != "worker":  # `worker` writes each shard's part where it samples
        expected.add("Write/Parts")
    if placement == "sharded":  # hop by hop over the sharded graph
        expected |= {f"ReadGraph/Adjacency/{op.edge_set}" for op in plan.ops}
        expected |= {"ReadGraph/ReadNodes/paper", "ReadGraph/NodeTable/paper"}
        expected |= {f"Sample/Op/{op.name}" for op in plan.ops} | {"Sample/Assemble"}
    else:  # the tables read into one graph snapshot, mapped once per machine
        expected |= {"ReadGraph/Build", "ReadGraph/SeedTables"}
        expected |= {"Sample/Group", "Sample/SampleBuckets", "RemoveSnapshot"}
        assert not {n for n in names if n.startswith(("Sample/Op/", "ReadGraph/Adjacency"))}
    assert expected <= names, sorted(expected - names)

    # Every DoFn made it into the job pickled, and loads on a "worker": a fresh interpreter
    # that imports only installed packages, runs setup() and teardown().
    payloads = pickled_payloads(proto)
    sampler_fns = [n for n in payloads if n.startswith(("ReadGraph/", "Sample/", "Seeds"))]
    assert len(sampler_fns) >= (15 if placement == "sharded" else 6), sorted(payloads)
    dump = tmp_path / "payloads.pkl"
    dump.write_bytes(pickle.dumps(payloads))
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH="")
    worker = subprocess.run(
        [sys.executable, "-c", WORKER_CHECK, str(dump)],
        cwd=str(tmp_path),  # not the checkout: only installed modules resolve
        env=env,
        capture_output=True,
        text=True,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    assert int(worker.stdout.split()[-1]) == len(payloads)


def test_sample_options_are_all_known_and_reach_the_job_request(mag):
    argv = sample_argv(mag, "--edge_aggregation_method", "node", "--graph_placement", "sharded")
    _, beam_args = sample_cli.parse_args(argv)
    assert unknown_options(beam_args) == set()
    # A misspelt option would be dropped silently by Beam; this check is what catches it.
    assert unknown_options([*beam_args, "--max_num_worker=3"]) == {"max_num_worker"}

    job, result = dry_run_sample(argv)
    dataflow_job, proto = check_job(job, result)
    assert {n for n in stage_names(proto) if n.startswith("Sample/Induced/")}
    env = job_request_environment(dataflow_job)
    (pool,) = env.worker_pools
    assert pool.machine_type == "n2-highmem-4"
    assert pool.autoscaling_settings.max_num_workers == 12
    assert pool.subnetwork == "regions/europe-west4/subnetworks/private"
    assert (
        pool.ip_configuration == apiclient.dataflow.WorkerIPAddressConfiguration.WORKER_IP_PRIVATE
    )
    assert pool.worker_harness_container_image == IMAGE
    assert [c.container_image for c in pool.sdk_harness_container_images] == [IMAGE]
    assert env.service_account_email == "sampler@fake-project.iam.gserviceaccount.com"
    assert "use_runner_v2" in env.experiments
    assert "fake-bucket/tmp/graph-sample-dry-run." in env.temp_storage_prefix
    options = dict(env.sdk_pipeline_options["options"])
    assert options["sdk_container_image"] == IMAGE
    assert options["region"] == "europe-west4" and options["project"] == "fake-project"


def test_sample_with_input_seeds_builds(mag):
    _, _, seeds = mag
    job, result = dry_run_sample(sample_argv(mag, "--input_seeds", seeds))
    _, proto = check_job(job, result)
    names = stage_names(proto)
    assert {"ReadSeeds", "Seeds/ByShard", "Seeds/MakeSeeds"} <= names


@pytest.mark.parametrize("placement", ["sharded", "worker"])
def test_every_sample_transform_round_trips_through_cloudpickle(mag, placement):
    # Beam 2.77 pickles DoFns with its vendored cloudpickle by default (dill is an optional
    # extra, not installed here): round-trip each fn through cloudpickle and Beam's pickler.
    job = sample_cli.construct(sample_argv(mag, "--graph_placement", placement))
    fns = []

    class Collect(beam.pipeline.PipelineVisitor):
        def visit_transform(self, node):
            transform = node.transform
            if isinstance(transform, beam.ParDo):
                fns.append((node.full_label, transform.fn))
            elif isinstance(transform, beam.CombinePerKey | beam.CombineGlobally):
                fns.append((node.full_label, transform.fn))

    job.pipeline.visit(Collect())
    assert len(fns) >= 15
    for label, fn in fns:
        restored = cloudpickle.loads(cloudpickle.dumps(fn))
        assert type(restored) is type(fn), label
        assert vars(restored).keys() == vars(fn).keys(), label
        beam_restored = pickler.loads(pickler.dumps(fn))
        assert type(beam_restored) is type(fn), label


def test_the_launch_scripts_command_builds_the_same_job(mag, tmp_path):
    """What scripts/launch_dataflow.sh would submit, run as a dry run: the script's options
    and the CLI agree. Only the gs:// inputs are swapped for the local test graph."""
    schema, spec, _ = mag
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ["bash", "git", "date", "id", "dirname"]:
        os.symlink(shutil.which(tool), bin_dir / tool)
    done = launch(
        str(bin_dir),
        "sample",
        "--project",
        "fake-project",
        "--region",
        "europe-west4",
        "--bucket",
        "fake-bucket",
        "--repository",
        "graphs",
        "--image_tag",
        "test",
        "--no_use_public_ips",
        "--max_workers",
        "12",
        "--launcher",
        "local",
        "--graph_schema",
        "gs://fake-bucket/graph",
        "--sampling_spec",
        "gs://fake-bucket/spec.pbtxt",
        "--output_samples",
        "gs://fake-bucket/samples/samples@16",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    submit = commands(done.stdout)[-1]
    assert submit[submit.index("-m") + 1] == "pipelines.sample"
    argv = stage_command(submit)
    local = {"gs://fake-bucket/graph": schema, "gs://fake-bucket/spec.pbtxt": spec}
    argv = [local.get(a, a) for a in argv]
    job, result = dry_run_sample([*argv, "--dry_run=True"])
    dataflow_job, _ = check_job(job, result)
    (pool,) = job_request_environment(dataflow_job).worker_pools
    assert pool.autoscaling_settings.max_num_workers == 12
    assert pool.worker_harness_container_image == IMAGE


# --------------------------------------------------------------------------- partition


@pytest.fixture(scope="module")
def part_graph(tmp_path_factory):
    root = tmp_path_factory.mktemp("dry_part")
    graph = synthetic.generate_mag(40, seed=3, feature_dim=4, edge_weights=True)
    return synthetic.write_graph(graph, str(root / "graph"), fmt="parquet", num_shards=2)


def dry_run_partition(argv):
    """Builds the partition stage exactly as `python -m pipelines.partition argv` does, and
    runs it on the DataflowRunner in dry-run mode. Returns (construction, result)."""
    job = partition_cli.construct(argv)
    return job, job.pipeline.run()


def partition_argv(graph_schema, output_dir, *extra):
    return [
        "--graph_schema",
        graph_schema,
        "--output_dir",
        output_dir,
        "--graph_name",
        "mag",
        "--num_parts",
        "4",
        *extra,
        *[a.replace("graph-sample-", "graph-partition-") for a in DATAFLOW],
    ]


@pytest.mark.parametrize(
    "method, stage, extra",
    [
        ("random", "Partition/Random", ["--balance_edges"]),
        ("lp", "Partition/LabelPropagation", ["--lp_rounds", "2"]),
        ("metis", "Partition/Metis", []),
    ],
)
def test_partition_job_builds_on_dataflow_dry_run(part_graph, tmp_path, method, stage, extra):
    argv = partition_argv(
        part_graph, "gs://fake-bucket/parts/", "--part_method", method, "--seed", "3", *extra
    )
    assert unknown_options(partition_cli.parse_args(argv)[1]) == set()
    job, result = dry_run_partition(argv)
    assert job.output_dir == "gs://fake-bucket/parts"
    assert (job.config.part_method, job.config.num_parts, job.config.seed) == (method, 4, 3)
    dataflow_job, proto = check_job(job, result)
    assert dataflow_job.proto.name == "graph-partition-dry-run"
    # Dataflow refuses job graphs over 10 MB; lp's rounds are all in the graph.
    request = dataflow_job.proto
    sizes = len(type(request).serialize(request)), proto.ByteSize()
    print(f"job request {sizes[0]:,} bytes, pipeline proto {sizes[1]:,} bytes")
    assert max(sizes) < 10_000_000
    names = stage_names(proto)
    assert {"Partition/Read", "Partition/Classes", stage, "Partition/Write"} <= names
    assert "WriteBadRecords" in names  # the dead letters main() checks after the run
    payloads = pickled_payloads(proto)
    assert len([n for n in payloads if n.startswith("Partition/")]) >= 15
    dump = tmp_path / "payloads.pkl"
    dump.write_bytes(pickle.dumps(payloads))
    worker = subprocess.run(
        [sys.executable, "-c", WORKER_CHECK, str(dump)],
        cwd=str(tmp_path),
        env=dict(os.environ, TF_USE_LEGACY_KERAS="1", PYTHONPATH=""),
        capture_output=True,
        text=True,
    )
    assert worker.returncode == 0, worker.stderr[-3000:]
    (pool,) = job_request_environment(dataflow_job).worker_pools
    assert pool.worker_harness_container_image == IMAGE
    assert pool.machine_type == "n2-highmem-4"


# --------------------------------------------------------------------------- both stages


class Waited(Exception):
    """Raised by FakeDataflowResult.wait_until_finish: the CLI got as far as waiting."""


class FakeDataflowResult:
    """What DataflowRunner.run returns once a job is submitted (DataflowPipelineResult):
    a job id, and a wait that here stops the CLI, recording what it had printed by then."""

    has_job = True

    def __init__(self, capsys):
        self._capsys = capsys

    def job_id(self):
        return "2026-01-02_03_04_05-123"

    def wait_until_finish(self, duration=None):
        raise Waited(self._capsys.readouterr().out)


@pytest.mark.parametrize("stage", ["sample", "partition"])
def test_cli_prints_the_dataflow_job_before_waiting(mag, part_graph, tmp_path, stage, capsys):
    """The CLIs print the job id and console URL right after submission, before waiting:
    scripts/launch_dataflow.sh reads `dataflow job: ID` from that output."""
    if stage == "sample":
        cli = sample_cli
        argv = [*sample_argv(mag, "--progress_interval", "0")]
        argv[argv.index("gs://fake-bucket/samples/samples@16")] = str(tmp_path / "out/s@2")
    else:
        cli = partition_cli
        argv = partition_argv(part_graph, str(tmp_path / "parts"))
    submitted = []

    def run(pipeline, test_runner_api="AUTO"):
        submitted.append(pipeline)
        return FakeDataflowResult(capsys)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(beam.Pipeline, "run", run)
        with pytest.raises(Waited) as waited:
            cli.main_body(argv)
    assert len(submitted) == 1
    url = "https://console.cloud.google.com/dataflow/jobs/europe-west4/2026-01-02_03_04_05-123"
    assert str(waited.value).splitlines()[-2:] == [
        "dataflow job: 2026-01-02_03_04_05-123",
        f"console: {url}?project=fake-project",
    ]
