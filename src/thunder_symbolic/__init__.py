"""thunder-symbolic: sound ``thunder.jit(fn, cache="symbolic values")`` for lightning-thunder 0.2.6.

Importing this package applies the patch set (unless ``THUNDER_SYMBOLIC=0``); after installation a
plain ``import thunder`` applies it too, through ``thunder_symbolic.pth``. :func:`apply` and
:func:`revert` switch it explicitly, :func:`status` reports what is applied.
"""

from __future__ import annotations

import importlib
import sys
import warnings

from thunder_symbolic.activation import registry as _registry
from thunder_symbolic.activation.compat import SUPPORTED_RANGE, unsupported_reason
from thunder_symbolic.activation.environment import switch

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

# The public API that needs thunder is imported on first use, so that importing this package does not
# import thunder: thunder's import must be able to import it first (see ``prepare``).
_LAZY = {
    "thunder_symbolic.controls": (
        "STATIC",
        "DeclaredShapeError",
        "Dim",
        "RecompileLimitExceeded",
        "RecompileLimitWarning",
        "mark_dynamic",
        "mark_static",
    ),
    "thunder_symbolic.diagnostics": ("Miss", "Program", "explain", "fail_on_recompile", "recompile_reasons"),
    "thunder_symbolic.activation.status": ("Status", "status"),
}


def __getattr__(name: str):
    for module_name, names in _LAZY.items():
        if name in names:
            value = getattr(importlib.import_module(module_name), name)
            globals()[name] = value
            return value
    raise AttributeError(f"module 'thunder_symbolic' has no attribute {name!r}")


class ThunderSymbolicWarning(UserWarning):
    """Issued when the patch set cannot be applied (for example on an unsupported thunder)."""


_refused: str | None = None


def enabled_by_environment() -> bool:
    """False when ``THUNDER_SYMBOLIC`` is set to 0/false/no/off. A value that is no switch is taken as on, with a
    warning: the start-up hook runs in every process of the environment, where an exception would stop it."""
    try:
        return switch("THUNDER_SYMBOLIC")
    except ValueError as e:
        warnings.warn(f"{e}; the patch set applies", ThunderSymbolicWarning, stacklevel=2)
        return True


def _thunder_version() -> str:
    thunder = sys.modules.get("thunder")
    if getattr(thunder, "__version__", None):
        return thunder.__version__
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lightning-thunder")
    except PackageNotFoundError:
        return "not installed"


def _thunder_is_being_imported() -> bool:
    return getattr(getattr(sys.modules.get("thunder"), "__spec__", None), "_initializing", False)


def install_import_patches() -> None:
    """Install the import patches: torch changes that thunder's modules need while they execute (thunder 0.2.6
    does not import on torch >= 2.13 without them). They change no behaviour of thunder, so they are installed
    even when ``THUNDER_SYMBOLIC=0`` turns the patch set off. Does not import thunder."""
    import torch

    from thunder_symbolic import import_patches  # noqa: F401  (registers every import patch)

    too_late = _registry.install_import_patches()
    if too_late:
        warnings.warn(
            f"thunder-symbolic was applied after {', '.join(too_late)} had been imported without its import patch "
            f"(torch {torch.__version__}); import thunder_symbolic before thunder",
            ThunderSymbolicWarning,
            stacklevel=3,
        )


def prepare() -> bool:
    """The part of :func:`apply` that must come before thunder's own code runs: check the versions and
    install the import patches. Does not import thunder. Returns False, with a
    :class:`ThunderSymbolicWarning`, on unsupported versions."""
    global _refused
    import torch

    _refused = unsupported_reason(_thunder_version(), torch.__version__)
    if _refused is not None:
        warnings.warn(_refused, ThunderSymbolicWarning, stacklevel=3)
        return False
    try:
        install_import_patches()
    except Exception as e:
        _failed(e)
        return False
    return True


def apply() -> bool:
    """Apply the patch set to the installed thunder (a no-op when already applied).

    Returns True when the patches are active. On an unsupported thunder or torch version nothing is
    patched: a :class:`ThunderSymbolicWarning` names the supported versions and False is returned. Applying is
    all or nothing: when a patch cannot apply (or a patch module cannot be imported), every patch applied before
    it is reverted, a :class:`ThunderSymbolicWarning` names it and the error, and False is returned.
    """
    if _registry.is_active():
        return True
    if not prepare():
        return False
    import thunder  # noqa: F401  (with the import patches in place)

    try:
        from thunder_symbolic import patches  # noqa: F401  (registers every patch)

        _registry.apply_all(on_later_failure=_failed)
    except Exception as e:
        _failed(e)
        return False
    return True


def _failed(error: Exception) -> None:
    """The patch set could not apply (``_registry`` has reverted what it had applied): thunder stays upstream's,
    and the user is told once, why."""
    global _refused
    if not isinstance(error, _registry.PatchError):
        error = f"{_failing_module(error)} failed to import ({type(error).__name__}: {error})"
    _refused = f"{error}; thunder runs unpatched, as upstream {_thunder_version()}"
    warnings.warn(f"thunder-symbolic: {_refused}", ThunderSymbolicWarning, stacklevel=3)


def _failing_module(error: BaseException) -> str:
    """The innermost module of this package in ``error``'s traceback (the patch module whose import failed)."""
    names = [tb.tb_frame.f_globals.get("__name__", "") for tb in _frames(error.__traceback__)]
    if isinstance(error, ImportError) and error.name:  # (a module not found, or a name not in one)
        names.append(error.name)
    return next((n for n in reversed(names) if n.startswith("thunder_symbolic.")), "the patch set")


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def revert() -> None:
    """Restore upstream thunder: every patched function, and every module binding of it, is the original again.

    Import patches stay: they only let thunder's modules execute on this torch."""
    _registry.revert_all()


def is_active() -> bool:
    return _registry.is_active()


def refused_reason() -> str | None:
    """Why the last :func:`apply` refused to patch, or None."""
    return _refused


# Imported by thunder's own import (``thunder_symbolic_autoload``), which prepares and applies around
# thunder's code; imported by a user, it applies now.
if enabled_by_environment() and not _thunder_is_being_imported():
    apply()
