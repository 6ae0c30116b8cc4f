"""Which of thunder's gradients are right for complex tensors; the others refuse them.

PyTorch's gradient of a complex function is the conjugate Wirtinger one: for a product, the product's
gradient times the *conjugate* of the other factor. thunder 0.2.6's rules never conjugate, so through
``/``, ``exp``, ``sqrt``, ``@``... of complex tensors its gradients differ from eager's, silently, under
either cache option. A rule is right for complex tensors when its op is linear with a real Jacobian
(reshapes, slices, sums, type conversions: the conjugate changes nothing), when it is torch's own
(fallback ops differentiate through ``torch.autograd``), or when it was written or checked for them
here; every other rule raises ``NotImplementedError`` when one of its inputs is a complex tensor.

:class:`RealOnlyRules` puts the check in front of a table of rules (``patches.core_transforms`` wraps
thunder's two: the grad rules and the augmented forwards).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

from thunder.core import dtypes
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten

from thunder_symbolic.autodiff.fallback_grads import fallback_ids
from thunder_symbolic.autodiff.grad_rules import RuleView

__all__ = ["COMPLEX_SAFE", "RealOnlyRules"]

COMPLEX_SAFE: frozenset[Hashable] = frozenset(
    {
        # linear, with a real Jacobian
        *(PrimIDs.ADD, PrimIDs.SUB, PrimIDs.NEG, PrimIDs.SUM, PrimIDs.CONVERT_ELEMENT_TYPE, PrimIDs.WHERE),
        *(PrimIDs.RESHAPE, PrimIDs.BROADCAST_IN_DIM, PrimIDs.TRANSPOSE, PrimIDs.SQUEEZE, PrimIDs.STRIDE_ORDER),
        PrimIDs.FLIP,
        *(PrimIDs.SLICE, PrimIDs.CAT, PrimIDs.PAD, PrimIDs.TAKE, PrimIDs.TAKE_ALONG_AXIS, PrimIDs.GATHER),
        *(PrimIDs.CLONE, PrimIDs.SHALLOW_COPY, PrimIDs.COPY_, PrimIDs.DEVICE_PUT, PrimIDs.UPDATE_ALIASES),
        *("torch.sum", "torch.contiguous", "torch.Tensor.contiguous", "torch.split", "torch.cumsum"),
        # no gradient of their own: unpacking, comparisons, factories
        *(PrimIDs.UNPACK_SEQUENCE, PrimIDs.UNPACK_KEY, PrimIDs.UNPACK_EMPTY_DICT, PrimIDs.SHAPE),
        *(PrimIDs.EQ, PrimIDs.NE, PrimIDs.GE, PrimIDs.GT, PrimIDs.LE, PrimIDs.LT, PrimIDs.FULL, PrimIDs.IOTA),
        # checked against eager for complex inputs (thunder_symbolic's product rule among them)
        *(PrimIDs.ABS, PrimIDs.MUL),
    }
)


def _auto_registered(symbol_id: Hashable) -> bool:
    """Whether ``symbol_id`` is a fallback op's: its gradient is torch's (``torch.autograd.functional.vjp``)."""
    return symbol_id in fallback_ids()


def _complex_input(args, kwargs) -> TensorProxy | None:
    flat, _ = tree_flatten((args, kwargs))
    return next((a for a in flat if isinstance(a, TensorProxy) and dtypes.is_complex_dtype(a.dtype)), None)


def _for_real_tensors(symbol_id: Hashable, rule: Callable) -> Callable:
    @functools.wraps(rule)
    def rule_for_real_tensors(*args, **kwargs):
        tensor = _complex_input(args, kwargs)
        if tensor is not None:
            raise NotImplementedError(
                f"thunder's gradient of {getattr(symbol_id, 'name', symbol_id)} is not the conjugate (Wirtinger) "
                "gradient PyTorch computes "
                f"for complex tensors, and {tensor.name} is {tensor.dtype}: it would differ from eager's. "
                "Compute this part in real arithmetic (view_as_real), or outside the jitted function."
            )
        return rule(*args, **kwargs)

    return rule_for_real_tensors


class RealOnlyRules(RuleView):
    """A table of rules by symbol id, whose rules that are not complex-safe refuse complex tensors."""

    def rule_for(self, key, rule):
        if key in COMPLEX_SAFE or _auto_registered(key):
            return rule
        return _for_real_tensors(key, rule)
