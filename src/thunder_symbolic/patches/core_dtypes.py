"""Patches of ``thunder/core/dtypes.py``: a tensor's dtype compares equal to the torch dtype it stands for."""

from __future__ import annotations

import torch

from thunder_symbolic.activation.registry import patch


@patch(
    "thunder.core.dtypes:dtype.__eq__",
    summary="a thunder dtype equals the torch dtype it stands for (`x.dtype == torch.float64`)",
    why=(
        "Traced code sees thunder dtypes as `x.dtype`; 0.2.6 compares them unequal to every torch dtype, so "
        "`if x.dtype == torch.float64:` took the wrong branch from the first call (both cache options)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _eq(original):
    def __eq__(self, other):
        if isinstance(other, torch.dtype):
            from thunder.core.dtypes import to_dtype

            other = to_dtype(other)
        return original(self, other)

    return __eq__
