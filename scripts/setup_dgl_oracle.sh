#!/usr/bin/env bash
# Builds the side venv that holds the real DGL 2.1.0, used only as a test oracle
# (tests/test_dgl_format.py runs tests/oracle/dgl_oracle.py with it). The project
# itself never imports torch or dgl.
#
# Location: $DGL_VENV (default <repo>/.venv-dgl). Interpreter: $DGL_PYTHON
# (default python3.11). Idempotent: a stamp named after the pins marks a finished
# install, and a second run with the same pins is a no-op.
#
# The pins below are the one combination that imports: dgl 2.1.0 ships
# libgraphbolt built for torch 2.2.1 only, and needs numpy<2, setuptools<70
# (pkg_resources) and torchdata 0.7.x. torch 2.2.1 comes from PyPI (the CPU-only
# index is not reachable from here), so pip also pulls its nvidia-* CUDA wheels:
# several GB, about 5 GB installed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${DGL_VENV:-$root/.venv-dgl}"
python="${DGL_PYTHON:-python3.11}"
pins=(
  "dgl==2.1.0"
  "torch==2.2.1"
  "numpy<2"
  "setuptools<70"
  "torchdata==0.7.1"
  "pandas"
  "pyyaml"
  "pydantic"
)
check='import dgl, torch; print(dgl.__version__)'
stamp="$venv/.oracle-installed-$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-16)"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  exit 0
fi

mkdir -p "$venv"
# Two concurrent runs (say, two test processes) must not install into one venv at once.
exec 9>"$venv/.oracle.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  exit 0
fi

command -v "$python" >/dev/null 2>&1 || {
  echo "setup_dgl_oracle: $python not found (set DGL_PYTHON to a Python 3.11)" >&2
  exit 1
}
"$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' || {
  echo "setup_dgl_oracle: $python is not Python 3.11 (dgl 2.1.0 wheels are cp311 here)" >&2
  exit 1
}

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_dgl_oracle: creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
echo "setup_dgl_oracle: installing ${pins[*]} into $venv (first run downloads a few GB)" >&2
# This machine's pip config names a global constraints file capping torch;
# PIP_CONSTRAINT= (empty) overrides it so that exactly these pins are resolved.
PIP_CONSTRAINT="" "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${pins[@]}" 2>&1 | grep -v '^WARNING: Location' >&2 || true
version="$("$venv/bin/python" -c "$check" 2>/dev/null | tail -n 1)" || version=""
if [ "$version" != "2.1.0" ]; then
  echo "setup_dgl_oracle: the install did not import; '$venv/bin/python -c \"$check\"' says:" >&2
  "$venv/bin/python" -c "$check" >&2 || true
  exit 1
fi
rm -f "$venv"/.oracle-installed-*
touch "$stamp"
echo "setup_dgl_oracle: dgl $version ready in $venv ($(du -sh "$venv" | cut -f1), $(($(date +%s) - start)) s)" >&2
