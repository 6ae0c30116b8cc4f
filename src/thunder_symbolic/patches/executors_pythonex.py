"""Patches of ``thunder/executors/pythonex.py``: the prologue's checks of tensors and numbers, fast when they hold.

Every call runs them, for every tensor input and parameter (shape, device, dtype, requires_grad) and for
every number thunder pins. 0.2.6's implementations build a lambda per dim and the device's text per call
(about 1.5 µs a tensor); these ones compare the same things directly and, when anything differs, run
0.2.6's implementation for its verdict and its message.
"""

from __future__ import annotations

import torch
from thunder.executors import pythonex

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards.compiled_prologue import device_text


def _fast_tensor_check(original):
    def check_tensor_metadata(t, shape, device, dtype, requires_grad) -> None:
        if (
            isinstance(t, torch.Tensor)
            and t.shape == shape  # a tuple of ints at run time (the symbolic dims were unpacked from t)
            and t.dtype == dtype
            and t.requires_grad == requires_grad
            and device_text(t.device) == device
        ):
            return
        original(t, shape, device, dtype, requires_grad)

    return check_tensor_metadata


def _fast_number_check(original):
    def check_number_type_and_value(n, v) -> None:
        if type(n) is type(v) and n == v:
            return
        original(n, v)

    return check_number_type_and_value


def _calling(make, implementation):
    """A bound-symbol postprocess that has the operator's bound symbols call ``make(implementation)``."""
    fast = make(implementation)

    def postprocessing(original):
        def bind_postprocess(bsym) -> None:
            original(bsym)
            bsym._call_ctx = {bsym.sym.name: fast}

        return bind_postprocess

    return postprocessing


_WHY = (
    "They run on every call for every tensor input, parameter and pinned number: a module with 4 parameters spent "
    "about 10 µs a call in them, more than its computation. The operators stay thunder's (transforms find the "
    "prologue's checks by their ids); only what their bound symbols call changes."
)

patch(
    "thunder.executors.pythonex:check_tensor_shape_and_metadata._bind_postprocess",
    summary="the prologue's tensor metadata checks return at once when they hold (0.2.6's run otherwise)",
    why=_WHY,
    upstream="Lightning-AI/lightning-thunder#2677",
)(_calling(_fast_tensor_check, pythonex._check_tensor_shape_and_metadata_impl))

patch(
    "thunder.executors.pythonex:check_number_type_and_value._bind_postprocess",
    summary="the prologue's number checks return at once when they hold (0.2.6's run otherwise)",
    why=_WHY,
    upstream="Lightning-AI/lightning-thunder#2677",
)(_calling(_fast_number_check, pythonex._check_number_type_and_value_impl))
