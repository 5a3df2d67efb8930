"""Regenerates sampler/protos/*_pb2.py from protos/sampler/protos/*.proto with the pinned protoc.

  python scripts/gen_protos.py           # rewrite sampler/protos/*_pb2.py
  python scripts/gen_protos.py --check   # exit 1 if they differ from a fresh generation

protoc comes from grpcio-tools, pinned in requirements-dev.txt. It runs under the first
interpreter that imports `grpc_tools`: this one, else $PROTOC_PYTHON, else the side venv
$PROTOC_VENV (default <repo>/.venv-protoc), which is built on first use with the pinned
grpcio-tools and protobuf (like the DGL oracle's venv). tests/test_protos.py runs `generate`
into a temp dir and compares, so generated code that is out of date fails the tests.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = ROOT / "protos"
# The path under protos/ is the generated module's import path: protobuf names the message
# classes' __module__ after it, and pickling (Beam ships DoFns holding a GraphSchema) needs that
# to be the real module, sampler.protos.graph_schema_pb2.
PROTO_PACKAGE = "sampler/protos"
OUT_DIR = ROOT / PROTO_PACKAGE


def _pin(requirements: Path, name: str) -> str:
    for line in requirements.read_text().splitlines():
        if re.match(rf"^{re.escape(name)}==", line.strip()):
            return line.strip()
    raise SystemExit(f"{requirements}: no '{name}==' pin")


def pins() -> list[str]:
    return [
        _pin(ROOT / "requirements-dev.txt", "grpcio-tools"),
        _pin(ROOT / "requirements.txt", "protobuf"),
    ]


def _has_grpc_tools(python: str) -> bool:
    proc = subprocess.run([python, "-c", "import grpc_tools.protoc"], capture_output=True)
    return proc.returncode == 0


def _side_venv() -> str:
    venv = Path(os.environ.get("PROTOC_VENV") or ROOT / ".venv-protoc")
    python = venv / "bin" / "python"
    stamp = venv / (".installed-" + "-".join(pins()).replace("==", "_"))
    if python.exists() and stamp.exists():
        return str(python)
    venv.mkdir(parents=True, exist_ok=True)
    with open(venv / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test processes must not install at once
        if not (python.exists() and stamp.exists()):
            base = os.environ.get("PROTOC_BASE_PYTHON", "python3.11")
            subprocess.run([base, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
                + pins(),
                check=True,
            )
            for old in venv.glob(".installed-*"):
                old.unlink()
            stamp.touch()
    return str(python)


def protoc_python() -> str:
    """An interpreter that has the pinned grpcio-tools (building the side venv if needed)."""
    for python in (sys.executable, os.environ.get("PROTOC_PYTHON")):
        if python and _has_grpc_tools(python):
            return python
    return _side_venv()


def proto_files() -> list[Path]:
    return sorted((PROTO_ROOT / PROTO_PACKAGE).glob("*.proto"))


def generate(out_dir: Path, python: str | None = None) -> list[Path]:
    """Writes one <name>_pb2.py per .proto into out_dir; returns their paths."""
    python = python or protoc_python()
    sources = [str(p.relative_to(PROTO_ROOT)) for p in proto_files()]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [python, "-m", "grpc_tools.protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}"] + sources,
            check=True,
            cwd=PROTO_ROOT,
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for generated in sorted((Path(tmp) / PROTO_PACKAGE).glob("*_pb2.py")):
            target = out_dir / generated.name
            target.write_bytes(generated.read_bytes())
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    if not args.check:
        for path in generate(OUT_DIR):
            print(path.relative_to(ROOT))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = {p.name: p.read_bytes() for p in generate(Path(tmp))}
    committed = {p.name: p.read_bytes() for p in OUT_DIR.glob("*_pb2.py")}
    stale = sorted(n for n in fresh.keys() | committed.keys() if fresh.get(n) != committed.get(n))
    for name in stale:
        print(f"sampler/protos/{name} is out of date: run python scripts/gen_protos.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
