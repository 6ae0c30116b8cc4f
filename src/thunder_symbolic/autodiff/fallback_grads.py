"""The gradients of fallback ops whose tensors come in a sequence (``torch.vstack([x, y])``).

A fallback op (a torch function thunder has no symbol of its own for) is differentiated by torch's vjp
through an augmented forward and a backward, whose gradients have the structure of the op's arguments:
``([gx, gy],)`` for ``vstack([x, y])``. thunder 0.2.6's autodiff pairs those gradients with the op's
arguments one level deep, so a gradient inside a sequence never reaches its tensor: under either cache
option the gradient of ``vstack([x, 2 * x]).sum() + (x * x).sum()`` missed the vstack's part, silently (and
alone, vstack's output did not even require grad).

:class:`FallbackGradsFlattened` reads a table of grad rules so that a fallback op without a rule of its own
gets one that runs the same augmented forward and backward and pairs arguments and gradients leaf by leaf.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable

from thunder.core import prims
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten, tree_iter, tree_map
from thunder.core.transforms import put_grads

from thunder_symbolic.autodiff.grad_rules import RuleView

__all__ = ["FallbackGradsFlattened", "fallback_ids"]


@functools.cache
def fallback_ids() -> frozenset:
    """The symbol ids of thunder's fallback ops (auto-registered: differentiated by torch's own vjp)."""
    import thunder.torch as ltorch

    symbols = ltorch._torch_to_thunder_function_map.values()
    return frozenset(s.id for s in symbols if prims.OpTags.AUTO_REGISTERED in (getattr(s, "tags", None) or ()))


def _is_one_of(value, names: set) -> bool:
    return isinstance(value, TensorProxy) and value.name in names


def _flattened_rule(augmented_forward: Callable, backward: Callable) -> Callable:
    def fallback_grad(*args, **kwargs):
        primal, saved = augmented_forward(*args, **kwargs)
        inputs = {a.name for a in tree_iter((args, kwargs)) if isinstance(a, TensorProxy)}
        # an output that is an input gets its own proxy, whose gradient is then this op's
        primal = tree_map(lambda p: prims.shallow_copy(p) if _is_one_of(p, inputs) else p, primal)
        grads = backward(*saved, *(prims.get_grad(p) for p in tree_iter(primal) if isinstance(p, TensorProxy)))
        put_grads(tree_flatten(args)[0], tree_flatten(grads)[0])
        return primal

    return fallback_grad


class FallbackGradsFlattened(RuleView):
    """A table of grad rules in which each fallback op without a rule has one pairing gradients leaf by leaf."""

    def __getitem__(self, key: Hashable) -> Callable:
        try:
            return self.table[key]
        except KeyError:
            if key not in fallback_ids():
                raise
        from thunder.core.transforms import augmented_forward_impls, backward_impls

        return _flattened_rule(augmented_forward_impls[key], backward_impls[key])
