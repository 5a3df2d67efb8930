"""The worker image, checked statically (no Docker engine here): base, pins, build, user, lint.

What runs for real: hadolint on the Dockerfile, the builder stage's `pip wheel --no-deps .`
on exactly the files the Dockerfile copies, and docker/entrypoint.sh's dispatch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile

import apache_beam
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
ENTRYPOINT = os.path.join(ROOT, "docker", "entrypoint.sh")
HADOLINT = os.path.join(ROOT, ".venv", "bin", "hadolint")
BASE = re.compile(r"^apache/beam_python(?P<python>\d+\.\d+)_sdk:(?P<beam>[\w.]+)$")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        current = f"{current} {line}" if current else line
        if current.endswith("\\"):
            current = current[:-1].rstrip()
            continue
        lines.append(current)
        current = ""
    assert not current, "dangling continuation line"
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


@pytest.fixture(scope="module")
def dockerfile():
    with open(DOCKERFILE) as f:
        return instructions(f.read())


def stages(dockerfile):
    """Instructions per build stage, in order."""
    out = []
    for name, args in dockerfile:
        if name == "FROM":
            out.append([])
        out[-1].append((name, args))
    return out


def requirement_pins() -> dict[str, str]:
    pins = {}
    with open(os.path.join(ROOT, "requirements.txt")) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = line.split("==")
                pins[re.sub(r"\[.*\]", "", name).lower()] = version
    return pins


def setup_python() -> str:
    with open(os.path.join(ROOT, "setup.py")) as f:
        match = re.search(r'python_requires="==(\d+\.\d+)\.\*"', f.read())
    assert match, "setup.py must pin python_requires to one minor version"
    return match.group(1)


def test_every_stage_uses_the_beam_sdk_image_of_the_pinned_versions(dockerfile):
    bases = [args.split()[0] for name, args in dockerfile if name == "FROM"]
    assert len(bases) == 2, "expected a builder stage and the runtime stage"
    for base in bases:
        match = BASE.match(base)
        assert match, f"{base} is not an apache/beam_pythonX.Y_sdk:VERSION image"
        assert match.group("beam") == requirement_pins()["apache-beam"], base
        assert match.group("python") == setup_python(), base
    # The launcher in this venv runs the same Beam and Python as the image.
    assert apache_beam.__version__ == requirement_pins()["apache-beam"]
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == setup_python()


def test_base_image_is_the_one_the_launcher_declares_to_dataflow(dockerfile):
    # Beam tags the job's environment with the SDK image it expects the workers to run; a
    # custom image must be built on exactly that one.
    from apache_beam.transforms.environments import python_sdk_docker_capabilities

    declared = [
        c.split(":", 3)[3]
        for c in python_sdk_docker_capabilities()
        if c.startswith("beam:version:sdk_base:")
    ]
    assert declared, "Beam no longer declares its sdk_base capability; update this test"
    base = [args.split()[0] for name, args in dockerfile if name == "FROM"][-1]
    assert declared == [base]


def test_runtime_stage_installs_the_pins_and_a_wheel_of_the_checkout(dockerfile):
    builder, runtime = stages(dockerfile)
    assert builder[0][1].split()[-1] == "builder", "the first stage is `AS builder`"
    builder_runs = " ".join(args for name, args in builder if name == "RUN")
    assert re.search(r"pip wheel .*--no-deps.* \.$", builder_runs), builder_runs
    copies = " ".join(args for name, args in runtime if name == "COPY")
    assert "--from=builder" in copies
    assert "requirements.txt" in copies
    runs = " ".join(args for name, args in runtime if name == "RUN")
    assert "pip install --no-cache-dir -r /tmp/build/requirements.txt" in runs
    assert re.search(r"pip install --no-cache-dir --no-deps /tmp/build/wheels/\*\.whl", runs)
    # The build fails unless the installed stack imports with the pinned Beam.
    assert f"apache_beam.__version__ == '{requirement_pins()['apache-beam']}'" in runs


def test_runtime_environment_user_and_entrypoint(dockerfile):
    runtime = stages(dockerfile)[-1]
    env = " ".join(args for name, args in runtime if name == "ENV")
    assert "TF_USE_LEGACY_KERAS=1" in env
    assert "RUN_PYTHON_SDK_IN_DEFAULT_ENVIRONMENT=1" in env
    args = dict(a.split("=", 1) for name, a in runtime if name == "ARG")
    users = [a for name, a in runtime if name == "USER"]
    assert len(users) == 1
    user = args.get("RUNTIME_USER") if users[0] == "${RUNTIME_USER}" else users[0]
    assert user not in ("root", "0", None), f"the image runs as {user}"
    assert "useradd" in " ".join(a for name, a in runtime if name == "RUN")
    assert [a for name, a in runtime if name == "ENTRYPOINT"] == [
        '["/opt/graph-sampler/entrypoint.sh"]'
    ]
    # No credentials or keys baked in.
    text = " ".join(a for _, a in dockerfile).lower()
    for word in ("google_application_credentials", "credentials.json", "secret", "password"):
        assert word not in text, word
    assert os.access(ENTRYPOINT, os.X_OK), "docker/entrypoint.sh must be executable"


def test_hadolint_is_clean_and_alive(tmp_path):
    assert os.path.exists(HADOLINT), "hadolint missing: bash scripts/bootstrap.sh installs it"
    clean = subprocess.run([HADOLINT, DOCKERFILE], capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout + clean.stderr
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install numpy\n")
    dirty = subprocess.run([HADOLINT, str(bad)], capture_output=True, text=True)
    assert dirty.returncode != 0
    assert "DL3007" in dirty.stdout and "DL3013" in dirty.stdout


def dockerignore_patterns() -> list[str]:
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def pattern_regex(pattern: str) -> re.Pattern:
    """A .dockerignore pattern (Go's filepath.Match plus `**`) as a regex over relative paths."""
    out, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out, i = out + "(?:.*/)?", i + 3
        elif pattern.startswith("**", i):
            out, i = out + ".*", i + 2
        elif pattern[i] == "*":
            out, i = out + "[^/]*", i + 1
        elif pattern[i] == "?":
            out, i = out + "[^/]", i + 1
        elif pattern[i] == "[":
            j = pattern.index("]", i)
            out, i = out + pattern[i : j + 1], j + 1
        else:
            out, i = out + re.escape(pattern[i]), i + 1
    return re.compile(out)


def ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent folders wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        regex = pattern_regex(pattern.lstrip("!").rstrip("/"))
        if any(regex.fullmatch(prefix) for prefix in prefixes):
            result = not negate
    return result


def copied_sources(dockerfile) -> list[str]:
    """Every local path a COPY (without --from) takes from the build context."""
    out = []
    for name, args in dockerfile:
        if name == "COPY" and "--from=" not in args:
            out += [a for a in args.split()[:-1] if not a.startswith("--")]
    return out


def test_dockerignore_keeps_venvs_outputs_and_caches_out_but_not_the_sources(dockerfile):
    patterns = dockerignore_patterns()
    for path in [
        ".venv/bin/python",
        ".venv-dgl/lib/x.py",
        "out/demo/samples-00000-of-00004",
        ".git/HEAD",
        "sampler/__pycache__/ids.cpython-311.pyc",
        ".pytest_cache/v",
        ".ruff_cache/x",
        ".hypothesis/examples/x",
        "beam_graph_sampler.egg-info/PKG-INFO",
        "application_default_credentials.json",
        "tests/test_docker.py",
    ]:
        assert ignored(path, patterns), f"{path} would be sent to the Docker build"
    for source in copied_sources(dockerfile):
        assert os.path.exists(os.path.join(ROOT, source)), source
        assert not ignored(source.rstrip("/"), patterns), f"{source} is excluded by .dockerignore"
    assert not ignored("sampler/beam/sample/sharded.py", patterns)
    assert not ignored("pipelines/sample.py", patterns)


def test_builder_stage_wheel_holds_the_package_and_its_pins(dockerfile, tmp_path):
    # Exactly what the builder stage sees: its COPY sources, then `pip wheel --no-deps .`.
    builder = stages(dockerfile)[0]
    context = tmp_path / "src"
    context.mkdir()
    for name, args in builder:
        if name == "COPY":
            for source in args.split()[:-1]:
                src = os.path.join(ROOT, source)
                if os.path.isdir(src):
                    shutil.copytree(
                        src,
                        context / source.rstrip("/"),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                    )
                else:
                    shutil.copy(src, context / source)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(wheels),
            ".",
        ],
        cwd=context,
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        requires = [  # the install requirements; optional extras ("; extra == ...") aside
            line.split(":", 1)[1].strip().lower()
            for line in z.read(metadata).decode().splitlines()
            if line.startswith("Requires-Dist:") and "extra ==" not in line
        ]
        entry_points = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for module in ["sampler/beam/sample/sharded.py", "sampler/io/files.py", "pipelines/sample.py"]:
        assert module in names, module
    assert not any(n.startswith("tests/") for n in names)
    pins = requirement_pins()
    assert "apache-beam[gcp]==" + pins["apache-beam"] in requires
    required = {re.split(r"[\[=]", r)[0]: r.rsplit("==", 1)[-1] for r in requires}
    assert required == pins
    assert "graph_sampler = pipelines.sample:main" in entry_points


def run_entrypoint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", ENTRYPOINT, *args], capture_output=True, text=True)


def test_entrypoint_runs_commands_as_given():
    done = run_entrypoint(sys.executable, "-c", "import sys; print('launcher', sys.argv[1:])", "x")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "launcher ['x']"


@pytest.mark.parametrize(
    "args",
    [
        ("--id=sdk-0-0", "--provision_endpoint=localhost:1", "--semi_persist_dir=/var/opt/google"),
        ("-worker_pool",),
        (),
    ],
)
def test_entrypoint_hands_boot_flags_to_the_beam_boot_program(args):
    # There is no /opt/apache/beam/boot here: the shell's "not found" names what it exec'd.
    if os.path.exists("/opt/apache/beam/boot"):
        pytest.fail("this test expects to run outside the Beam image")
    done = run_entrypoint(*args)
    assert done.returncode == 127
    assert "/opt/apache/beam/boot" in done.stderr
