"""Symbolic output shapes of fallback ("auto-registered") torch ops.

thunder runs an op it has no rule for on fake tensors built from the traced sizes, so under symbolic values
every size such an op sees is pinned. For the ops here the output shape follows from the inputs' shapes
and arguments; ``patches.torch_init`` gives their results these shapes (checked against the fake run),
and ``patches.dynamo_utils`` keeps them in thunder's programs under thunderfx, which otherwise leaves
every fallback op to PyTorch and splits the graph around it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from thunder.core import utils
from thunder.core.proxies import TensorProxy

from thunder_symbolic.guards.algebra import provably_equal
from thunder_symbolic.guards.recorder import python_value

__all__ = ["RULES", "torch_functions"]


def _narrow(a, dim, start, length):
    if isinstance(start, TensorProxy):
        return NotImplemented
    shape = list(a.shape)
    shape[utils.canonicalize_dim(a.ndim, python_value(dim))] = length
    return shape


def _new_tensor(a, *size, **kwargs):
    return list(size[0]) if len(size) == 1 and isinstance(size[0], Sequence) else list(size)


def _new_full(a, size, fill_value, **kwargs):
    return list(size)


def _view_as_complex(a):
    return list(a.shape[:-1])


def _view_as_real(a):
    return [*a.shape, 2]


def _polar(magnitude, angle):
    same = len(magnitude.shape) == len(angle.shape) and all(map(provably_equal, magnitude.shape, angle.shape))
    return list(magnitude.shape) if same else NotImplemented  # broadcasting: the fake run decides


# By thunder.torch symbol name: the output shape of a call, or NotImplemented where the fake run decides.
RULES: dict[str, Callable] = {
    "narrow": _narrow,
    "new_zeros": _new_tensor,
    "new_ones": _new_tensor,
    "new_empty": _new_tensor,
    "new_full": _new_full,
    "view_as_complex": _view_as_complex,
    "view_as_real": _view_as_real,
    "polar": _polar,
}


def torch_functions() -> dict[Callable, object]:
    """The torch functions and methods whose thunder symbols have a rule here, with those symbols."""
    import thunder.torch as ltorch

    symbols = {getattr(ltorch, name) for name in RULES}
    return {fn: symbol for fn, symbol in ltorch._torch_to_thunder_function_map.items() if symbol in symbols}
