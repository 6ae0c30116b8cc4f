"""Patches of ``thunder/torch/langctx.py``: the torch language's methods of tensor proxies."""

from __future__ import annotations

import functools

from thunder.core import utils
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_iter

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.semantics.opaque import opaque


@patch(
    "thunder.torch.langctx:TorchCtx.get_method",
    summary="`%` with a tensor is torch.remainder, as PyTorch's `Tensor.__mod__` is; a tensor has `fill_`",
    why=(
        "a TensorProxy's `%` asks the torch language for a method 'mod', which 0.2.6 does not register: "
        "`x % 3` and `7 % x` of a tensor failed with \"'NoneType' object is not callable\" (either cache). "
        "It has no `fill_`: `torch.empty(n, n).fill_(float('-inf'))` failed ('Unknown attribute fill_')."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _get_method(original):
    @functools.wraps(original)
    def get_method(self, id, *args, **kwargs):
        if id == "mod" and any(isinstance(a, TensorProxy) for a in tree_iter((args, kwargs))):
            import thunder.torch as ltorch

            return ltorch.remainder
        if id == "fill_" and args and isinstance(args[0], TensorProxy):
            return _fill_
        return original(self, id, *args, **kwargs)

    return get_method


@opaque  # run as is: traced code sees a proxy as a torch.Tensor, not a TensorProxy
def _fill_(a, value, /):
    """``Tensor.fill_``: a copy of ``value`` into every element (thunder's in-place ``copy_``)."""
    import thunder.torch as ltorch

    if isinstance(value, TensorProxy):
        utils.check(
            value.ndim == 0,
            lambda: f"fill_ only supports 0-dimension value tensor but got tensor with {value.ndim} dimensions.",
        )
        return ltorch.copy_(a, ltorch.expand(value, a.shape))
    return ltorch.copy_(a, ltorch.full_like(a, value))
