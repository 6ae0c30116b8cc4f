"""Import patch of ``thunder/core/jit_ext.py``: it keys a lookaside by ``Function.apply.__func__``."""

from __future__ import annotations

import contextlib

import torch

from thunder_symbolic.activation.registry import import_patch
from thunder_symbolic.autodiff.autograd_apply import BUILTIN_APPLY_KEY, apply_is_builtin


@import_patch(
    "thunder.core.jit_ext",
    summary="custom autograd.Function lookaside registered under a key of ours where Function.apply is a C classmethod",
    why="torch 2.13 made Function.apply a C classmethod without __func__; the module reads "
    "Function.apply.__func__ while it executes, so `import thunder` fails (the lookup of the builtin apply "
    "is routed to the key by the lookaside table's patch)",
    needed=apply_is_builtin,
)
@contextlib.contextmanager
def key_the_apply_lookaside():
    """While the module executes, ``Function.apply`` is a Python classmethod of the key, so the module's
    decorator registers the lookaside under the key; torch's own ``apply`` is put back afterwards."""
    function = torch.autograd.function.Function
    builtin = function.__dict__["apply"]
    function.apply = classmethod(BUILTIN_APPLY_KEY)
    try:
        yield lambda module: None
    finally:
        function.apply = builtin
