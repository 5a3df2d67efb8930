#!/usr/bin/env bash
# Builds the side venv with the real GraphStorm 0.5.0, used only by the GraphStorm tests and
# examples/graphstorm_local.py. The project itself never imports torch, dgl or graphstorm.
#
# Location: $GS_VENV (default <repo>/.venv-gs). It is stacked on the DGL oracle venv
# ($DGL_VENV, default <repo>/.venv-dgl, built first by scripts/setup_dgl_oracle.sh): a .pth
# file puts the oracle's site-packages (dgl 2.1.0, torch 2.2.1, numpy<2, ...) after the
# venv's own, so this script downloads only GraphStorm and its extras (about 150 MB, not
# torch's several GB again) and never changes the oracle venv. Idempotent: a stamp named
# after the pins and the oracle's path marks a finished install.
#
# The pins: GraphStorm 0.5.0 is installed with --no-deps, because its metadata asks for
# torchdata 0.9.0 while dgl 2.1.0 needs 0.7.x (GraphStorm does not use torchdata); 0.5.1
# needs autogluon, which needs numpy 2, which dgl 2.1.0 refuses. Then what GraphStorm
# imports: transformers 4.48.0 (its pin), ogb, scikit-learn, h5py and pyarrow<18, resolved
# against the oracle's packages and constrained to its numpy, torch and dgl.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GS_VENV:-$root/.venv-gs}"
dgl_venv="${DGL_VENV:-$root/.venv-dgl}"
python="${DGL_PYTHON:-python3.11}"
pins=(
  "transformers==4.48.0"
  "ogb==1.3.6"
  "scikit-learn<1.7"
  "h5py"
  "pyarrow<18"
)
constraints=("numpy<2" "torch==2.2.1" "dgl==2.1.0" "torchdata==0.7.1" "setuptools<70")
check='import graphstorm, dgl, torch, transformers, ogb, sklearn, pyarrow; print(graphstorm.__version__)'
stamp="$venv/.gs-installed-$(printf '%s\n' "graphstorm==0.5.0" "${pins[@]}" "$dgl_venv" | sha256sum | cut -c1-16)"

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  exit 0
fi

DGL_VENV="$dgl_venv" DGL_PYTHON="$python" bash "$root/scripts/setup_dgl_oracle.sh"

mkdir -p "$venv"
# Two concurrent runs (say, two test processes) must not install into one venv at once.
exec 9>"$venv/.gs.lock"
flock 9
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  exit 0
fi

start=$(date +%s)
if [ ! -x "$venv/bin/python" ]; then
  echo "setup_graphstorm: creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
dgl_site="$("$dgl_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$dgl_site" >"$site/dgl_oracle.pth"
printf '%s\n' "${constraints[@]}" >"$venv/constraints.txt"
echo "setup_graphstorm: installing graphstorm==0.5.0 ${pins[*]} into $venv" >&2
# This machine's pip config names a global constraints file capping torch;
# PIP_CONSTRAINT points at ours instead, so that the oracle's pins hold.
export PIP_CONSTRAINT="$venv/constraints.txt"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
  "graphstorm==0.5.0" 2>&1 | grep -v '^WARNING: Location' >&2 || true
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "${pins[@]}" 2>&1 | grep -v '^WARNING: Location' >&2 || true
version="$("$venv/bin/python" -c "$check" 2>/dev/null | tail -n 1)" || version=""
if [ "$version" != "0.5.0" ]; then
  echo "setup_graphstorm: the install did not import; '$venv/bin/python -c \"$check\"' says:" >&2
  "$venv/bin/python" -c "$check" >&2 || true
  exit 1
fi
rm -f "$venv"/.gs-installed-*
touch "$stamp"
echo "setup_graphstorm: graphstorm $version ready in $venv ($(du -sh "$venv" | cut -f1) on top of $dgl_venv, $(($(date +%s) - start)) s)" >&2
