#!/usr/bin/env bash
# Creates or refreshes .venv at the repo root, and compiles the kernels once. Idempotent:
# reinstalls only when requirements*.txt or setup.py changed since the last successful
# install, and compiles again only when a kernel's source changed since.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
stamp_src="$(cat "$root/requirements.txt" "$root/requirements-dev.txt" "$root/setup.py" | sha256sum | cut -c1-16)"
stamp="$venv/.installed-$stamp_src"
kernels_src="$(find "$root/sampler" -name '*jit*.py' | sort | xargs cat | sha256sum | cut -c1-16)"
kernels_stamp="$venv/.kernels-$kernels_src"

compile_kernels() {
  # The kernels compile into numba's cache once per machine (about a minute): here, at
  # install, rather than silently in the first run (sampler/jit_loader.py).
  echo "bootstrap: compiling the kernels once into their cache (about a minute)" >&2
  local start=$SECONDS
  # shellcheck source=scripts/env.sh
  if ! (source "$root/scripts/env.sh" && "$venv/bin/python" -m sampler.jit_warm) >>"$venv/bootstrap.log" 2>&1; then
    echo "bootstrap: failed: python -m sampler.jit_warm" >&2
    tail -n 30 "$venv/bootstrap.log" >&2
    exit 1
  fi
  echo "bootstrap: kernels compiled in $((SECONDS - start)) s ($(tail -n 1 "$venv/bootstrap.log"))" >&2
  rm -f "$venv"/.kernels-*
  touch "$kernels_stamp"
}

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  [ -f "$kernels_stamp" ] || compile_kernels
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
log="$venv/bootstrap.log"
echo "bootstrap: installing pinned requirements into $venv (first run: a few minutes; log: $log)" >&2
run() {
  if ! "$@" >>"$log" 2>&1; then
    echo "bootstrap: failed: $*" >&2
    tail -n 30 "$log" >&2
    exit 1
  fi
}
: >"$log"
run "$venv/bin/python" -m pip install --upgrade "pip>=24"
run "$venv/bin/python" -m pip install -r "$root/requirements-dev.txt"
run "$venv/bin/python" -m pip install --no-deps -e "$root"
# shellcheck source=scripts/env.sh
source "$root/scripts/env.sh"
run "$venv/bin/python" -c "import apache_beam, tensorflow_gnn, pyarrow, sampler"
rm -f "$venv"/.installed-*
touch "$stamp"
compile_kernels
echo "bootstrap: done" >&2
