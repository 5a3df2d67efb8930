"""What a patch of Beam's internals replaces, checked when the patch is installed.

Each patch names the Beam versions it was written for (`BEAM_VERSIONS`) and its `TARGETS`: the
attributes of Beam it replaces or relies on, each with the digest of the source it was written
against (None: the attribute must only exist). `check(patch, versions, targets)` raises
`BeamChanged` (one line: the patch, the Beam versions, what changed) when an attribute is gone or
its source is not the one the patch expects, so that a Beam upgrade fails loudly at the first
run instead of running a patch over code it was not written for. What to do then:
docs/architecture.md, "Beam upgrade checklist".
"""

from __future__ import annotations

import hashlib
import inspect

from sampler.errors import UserError

_MISSING = object()


class BeamChanged(UserError):
    """The Beam code a patch replaces is not the code it was written for."""


def source_digest(target) -> str:
    """The first 16 hex digits of the sha256 of `target`'s source (the original's, when
    `target` is a patch's wrapper)."""
    return hashlib.sha256(inspect.getsource(original(target)).encode()).hexdigest()[:16]


def original(target):
    """What a patch wrapped (its `__wrapped__`), else `target` itself."""
    while hasattr(target, "__wrapped__"):
        target = target.__wrapped__
    return target


def check(patch: str, versions: tuple[str, ...], targets) -> None:
    """Raises BeamChanged unless every (owner, name, digest) of `targets` is as `patch` expects."""
    import apache_beam

    for owner, name, digest in targets:
        where = f"{getattr(owner, '__module__', '')}.{getattr(owner, '__qualname__', '')}"
        what = f"{owner.__name__ if inspect.ismodule(owner) else where}.{name}"
        target = owner.__dict__.get(name, _MISSING) if inspect.isclass(owner) else _MISSING
        if target is _MISSING:
            target = getattr(owner, name, _MISSING)
        if target is _MISSING:
            problem = f"{what} is gone"
        elif digest is None:
            continue
        else:
            try:
                got = source_digest(target)
            except (OSError, TypeError):
                problem = f"the source of {what} cannot be read to check it"
            else:
                if got == digest:
                    continue
                problem = (
                    f"{what} is not the code the patch replaces (source {got}, expected {digest})"
                )
        raise BeamChanged(
            f"Beam patch {patch} was written for Apache Beam {' / '.join(versions)}, and this is "
            f"Beam {apache_beam.__version__}: {problem}; see docs/architecture.md, "
            "'Beam upgrade checklist'"
        )
