"""Patches of ``thunder/executors/torchex.py``: the torch executor runs grouped matmuls (MoE experts), sigmoid and
nll_loss."""

from __future__ import annotations

import functools

import torch
from thunder.core import dtypes
from thunder.extend import ImplInfo

from thunder_symbolic.activation.registry import patch


@functools.cache
def _grouped_mm_kernel(device_type: str, dtype: torch.dtype) -> bool:
    """Whether this torch's ``_grouped_mm`` has a kernel for ``dtype`` on ``device_type``, asked of torch once
    with two groups of 16 rows: which types it takes depends on the torch release and the device."""
    a = torch.ones(32, 16, device=device_type, dtype=dtype)
    b = torch.ones(2, 16, 16, device=device_type, dtype=dtype)
    try:
        torch._grouped_mm(a, b, offs=torch.tensor([16, 32], device=device_type, dtype=torch.int32))
    except (RuntimeError, NotImplementedError):
        return False
    return True


def grouped_mm_executable(a, b, offsets=None, bias=None, dtype=None) -> bool:
    """Whether ``torch._grouped_mm`` runs these operands: one floating type that torch has a kernel for on their
    device, int32 offsets. The signature is ltorch._grouped_mm's, whose bound symbols carry ``bias`` and
    ``dtype`` too."""
    if offsets is None or bias is not None or offsets.dtype != dtypes.int32 or b.dtype != a.dtype:
        return False
    if not dtypes.is_float_dtype(a.dtype):
        return False
    return _grouped_mm_kernel(a.device.devicetype.name.lower(), dtypes.to_torch_dtype(a.dtype))


def _with_ignore_index(transform):
    """The torch executor's nll_loss ``transform`` handing torch its default ignore_index (-100) for None."""

    def nll_loss(a, /, target, weight=None, ignore_index=None, reduction="mean"):
        return transform(a, target, weight, -100 if ignore_index is None else ignore_index, reduction)

    return nll_loss


@patch(
    "thunder.executors.torchex:ex._implmap",
    summary=(
        "the torch executor's checker of _grouped_mm takes ltorch._grouped_mm's arguments and the types torch "
        "has a kernel for on their device; "
        "it runs torch.sigmoid as one call, and nll_loss without an ignore_index"
    ),
    why=(
        "0.2.6's checker takes three arguments while ltorch._grouped_mm's bound symbols pass five, so any "
        "program with torch._grouped_mm (routed MoE experts) failed with a TypeError before running; it takes "
        "bfloat16 alone, where torch also runs float32 and float16 (on CPU; float32 on an H200 with torch 2.11, "
        "where a float32 MoE failed: 'Failed to find an executor for bound symbol prims._grouped_mm'). "
        "0.2.6 has no torch implementation of sigmoid: it ran as neg, exp, add and reciprocal, four calls "
        "(and three intermediate tensors) where eager makes one. Its nll_loss hands torch the ignore_index=None "
        "that ltorch.nll_loss records when none is given, which torch refuses: `F.nll_loss(logp, target)` failed "
        "for every call without grad (either cache)."
    ),
)
def _implmap(original):
    from thunder.core import prims
    from thunder.core.proxies import TensorProxy
    from thunder.executors import torchex
    from thunder.torch import _grouped_mm, nll_loss, sigmoid

    fixed = dict(original)
    if sigmoid.id not in fixed:
        operator = torchex.ex.opmap.get("sigmoid") or torchex.ex.register_operator(
            "sigmoid", like=sigmoid, module=torch
        )
        fixed[sigmoid.id] = ImplInfo(symbol=operator, checker=lambda a: isinstance(a, TensorProxy))
    for sym in (prims._grouped_mm, _grouped_mm):
        info = original.get(sym.id)
        if info is not None:
            fixed[sym.id] = ImplInfo(
                symbol=info.symbol,
                checker=grouped_mm_executable,
                execution_transform=info.execution_transform,
                grad_transform=info.grad_transform,
            )
    info = original.get(nll_loss.id)
    if info is not None and info.execution_transform is not None:
        fixed[nll_loss.id] = ImplInfo(
            symbol=info.symbol,
            checker=info.checker,
            execution_transform=_with_ignore_index(info.execution_transform),
            grad_transform=info.grad_transform,
        )
    return fixed
