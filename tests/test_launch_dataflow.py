"""scripts/launch_dataflow.sh: the commands its dry run prints, and its one-line errors.

Dry runs need neither gcloud nor docker: the tests run the script with a PATH that has
neither, so nothing can be built or submitted by accident.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "launch_dataflow.sh")
PROJECT, REGION, BUCKET, REPO, TAG = "my-proj", "europe-west4", "my-bucket", "graphs", "v1"
IMAGE = f"{REGION}-docker.pkg.dev/{PROJECT}/{REPO}/graph-sampler:{TAG}"
SETTINGS = [
    "--project",
    PROJECT,
    "--region",
    REGION,
    "--bucket",
    BUCKET,
    "--repository",
    REPO,
    "--image_tag",
    TAG,
]
SAMPLE = [
    "--graph_schema",
    "gs://my-bucket/graph",
    "--sampling_spec",
    "gs://my-bucket/spec.pbtxt",
    "--output_samples",
    "gs://my-bucket/samples/samples@64",
]
TOOLS = ["bash", "cat", "git", "date", "id", "dirname", "mktemp", "sed", "head", "tee", "rm", "env"]


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory):
    """A PATH with the basic tools the script uses, and no gcloud or docker."""
    path = tmp_path_factory.mktemp("bin")
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found, tool
        os.symlink(found, path / tool)
    return str(path)


def launch(bin_dir, *args, **env):
    environ = {"PATH": bin_dir, "HOME": env.pop("HOME", "/nonexistent")}
    environ.update(env)
    return subprocess.run(
        ["bash", SCRIPT, *args], env=environ, capture_output=True, text=True, cwd=ROOT
    )


def commands(stdout: str) -> list[list[str]]:
    """The commands a dry run prints: lines `+ cmd args...`, shell-quoted."""
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ ")]


def option(cmd: list[str], name: str) -> str:
    """The value of `name` in a command: `name value` or `name=value`."""
    for i, arg in enumerate(cmd):
        if arg == name:
            return cmd[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{name} not in {cmd}")


def stage_command(cmd: list[str]) -> list[str]:
    """The stage's own argv: what follows `-m pipelines.<stage>`."""
    i = cmd.index("-m")
    return cmd[i + 2 :]


