"""The gradient of a 0-d tensor that an elementwise op broadcast as if it were a number.

PyTorch combines a 0-d CPU tensor (``x.sum()``, ``x[0, 0]``, a 0-d argument) with tensors of any shape,
as it would a number, and so does thunder: its clang ops leave such a tensor 0-d up to the prim
(``maybe_broadcast``'s ``treat_cpu_scalar_tensors_as_numbers``). The prim's grad rule then puts a gradient
of the *other* operand's shape for it. thunder 0.2.6 sums that back only for the arguments of
``thunder.core.transforms.vjp``, not inside a program: the backward of ``zeros(3, 2) + x.sum()`` failed
(``expand: attempting to expand a dimension of length 3!``), and that of ``x + x.sum()`` for a (2, 2)
``x`` returned ``g`` instead of ``g + g.sum()``: a wrong gradient, under either cache option, wherever
the shapes happened to match. Only CPU programs see it (a 0-d CUDA tensor is broadcast like any other).

:class:`ScalarGradsSummed` reads a table of grad rules so that a rule called with a 0-d tensor among
tensors of more dims records as it would, except that each gradient it puts for a 0-d tensor is first
summed to 0-d, as PyTorch's autograd does. The sum reads no size,
so under symbolic values the backward stays one program across sizes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

from thunder.core import prims
from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx

from thunder_symbolic.autodiff.grad_rules import RuleView

__all__ = ["ScalarGradsSummed"]


def _mixes_ranks(args, kwargs) -> bool:
    """Whether a 0-d tensor comes with a tensor of more dims (the only way a rule can broadcast one)."""
    ranks = {a.ndim == 0 for a in tree_flatten((args, kwargs))[0] if isinstance(a, TensorProxy)}
    return ranks == {True, False}


def _put_scalar_grad(bsym) -> bool:
    """Puts ``bsym``'s gradient summed to 0-d if it puts one of more dims for a 0-d tensor; says whether it
    did."""
    if bsym.sym.id != PrimIDs.PUT_GRAD:
        return False
    tensor, grad = bsym.args
    if not (isinstance(tensor, TensorProxy) and isinstance(grad, TensorProxy) and tensor.ndim == 0 < grad.ndim):
        return False
    import thunder.torch as ltorch

    prims.put_grad(tensor, ltorch.sum(grad))
    return True


def _summing_scalar_grads(rule: Callable) -> Callable:
    @functools.wraps(rule)
    def rule_summing_scalar_grads(*args, **kwargs):
        if not _mixes_ranks(args, kwargs):
            return rule(*args, **kwargs)
        trace = get_tracectx()
        trace.push_scope([])
        try:
            result = rule(*args, **kwargs)
        finally:
            recorded = trace.pop_scope()
        for bsym in recorded:
            if not _put_scalar_grad(bsym):
                trace.peek_scope().append(bsym)
        return result

    return rule_summing_scalar_grads


class ScalarGradsSummed(RuleView):
    """A table of grad rules whose gradients for implicitly broadcast 0-d tensors are summed to 0-d."""

    def rule_for(self, key: Hashable, rule: Callable) -> Callable:
        return _summing_scalar_grads(rule)
