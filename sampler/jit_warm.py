"""`python -m sampler.jit_warm`: compiles every kernel into the cache (or loads it from
there), so that no run pays for it. scripts/bootstrap.sh and docker/Dockerfile run it once
at install; each kernel module's `warm()` says how it compiles (sampler/jit_loader.py)."""

from __future__ import annotations

import sys

from sampler import jit_cache, jit_loader, settings
from sampler.errors import UserError


def main() -> int:
    try:
        settings.check_all()
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    jit_cache.say_compiling(quiet=True)  # (this line says it)
    with jit_cache.machine_lock():
        count, compiled, seconds = jit_loader.warm_all()
    print(f"{count} kernels ready in {jit_cache.folder()} in {seconds:.0f} s ({compiled} compiled)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
