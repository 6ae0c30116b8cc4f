"""Symbolic output shapes of fallback ("auto-registered") torch ops, and their gradients.

thunder runs an op it has no rule for on fake tensors built from the traced sizes, so under symbolic values
every size such an op sees is pinned. For the ops here the output shape follows from the inputs' shapes
and arguments; ``patches.torch_init`` gives their results these shapes (checked against the fake run),
and ``patches.dynamo_utils`` keeps them in thunder's programs under thunderfx, which otherwise leaves
every fallback op to PyTorch and splits the graph around it.

A fallback op's backward is the same kind of fake run (of ``torch.autograd.functional.vjp``): it pinned
the sizes again while the backward was built, one compile per size in grad mode. The grad rules here
compute the gradients with thunder's operations on the symbolic sizes instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from thunder.core import utils
from thunder.core.prims import get_grad, put_grad
from thunder.core.proxies import TensorProxy

from thunder_symbolic.autodiff.grad_rules import grad_rule, zero_padded
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


def _shape_of_first(a, *args, **kwargs):
    return list(a.shape) if isinstance(a, TensorProxy) else NotImplemented


def _shape_of_values(sorted_sequence, values, *args, **kwargs):
    return list(values.shape) if isinstance(values, TensorProxy) else NotImplemented


def _kron(a, b):
    rank = max(a.ndim, b.ndim)
    padded_a, padded_b = [1] * (rank - a.ndim) + list(a.shape), [1] * (rank - b.ndim) + list(b.shape)
    return [x * y for x, y in zip(padded_a, padded_b)]


def _hstack(tensors):
    tensors = list(tensors)
    if not tensors or any(t.ndim != tensors[0].ndim for t in tensors) or tensors[0].ndim == 0:
        return NotImplemented  # (torch's own error, or 0-d tensors made 1-d: the fake run decides)
    dim = 0 if tensors[0].ndim == 1 else 1
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors[1:]) + tensors[0].shape[dim]
    return shape


def _reduced(a, dim, keepdim):
    """``a``'s shape reduced over ``dim`` (None: every dim), as torch's reductions shape their results."""
    if dim is None:
        dims = set(range(a.ndim))
    else:
        dims = {utils.canonicalize_dim(a.ndim, d) for d in ((dim,) if isinstance(dim, int) else dim)} or set(
            range(a.ndim)
        )
    return [1 if i in dims else size for i, size in enumerate(a.shape) if keepdim or i not in dims]


def _vector_norm(a, ord=2, dim=None, keepdim=False, **kwargs):
    return _reduced(a, python_value(dim), python_value(keepdim)) if isinstance(a, TensorProxy) else NotImplemented


def _norm(a, p="fro", dim=None, keepdim=False, **kwargs):
    if not isinstance(a, TensorProxy) or isinstance(p, str) and p != "fro":
        return NotImplemented  # (the nuclear norm reduces two dims whatever dim says: the fake run decides)
    return _reduced(a, python_value(dim), python_value(keepdim))


def _cdist(x1, x2, *args, **kwargs):
    if x1.ndim != x2.ndim or x1.ndim < 2 or not _same_shapes_of(x1.shape[:-2], x2.shape[:-2]):
        return NotImplemented  # (broadcast batch dims: the fake run decides)
    return [*x1.shape[:-1], x2.shape[-2]]


def _diag(a, diagonal=0):
    if a.ndim != 1:
        return NotImplemented  # (a matrix's diagonal: a min of sizes, from the fake run)
    side = a.shape[0] + abs(python_value(diagonal))
    return [side, side]


def _diag_embed(a, offset=0, dim1=-2, dim2=-1):
    if (python_value(dim1), python_value(dim2)) != (-2, -1) or a.ndim == 0:
        return NotImplemented
    side = a.shape[-1] + abs(python_value(offset))
    return [*a.shape[:-1], side, side]


def _view_as_complex(a):
    return list(a.shape[:-1])


def _view_as_real(a):
    return [*a.shape, 2]


def _same_shapes(a, b) -> bool:
    """Whether ``a`` and ``b`` have the same shape (guarded: a call where they broadcast compiles anew)."""
    return _same_shapes_of(a.shape, b.shape)


def _same_shapes_of(a: Sequence, b: Sequence) -> bool:
    return len(a) == len(b) and all(x == y for x, y in zip(a, b))


def _polar(magnitude, angle):
    return list(magnitude.shape) if _same_shapes(magnitude, angle) else NotImplemented  # broadcasting: fake run


# By thunder.torch symbol name: the output shape of a call, or NotImplemented where the fake run decides.
RULES: dict[str, Callable] = {
    "narrow": _narrow,
    "new_zeros": _new_tensor,
    "new_ones": _new_tensor,
    "new_empty": _new_tensor,
    "new_full": _new_full,
    "conj": _shape_of_first,
    "conj_physical": _shape_of_first,
    "resolve_conj": _shape_of_first,
    "view_as_complex": _view_as_complex,
    "view_as_real": _view_as_real,
    "polar": _polar,
    "cumprod": _shape_of_first,
    "logcumsumexp": _shape_of_first,
    "roll": _shape_of_first,
    "bucketize": _shape_of_first,
    "searchsorted": _shape_of_values,
    "kron": _kron,
    "hstack": _hstack,
    "vector_norm": _vector_norm,
    "norm": _norm,
    "cdist": _cdist,
    "diag": _diag,
    "diag_embed": _diag_embed,
    "detach": _shape_of_first,
}


def _symbol(name: str):
    import thunder.torch as ltorch

    return getattr(ltorch, name)


def _no_gradient(name: str) -> Callable:
    def rule(a, *args, **kwargs):
        """A new tensor: only ``a``'s dtype and device are read, so ``a`` gets no gradient (as in PyTorch)."""
        return _symbol(name)(a, *args, **kwargs)

    return rule