def test_dry_run_prints_build_pull_and_submit_with_every_setting(bin_dir):
    done = launch(
        bin_dir,
        "sample",
        *SETTINGS,
        "--max_workers",
        "7",
        "--machine_type",
        "n2-highmem-8",
        "--network",
        "vpc1",
        "--subnetwork",
        f"regions/{REGION}/subnetworks/sub1",
        "--no_use_public_ips",
        "--service_account",
        "sampler@my-proj.iam.gserviceaccount.com",
        "--job_name",
        "mag-run-1",
        *SAMPLE,
        "--seed",
        "3",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    build, pull, submit = commands(done.stdout)
    assert build[:4] == ["gcloud", "builds", "submit", ROOT]
    assert option(build, "--project") == PROJECT
    assert option(build, "--config") == os.path.join(ROOT, "docker", "cloudbuild.yaml")
    assert option(build, "--substitutions") == f"_IMAGE={IMAGE},_RUNTIME_USER=beam"
    assert pull == ["docker", "pull", IMAGE]
    assert submit[:2] == ["docker", "run"]
    assert submit[submit.index(IMAGE) + 1 : submit.index(IMAGE) + 4] == [
        "python",
        "-m",
        "pipelines.sample",
    ]
    args = stage_command(submit)
    assert args[: len(SAMPLE) + 2] == [*SAMPLE, "--seed", "3"]
    expected = {
        "--runner": "DataflowRunner",
        "--project": PROJECT,
        "--region": REGION,
        "--temp_location": f"gs://{BUCKET}/tmp",
        "--staging_location": f"gs://{BUCKET}/staging",
        "--sdk_container_image": IMAGE,
        "--experiments": "use_runner_v2",
        "--job_name": "mag-run-1",
        "--max_num_workers": "7",
        "--machine_type": "n2-highmem-8",
        "--network": "vpc1",
        "--subnetwork": f"regions/{REGION}/subnetworks/sub1",
        "--service_account_email": "sampler@my-proj.iam.gserviceaccount.com",
    }
    for name, value in expected.items():
        assert option(args, name) == value, name
    assert "--no_use_public_ips" in args
    assert "would run in my-proj/europe-west4" in done.stdout


def test_environment_variables_give_the_same_commands_and_flags_win(bin_dir):
    by_flags = launch(bin_dir, "sample", *SETTINGS, *SAMPLE, "--job_name", "j1", "--dry-run")
    by_env = launch(
        bin_dir,
        "sample",
        *SAMPLE,
        "--dry-run",
        GCP_PROJECT=PROJECT,
        GCP_REGION=REGION,
        GCS_BUCKET=f"gs://{BUCKET}/",
        AR_REPOSITORY=REPO,
        IMAGE_TAG=TAG,
        JOB_NAME="j1",
    )
    assert by_flags.returncode == by_env.returncode == 0, by_env.stderr
    assert commands(by_flags.stdout) == commands(by_env.stdout)
    override = launch(
        bin_dir, "sample", *SETTINGS, *SAMPLE, "--max_workers", "3", "--dry-run", MAX_WORKERS="50"
    )
    assert option(stage_command(commands(override.stdout)[-1]), "--max_num_workers") == "3"
    from_env = launch(
        bin_dir,
        "sample",
        *SETTINGS,
        *SAMPLE,
        "--dry-run",
        MAX_WORKERS="50",
        MACHINE_TYPE="c3-highmem-8",
        NO_USE_PUBLIC_IPS="1",
        SERVICE_ACCOUNT="sa@p.iam.gserviceaccount.com",
        NETWORK="n",
        SUBNETWORK="s",
    )
    args = stage_command(commands(from_env.stdout)[-1])
    assert option(args, "--max_num_workers") == "50"
    assert option(args, "--machine_type") == "c3-highmem-8"
    assert option(args, "--service_account_email") == "sa@p.iam.gserviceaccount.com"
    assert option(args, "--network") == "n" and option(args, "--subnetwork") == "s"
    assert "--no_use_public_ips" in args


def test_docker_builder_builds_and_pushes_locally(bin_dir):
    done = launch(bin_dir, "sample", *SETTINGS, *SAMPLE, "--builder", "docker", "--dry-run")
    assert done.returncode == 0, done.stderr
    login, build, push, submit = commands(done.stdout)
    assert login == ["gcloud", "auth", "configure-docker", f"{REGION}-docker.pkg.dev", "--quiet"]
    assert build[:2] == ["docker", "build"]
    assert option(build, "--file") == os.path.join(ROOT, "docker", "Dockerfile")
    assert option(build, "--tag") == IMAGE
    assert option(build, "--build-arg") == "RUNTIME_USER=beam"
    assert build[-1] == ROOT
    assert push == ["docker", "push", IMAGE]
    assert submit[:2] == ["docker", "run"]  # launched from the image just built, no pull


def test_local_launcher_and_prebuilt_images(bin_dir):
    local = launch(bin_dir, "sample", *SETTINGS, *SAMPLE, "--launcher", "local", "--dry-run")
    assert local.returncode == 0, local.stderr
    build, submit = commands(local.stdout)
    assert build[:3] == ["gcloud", "builds", "submit"]
    assert submit[:2] == ["env", "TF_USE_LEGACY_KERAS=1"]
    assert submit[3:5] == ["-m", "pipelines.sample"]
    prebuilt = "us-docker.pkg.dev/other/repo/sampler@sha256:" + "a" * 64
    given = launch(
        bin_dir,
        "sample",
        "--project",
        PROJECT,
        "--region",
        REGION,
        "--bucket",
        BUCKET,
        "--image",
        prebuilt,
        *SAMPLE,
        "--dry-run",
    )
    assert given.returncode == 0, given.stderr
    pull, submit = commands(given.stdout)
    assert pull == ["docker", "pull", prebuilt]
    assert option(stage_command(submit), "--sdk_container_image") == prebuilt
    skipped = launch(bin_dir, "sample", *SETTINGS, *SAMPLE, "--skip_build", "--dry-run")
    assert [c[:2] for c in commands(skipped.stdout)] == [["docker", "pull"], ["docker", "run"]]


def test_default_tag_is_the_git_commit_and_default_job_name_is_timestamped(bin_dir):
    head = subprocess.run(
        ["git", "-C", ROOT, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
    )
    settings = [s for s in SETTINGS if s not in ("--image_tag", TAG)]
    done = launch(bin_dir, "sample", *settings, *SAMPLE, "--dry-run")
    assert done.returncode == 0, done.stderr
    args = stage_command(commands(done.stdout)[-1])
    tag = option(args, "--sdk_container_image").rsplit(":", 1)[1]
    if head.returncode == 0:
        assert tag == head.stdout.strip()
    else:
        assert re.fullmatch(r"\d{8}-\d{6}", tag)
    assert re.fullmatch(r"graph-sample-\d{8}-\d{6}", option(args, "--job_name"))


def test_partition_stage_runs_its_own_module(bin_dir):
    done = launch(
        bin_dir,
        "partition",
        *SETTINGS,
        "--graph_schema",
        "gs://my-bucket/graph/graph_schema.pbtxt",
        "--output_dir",
        "gs://my-bucket/parts",
        "--dry-run",
    )
    assert done.returncode == 0, done.stderr
    submit = commands(done.stdout)[-1]
    assert submit[submit.index("-m") + 1] == "pipelines.partition"
    assert option(stage_command(submit), "--output_dir") == "gs://my-bucket/parts"


def test_secrets_and_credentials_are_never_printed(bin_dir, tmp_path):
    creds = tmp_path / "adc-7f3e.json"
    creds.write_text('{"private_key": "KEY-MATERIAL-91c2"}')
    done = launch(
        bin_dir,
        "sample",
        *SETTINGS,
        *SAMPLE,
        "--gbek=type:gcpsecret;version_name=projects/p/secrets/s-4411/versions/1",
        "--api_token",
        "tok-5521",
        "--dry-run",
        GOOGLE_APPLICATION_CREDENTIALS=str(creds),
    )
    assert done.returncode == 0, done.stderr
    everything = done.stdout + done.stderr
    for secret in ["KEY-MATERIAL-91c2", str(creds), "adc-7f3e", "s-4411", "tok-5521"]:
        assert secret not in everything, secret
    submit = commands(done.stdout)[-1]
    assert "<credentials>:/tmp/keys/credentials.json:ro" in submit
    assert "--gbek=***" in submit
    assert submit[submit.index("--api_token") + 1] == "***"
    # Redaction touches only secrets.
    assert option(stage_command(submit), "--sampling_spec") == "gs://my-bucket/spec.pbtxt"


def test_help_names_every_environment_variable(bin_dir):
    done = launch(bin_dir, "--help")
    assert done.returncode == 0
    for var in [
        "GCP_PROJECT",
        "GCP_REGION",
        "GCS_BUCKET",
        "AR_REPOSITORY",
        "IMAGE_TAG",
        "MAX_WORKERS",
        "MACHINE_TYPE",
        "NETWORK",
        "SUBNETWORK",
        "NO_USE_PUBLIC_IPS",
        "SERVICE_ACCOUNT",
    ]:
        assert var in done.stdout, var


def without(args: list[str], flag: str) -> list[str]:
    i = args.index(flag)
    return args[:i] + args[i + 2 :]


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "missing stage: the first argument must be 'sample' or 'partition'"),
        (["train"], "unknown stage 'train'"),
        (["sample", *without(SETTINGS, "--project"), *SAMPLE], "pass --project or set GCP_PROJECT"),
        (["sample", *without(SETTINGS, "--region"), *SAMPLE], "pass --region or set GCP_REGION"),
        (["sample", *without(SETTINGS, "--bucket"), *SAMPLE], "pass --bucket or set GCS_BUCKET"),
        (
            ["sample", *without(SETTINGS, "--repository"), *SAMPLE],
            "pass --repository or set AR_REPOSITORY",
        ),
        (["sample", *SETTINGS, *without(SAMPLE, "--graph_schema")], "missing --graph_schema"),
        (["sample", *SETTINGS, *without(SAMPLE, "--output_samples")], "missing --output_samples"),
        (
            ["sample", *SETTINGS, *without(SAMPLE, "--graph_schema"), "--graph_schema", "g/"],
            "--graph_schema must be a gs:// path",
        ),
        (["sample", *SETTINGS, *SAMPLE, "--max_workers", "0"], "--max_workers (MAX_WORKERS)"),
        (["sample", *SETTINGS, *SAMPLE, "--builder", "kaniko"], "--builder (IMAGE_BUILDER)"),
        (["sample", *SETTINGS, *SAMPLE, "--runner", "DirectRunner"], "--runner is set by this"),
        (["sample", *SETTINGS, *SAMPLE, "--job_name", "Bad_Name"], "--job_name 'Bad_Name'"),
        (["sample", *SETTINGS, *SAMPLE, "--region"], "--region needs a value"),
    ],
)
def test_missing_or_bad_settings_are_one_line_errors(bin_dir, args, message):
    done = launch(bin_dir, *args, "--dry-run")
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: ")
    assert message in done.stderr


