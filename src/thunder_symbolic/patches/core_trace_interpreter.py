"""Patches of ``thunder/core/trace_interpreter.py``: the grad transform sums DTensor gradients."""

from __future__ import annotations

import functools

from thunder_symbolic.activation.registry import patch


@patch(
    "thunder.core.trace_interpreter:TraceSubstitutionProcessor.add_bsyms_from_function",
    summary="two gradients of one DTensor are summed with the DTensor add",
    why=(
        "The grad transform sums the gradients of a value used twice with thunder.torch.add, which takes "
        "plain tensors only: `d * 2 + d` of a DTensor `d` failed in grad mode ('Expected all inputs to "
        "be TensorProxy')."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _add_bsyms_from_function(original):
    import thunder.torch as ltorch
    from thunder.torch.experimental.dtensor_proxy import DTensorProxy

    @functools.wraps(original)
    def add_bsyms_from_function(self, fn, /, *args, **kwargs):
        if fn is ltorch.add and any(isinstance(a, DTensorProxy) for a in args):
            from thunder.torch.experimental.dtensor_torch_and_prims import dtensor_add

            fn = dtensor_add
        return original(self, fn, *args, **kwargs)

    return add_bsyms_from_function
