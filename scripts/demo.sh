#!/usr/bin/env bash
# Samples the embedded default graph (generated deterministically) on the
# DirectRunner, bootstrapping .venv first. Extra flags go to pipelines.demo.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/bootstrap.sh
source scripts/env.sh
exec .venv/bin/python -m pipelines.demo "$@"