for _name in ("new_zeros", "new_ones", "new_empty", "new_full"):
    grad_rule(f"Tensor.{_name}")(_no_gradient(_name))


@grad_rule("torch.detach")
def _detach_grad(a):
    """None: no gradient flows through a detached tensor. 0.2.6's fake run of torch's vjp gave ``a`` a gradient of
    zeros where eager leaves it None, so ``t * w.detach()`` (or ``w.data``) gave the parameter ``w`` a zero
    gradient, which an optimizer then steps (weight decay, momentum), unlike eager's."""
    return _symbol("detach")(a)


@grad_rule("torch.narrow")
def _narrow_grad(a, dim, start, length):
    """The narrowed part's gradient padded back to ``a``'s length along ``dim``."""
    result = _symbol("narrow")(a, dim, start, length)
    g = get_grad(result)
    dim = utils.canonicalize_dim(a.ndim, dim)
    start = start if start >= 0 else start + a.shape[dim]
    padding = [(0, 0, 0)] * a.ndim
    padding[dim] = (start, a.shape[dim] - start - length, 0)
    put_grad(a, zero_padded(g, tuple(padding)))
    return result


def _conjugate_grad(name: str) -> Callable:
    def rule(a):
        """PyTorch's rule: the gradient's conjugate, materialized (a lazily conjugated gradient reached
        ``view_as_real`` unresolved in the torch.compile executor's graphs)."""
        result = _symbol(name)(a)
        put_grad(a, _symbol("conj_physical")(get_grad(result)))
        return result

    return rule


for _name in ("conj", "conj_physical"):
    grad_rule(f"torch.{_name}")(_conjugate_grad(_name))
del _name


@grad_rule("torch.resolve_conj")
def _resolve_conj_grad(a):
    """The same values: the gradient passes through."""
    result = _symbol("resolve_conj")(a)
    put_grad(a, get_grad(result))
    return result


@grad_rule("torch.view_as_real")
def _view_as_real_grad(a):
    """PyTorch's rule: the real view's gradient, viewed as complex."""
    result = _symbol("view_as_real")(a)
    put_grad(a, _symbol("view_as_complex")(_symbol("contiguous")(get_grad(result))))
    return result


@grad_rule("torch.view_as_complex")
def _view_as_complex_grad(a):
    """PyTorch's rule: the complex view's gradient, viewed as real."""
    result = _symbol("view_as_complex")(a)
    put_grad(a, _symbol("view_as_real")(_symbol("resolve_conj")(_symbol("contiguous")(get_grad(result)))))
    return result


@grad_rule("torch.polar")
def _polar_grad(magnitude, angle):
    """PyTorch's rule (``polar_backward``) in real arithmetic: for the gradient ``g = re + i im``,
    ``real(conj(g) * sgn(result))`` and ``real(conj(g) * result * 1j)``, summed over broadcast dims."""
    from thunder.core.transforms import sum_to

    result = _symbol("polar")(magnitude, angle)
    g = get_grad(result)
    re, im = _symbol("real")(g), _symbol("imag")(g)
    cos, sin = _symbol("cos")(angle), _symbol("sin")(angle)
    put_grad(magnitude, sum_to(_symbol("sign")(magnitude) * (re * cos + im * sin), magnitude.shape))
    put_grad(angle, sum_to(magnitude * (im * cos - re * sin), angle.shape))
    return result


def torch_functions() -> dict[Callable, object]:
    """The torch functions and methods whose thunder symbols have a rule here, with those symbols."""
    import thunder.torch as ltorch

    symbols = {getattr(ltorch, name) for name in RULES}
    return {fn: symbol for fn, symbol in ltorch._torch_to_thunder_function_map.items() if symbol in symbols}
