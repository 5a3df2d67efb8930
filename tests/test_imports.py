"""The kernels import neither Beam nor TensorFlow, and no CLI imports TensorFlow.

Each check runs in a fresh interpreter, so modules other tests loaded do not hide an import.
"""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import sampler

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("apache_beam", "tensorflow", "tensorflow_gnn")
CLIS = [
    "pipelines.sample",
    "pipelines.partition",
    "pipelines.validate",
    "pipelines.estimate",
    "pipelines.stats",
    "pipelines.show",
    "pipelines.generate",
    "pipelines.cli",
]


def kernel_modules() -> list[str]:
    """Every module of the sampler package except sampler.beam and what lies under it."""
    names = ["sampler"]
    for info in pkgutil.walk_packages(sampler.__path__, "sampler."):
        if info.name == "sampler.beam" or info.name.startswith("sampler.beam."):
            continue
        names.append(info.name)
    return sorted(names)


def loaded_after_import(modules: list[str]) -> list[str]:
    """The top-level packages of HEAVY that importing `modules` loads, in a fresh interpreter."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_kernel_walk_finds_the_kernels():
    modules = kernel_modules()
    for name in ["sampler.schema", "sampler.io.readers", "sampler.sample.encode", "sampler.protos"]:
        assert name in modules
    assert "sampler.protos.graph_schema_pb2" in modules
    assert not any(name.startswith("sampler.beam") for name in modules)


def test_kernels_import_neither_beam_nor_tensorflow():
    assert loaded_after_import(kernel_modules()) == []


def test_the_check_sees_a_heavy_import():
    # The same check on a module that does import Beam: it must report it.
    assert "apache_beam" in loaded_after_import(["sampler.beam.sample.sharded"])


@pytest.mark.parametrize("module", CLIS)
def test_cli_does_not_import_tensorflow(module):
    loaded = loaded_after_import([module])
    assert "tensorflow" not in loaded and "tensorflow_gnn" not in loaded, loaded
