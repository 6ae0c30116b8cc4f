"""torch functions thunder 0.2.6 has no operator for, written with its operators (so sizes stay symbolic).

Traced code reaches them through the jit's lookaside table (see ``patches/core_jit_ext.py``).
"""

from __future__ import annotations

import torch
import thunder.torch as ltorch
from thunder.core import utils

__all__ = ["COMPOSITES"]


def eye(n, m=None, *, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False, pin_memory=False):
    """``torch.eye``: ones where the row index equals the column index."""
    if out is not None or layout is not torch.strided or requires_grad or pin_memory:
        raise NotImplementedError(
            "torch.eye under thunder.jit takes n, m, dtype and device, not out=, layout=, requires_grad= or "
            "pin_memory="
        )
    m = n if m is None else m
    utils.check(n >= 0, lambda: f"n must be greater or equal to 0, got {getattr(n, 'value', n)}")
    utils.check(m >= 0, lambda: f"m must be greater or equal to 0, got {getattr(m, 'value', m)}")
    rows = ltorch.unsqueeze(ltorch.arange(n, device=device), 1)
    columns = ltorch.unsqueeze(ltorch.arange(m, device=device), 0)
    return ltorch.to(ltorch.eq(rows, columns), ltorch.maybe_get_default_dtype(dtype))


COMPOSITES = {torch.eye: eye}
