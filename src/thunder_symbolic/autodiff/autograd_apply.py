"""How a custom ``torch.autograd.Function``'s ``apply`` reaches thunder's lookaside, on every torch.

Up to torch 2.12 ``Function.apply`` is a Python classmethod: the interpreter unbinds ``MyFn.apply`` to
``Function.apply.__func__``, the key of thunder's lookaside. From 2.13 it is a C classmethod
(``MyFn.apply`` is a builtin method bound to the class) with no ``__func__``: thunder's table is keyed by
:data:`BUILTIN_APPLY_KEY` instead (an import patch of ``thunder/core/jit_ext.py``), and a lookup of a
builtin ``apply`` goes to that entry with the class as its first argument (:func:`builtin_apply_owner`).
Shared by the import patch and the lookaside-table patch, which do not import each other.
"""

from __future__ import annotations

import torch

_APPLY = torch.autograd.function.Function.__dict__["apply"]


def BUILTIN_APPLY_KEY(cls, *args, **kwargs):  # a constant: the lookaside table's key
    """Stands for torch's C ``Function.apply`` in thunder's lookaside table; never called."""
    raise RuntimeError(
        "thunder_symbolic.autodiff.autograd_apply.BUILTIN_APPLY_KEY is a lookup key, not a function to call"
    )


def apply_is_builtin() -> bool:
    return not hasattr(_APPLY, "__func__")


def builtin_apply_owner(fn) -> type | None:
    """The ``Function`` subclass when ``fn`` is torch's builtin ``apply`` bound to it, else None."""
    owner = getattr(fn, "__self__", None)
    if (
        getattr(fn, "__name__", None) != "apply"
        or not isinstance(owner, type)
        or not issubclass(owner, torch.autograd.function.Function)
        or not apply_is_builtin()
    ):
        return None
    return owner if fn == _APPLY.__get__(None, owner) else None