@pytest.mark.parametrize(
    "schema, output",
    [
        ("gs://b/graph", "gs://b/graph/samples@4"),
        ("gs://b/graph/", "gs://b/graph/out/samples@4"),
        ("gs://b/graph/graph_schema.pbtxt", "gs://b/graph/deeper/more/s@2"),
        ("gs://b/graph", "gs://b/graph2/samples@4"),
    ],
)
def test_an_output_in_or_beside_the_input_folder_is_left_to_the_stage_check(
    bin_dir, schema, output
):
    """The stage refuses what would replace or re-read an input, and nothing else
    (tests/test_output_folders.py); the launcher, which lists no file, refuses none of these."""
    args = ["--graph_schema", schema, "--sampling_spec", "gs://b/s.pbtxt", "--output_samples"]
    done = launch(bin_dir, "sample", *SETTINGS, *args, output, "--dry-run")
    assert done.returncode == 0, done.stderr
    done = launch(bin_dir, "partition", *SETTINGS, "--graph_schema", schema,
                  "--output_dir", "gs://b/graph/parts", "--dry-run")  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "extra, tool",
    [
        ([], "docker"),
        (["--launcher", "local"], "gcloud"),
        (["--launcher", "local", "--builder", "docker"], "docker"),
    ],
)
def test_real_runs_need_the_tools_and_stop_before_doing_anything(bin_dir, extra, tool):
    # Not a dry run: the script checks for its tools first (none is on this PATH).
    done = launch(bin_dir, "sample", *SETTINGS, *SAMPLE, *extra)
    assert done.returncode == 2
    assert done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"error: {tool} not found on PATH" in done.stderr


def documented_launches(path: str) -> list[tuple[dict[str, str], list[str]]]:
    """(environment, arguments) of every `scripts/launch_dataflow.sh` command in the bash
    blocks of a Markdown file; `export` lines before it in the same block give the env."""
    with open(os.path.join(ROOT, path)) as f:
        text = f.read()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        env: dict[str, str] = {}
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:1] == ["export"]:
                env.update(w.split("=", 1) for w in words[1:])
            elif words[:1] == ["scripts/launch_dataflow.sh"] and "..." not in words:
                out.append((dict(env), words[1:]))  # "..." marks an elided example
    return out


@pytest.mark.parametrize("path", ["docs/dataflow.md"])
def test_documented_launch_commands_work_as_dry_runs(bin_dir, path):
    launches = documented_launches(path)
    stages = {args[0] for _, args in launches}
    assert stages == {"sample", "partition"}, f"{path} must show both stages"
    for env, args in launches:
        done = launch(bin_dir, *args, "--dry-run", **env)
        assert done.returncode == 0, f"{path}: {shlex.join(args)}\n{done.stderr}"
        submit = commands(done.stdout)[-1]
        assert submit[submit.index("-m") + 1] == f"pipelines.{args[0]}"
