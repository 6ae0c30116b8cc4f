"""Patches of ``thunder/torch/__init__.py``: fallback ("auto-registered") torch ops under symbolic values."""

from __future__ import annotations

from thunder.core.proxies import NumberProxy

from thunder_symbolic._registry import patch
from thunder_symbolic.guards.recorder import python_value


@patch(
    "thunder.torch:_get_fake_arg",
    summary="a number handed to a fallback torch op's fake run is pinned by a guard",
    why=(
        "Ops thunder has no rule for run on fake tensors with the numbers' traced values: the output shape of "
        "`torch.diagflat(x, offset=n)` was that of the first n, reused for every n (a wrong result)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _get_fake_arg(original):
    def get_fake_arg(inp):
        if isinstance(inp, NumberProxy):
            python_value(inp)
        return original(inp)

    return get_fake_arg
