"""Patches of ``thunder/executors/sdpaex.py``: attention without grad is left to torch's own kernel choice."""

from __future__ import annotations

import functools

from thunder.extend import ImplInfo

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.autodiff import gradient_choice


def only_for_gradients(checker):
    """``checker`` asked only while thunder picks a gradient transform
    (:mod:`thunder_symbolic.autodiff.gradient_choice`);
    otherwise the operation is left to the next executor.

    The sdpa executor differs from the torch executor's ``scaled_dot_product_attention`` only in grad mode,
    where its flash or memory-efficient forward saves what its backward reads. Without grad, torch's call picks
    the same kernels at run time, for each call's sizes; the checker's choice reads the sizes it was traced
    with, pinning them."""

    @functools.wraps(checker)
    def checks(*args, **kwargs) -> bool:
        return gradient_choice.is_choosing() and checker(*args, **kwargs)

    return checks


@patch(
    "thunder.executors.sdpaex:sdpa_ex._implmap",
    summary="the sdpa executor takes scaled_dot_product_attention only to differentiate it (grad mode)",
    why=(
        "0.2.6's checker builds fake CUDA tensors of the operands' concrete sizes to pick flash or memory-efficient "
        "attention: under symbolic values every attention on CUDA, inference included, pinned its sequence "
        "lengths (a tensor-parallel attention compiled once per length, 4 programs for 4 lengths, on an H200). "
        "Without grad the torch executor's scaled_dot_product_attention runs instead: torch picks the kernel for "
        "each call, as eager does. In grad mode the choice stays (its kernels' saved tensors differ), pinned."
    ),
)
def _implmap(original):
    from thunder.torch import scaled_dot_product_attention

    fixed = dict(original)
    info = original.get(scaled_dot_product_attention.id)
    if info is not None and info.checker is not None:
        fixed[scaled_dot_product_attention.id] = ImplInfo(
            symbol=info.symbol,
            checker=only_for_gradients(info.checker),
            execution_transform=info.execution_transform,
            grad_transform=info.grad_transform,
        )
    return fixed
