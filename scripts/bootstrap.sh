#!/usr/bin/env bash
# Creates or refreshes .venv at the repo root. Idempotent: reinstalls only when
# requirements*.txt or setup.py changed since the last successful install.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3.11}"
command -v "$python" >/dev/null 2>&1 || python=python3
stamp_src="$(cat "$root/requirements.txt" "$root/requirements-dev.txt" "$root/setup.py" | sha256sum | cut -c1-16)"
stamp="$venv/.installed-$stamp_src"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ]; then
  exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
  echo "bootstrap: creating $venv with $("$python" --version)" >&2
  "$python" -m venv "$venv"
fi
echo "bootstrap: installing pinned requirements into $venv (first run takes a few minutes)" >&2
"$venv/bin/python" -m pip install --quiet --upgrade "pip>=24" 2>&1 | grep -v '^WARNING: Location' >&2 || true
"$venv/bin/python" -m pip install --quiet -r "$root/requirements-dev.txt" 2>&1 | grep -v '^WARNING: Location' >&2 || true
"$venv/bin/python" -m pip install --quiet --no-deps -e "$root" 2>&1 | grep -v '^WARNING: Location' >&2 || true
"$venv/bin/python" -c "import apache_beam, tensorflow_gnn, pyarrow, sampler" \
  || { echo "bootstrap: the install did not import; see the pip output above" >&2; exit 1; }
rm -f "$venv"/.installed-*
touch "$stamp"
