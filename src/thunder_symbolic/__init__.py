"""thunder-symbolic: sound ``thunder.jit(fn, cache="symbolic values")`` for lightning-thunder 0.2.6.

Importing this package applies the patch set (unless ``THUNDER_SYMBOLIC=0``); after installation a
plain ``import thunder`` applies it too, through ``thunder_symbolic.pth``. :func:`apply` and
:func:`revert` switch it explicitly, :func:`status` reports what is applied.
"""

from __future__ import annotations

import os
import warnings

from thunder_symbolic import _registry
from thunder_symbolic._compat import SUPPORTED_RANGE, unsupported_reason
from thunder_symbolic._status import Status, status
from thunder_symbolic.controls import (
    STATIC,
    DeclaredShapeError,
    Dim,
    RecompileLimitExceeded,
    RecompileLimitWarning,
    fail_on_recompile,
    mark_dynamic,
    mark_static,
)
from thunder_symbolic.diagnostics import Miss, Program, explain, recompile_reasons

__all__ = [
    "STATIC",
    "SUPPORTED_RANGE",
    "DeclaredShapeError",
    "Dim",
    "Miss",
    "Program",
    "RecompileLimitExceeded",
    "RecompileLimitWarning",
    "Status",
    "ThunderSymbolicWarning",
    "apply",
    "explain",
    "fail_on_recompile",
    "is_active",
    "mark_dynamic",
    "mark_static",
    "recompile_reasons",
    "revert",
    "status",
]
__version__ = "0.1.0"


class ThunderSymbolicWarning(UserWarning):
    """Issued when the patch set cannot be applied (for example on an unsupported thunder)."""


_refused: str | None = None


def enabled_by_environment() -> bool:
    """False when ``THUNDER_SYMBOLIC`` is set to 0/false/no/off."""
    return os.environ.get("THUNDER_SYMBOLIC", "1").strip().lower() not in ("0", "false", "no", "off")


def apply() -> bool:
    """Apply the patch set to the installed thunder (a no-op when already applied).

    Returns True when the patches are active. On an unsupported thunder or torch version nothing is
    patched: a :class:`ThunderSymbolicWarning` names the supported versions and False is returned.
    """
    global _refused
    if _registry.is_active():
        return True
    import torch

    import thunder

    _refused = unsupported_reason(getattr(thunder, "__version__", "unknown"), torch.__version__)
    if _refused is not None:
        warnings.warn(_refused, ThunderSymbolicWarning, stacklevel=2)
        return False
    from thunder_symbolic import patches  # noqa: F401  (registers every patch)

    _registry.apply_all()
    return True


def revert() -> None:
    """Restore upstream thunder: every patched function, and every module binding of it, is the original again."""
    _registry.revert_all()


def is_active() -> bool:
    return _registry.is_active()


def refused_reason() -> str | None:
    """Why the last :func:`apply` refused to patch, or None."""
    return _refused


if enabled_by_environment():
    apply()
