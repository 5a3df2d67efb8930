#!/usr/bin/env bash
# Runs the linter and the whole test suite, bootstrapping .venv first.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
source scripts/env.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/hadolint docker/Dockerfile
.venv/bin/shellcheck scripts/*.sh docker/*.sh .ci/run
exec .venv/bin/python -m pytest "$@"
