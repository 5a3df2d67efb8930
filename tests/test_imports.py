"""The kernels import neither Beam nor TensorFlow, and no CLI imports TensorFlow.

Each check runs in a fresh interpreter, so modules other tests loaded do not hide an import.
"""

from __future__ import annotations

import ast
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


# --- No import circle -------------------------------------------------------------


def project_modules(root: Path) -> dict[str, Path]:
    """Every module of the sampler and pipelines packages under `root`, by dotted name."""
    modules = {}
    for package in ("sampler", "pipelines"):
        for path in (root / package).rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the project modules it imports, read from its source: every import statement,
    at the top or inside a function (a lazy import is still a dependency), and every import by
    name: a call whose first argument is a string naming a project module
    (`importlib.import_module("sampler.x")`, `__import__("sampler.x")`, or a helper of the
    project that imports what it is given)."""
    modules = project_modules(root)

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Call) and node.args and _names_a_module(node.args[0]):
                targets = [node.args[0].value] if node.args[0].value in modules else []
            else:
                continue
            edges.update(t for t in map(resolve, targets) if t and t != name)
        graph[name] = edges
    return graph


def _names_a_module(arg: ast.expr) -> bool:
    return isinstance(arg, ast.Constant) and isinstance(arg.value, str) and "." in arg.value


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_the_project_has_no_import_circle():
    circles = import_circles(import_graph(ROOT))
    assert circles == [], f"import circles: {circles}"


def test_the_circle_check_finds_a_circle(tmp_path):
    # Three modules in a ring (one import lazy, inside a function) and one outside it.
    (tmp_path / "sampler").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "sampler" / "__init__.py").write_text("")
    (tmp_path / "pipelines" / "__init__.py").write_text("")
    (tmp_path / "sampler" / "a.py").write_text("from sampler import b\n")
    (tmp_path / "sampler" / "b.py").write_text("import pipelines.c\n")
    (tmp_path / "pipelines" / "c.py").write_text("def f():\n    from sampler.a import x\n")
    (tmp_path / "pipelines" / "d.py").write_text("from sampler.a import y\n")
    graph = import_graph(tmp_path)
    assert graph["pipelines.d"] == {"sampler.a"}
    assert import_circles(graph) == [["pipelines.c", "sampler.a", "sampler.b"]]


@pytest.mark.parametrize(
    "call",
    [
        'importlib.import_module("sampler.a")',
        'import_module("sampler.a")',
        '__import__("sampler.a")',
        'kernels("sampler.a")',
    ],
)
def test_the_circle_check_sees_imports_by_name(tmp_path, call):
    # sampler.a imports sampler.b; sampler.b reaches sampler.a only by its name, in a function.
    (tmp_path / "sampler").mkdir()
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "sampler" / "__init__.py").write_text("")
    (tmp_path / "pipelines" / "__init__.py").write_text("")
    (tmp_path / "sampler" / "a.py").write_text("from sampler import b\n")
    (tmp_path / "sampler" / "b.py").write_text(f"import importlib\ndef f():\n    {call}\n")
    (tmp_path / "sampler" / "c.py").write_text('x = print("not.a.module")\n')
    graph = import_graph(tmp_path)
    assert graph["sampler.b"] == {"sampler.a"}
    assert graph["sampler.c"] == set()
    assert import_circles(graph) == [["sampler.a", "sampler.b"]]
