"""torch functions thunder 0.2.6 has no working operator for, written with its operators (so sizes stay symbolic).

Traced code reaches them through the jit's lookaside table (see :mod:`thunder_symbolic.semantics.lookasides`).
"""

from __future__ import annotations

import thunder.torch as ltorch
import torch
from thunder.core import dtypes, prims, utils
from thunder.core.prims import get_grad, put_grad
from thunder.core.proxies import TensorProxy

from thunder import clang
from thunder_symbolic.autodiff.grad_rules import grad_rule, zero_padded

__all__ = ["COMPOSITES"]


def eye(n, m=None, *, out=None, dtype=None, layout=torch.strided, device=None, requires_grad=False, pin_memory=False):
    """``torch.eye``: ones where the row index equals the column index."""
    if out is not None or layout is not torch.strided or requires_grad or pin_memory:
        raise NotImplementedError(
            "torch.eye under thunder.jit takes n, m, dtype and device, not out=, layout=, requires_grad= or pin_memory="
        )
    m = n if m is None else m
    utils.check(n >= 0, lambda: f"n must be greater or equal to 0, got {getattr(n, 'value', n)}")
    utils.check(m >= 0, lambda: f"m must be greater or equal to 0, got {getattr(m, 'value', m)}")
    rows = ltorch.unsqueeze(ltorch.arange(n, device=device), 1)
    columns = ltorch.unsqueeze(ltorch.arange(m, device=device), 0)
    return ltorch.to(ltorch.eq(rows, columns), ltorch.maybe_get_default_dtype(dtype))


def unfold(a, dimension, size, step):
    """``Tensor.unfold``, its windows of ``size`` every ``step`` along ``dimension``, as thunder's primitive.

    thunder's torch symbol for it is named after ``torch.nn.functional.unfold`` (its id is the first torch
    namespace's function of that name), the id of the fallback op thunder registers for that function (im2col):
    the torch executor ran F.unfold for it. ``x.unfold(1, 2, 1)`` of a 4-d tensor returned F.unfold's (2, 3, 42)
    for eager's (2, 2, 4, 5, 2), under either cache, and the call failed where F.unfold's arguments are invalid."""
    return clang.unfold(a, dimension, size, step)


def tile(a, *dims):
    """``torch.tile`` and ``x.tile``: ``repeat`` with ones put before ``dims`` shorter than ``a``'s rank. Both were
    torch fallbacks: a compile per shape under symbolic values, and ``x.tile(2, 1)`` (dims as arguments, as
    torch takes them) failed with a TypeError."""
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        (dims,) = dims
    return ltorch.repeat(a, (1,) * (a.ndim - len(dims)) + tuple(dims))


@grad_rule(prims.PrimIDs.UNFOLD)
def _unfold_grad(a, dim, size, step):
    """For each offset in the window, the gradient's slice at that offset is put back at the positions the windows
    read (every ``step``-th from the offset, zeros between: ``prims.pad``'s interior padding), and the slices are
    summed. thunder 0.2.6 has no gradient for the primitive."""
    result = prims.unfold(a, dim, size, step)
    g = get_grad(result)
    if a.ndim == 0:  # (the result holds the one element `size` times: 0 or 1)
        put_grad(a, ltorch.sum(g))
        return result
    dim = utils.canonicalize_dim(a.ndim, dim)
    windows = result.shape[dim]
    spread = windows + (windows - 1) * (step - 1)  # (from the first window's start to the last's)
    grad = None
    for offset in range(size):
        padding = [(0, 0, 0)] * a.ndim
        padding[dim] = (offset, a.shape[dim] - offset - spread, step - 1)
        part = zero_padded(ltorch.select(g, -1, offset), tuple(padding))
        grad = part if grad is None else grad + part
    put_grad(a, ltorch.zeros_like(a) if grad is None else grad)  # (windows of size 0 read nothing)
    return result


def diff(a, n=1, dim=-1, prepend=None, append=None):
    """``torch.diff``: each element minus the one before it along ``dim`` (``!=`` of bools), ``n`` times, after
    ``prepend`` and ``append`` are put at the ends. A torch fallback in thunder: a compile per shape under symbolic
    values (transformers' detection of packed sequences calls it on every forward without a cache)."""
    utils.check(a.ndim > 0, lambda: "diff expects input to be at least one-dimensional", RuntimeError)
    dim = utils.canonicalize_dim(a.ndim, dim)
    parts = [t for t in (prepend, a, append) if t is not None]
    if len(parts) > 1:
        a = ltorch.cat(parts, dim)
    for _ in range(n):
        length = a.shape[dim]
        if length == 0:  # (an empty dim stays empty; torch.compile specializes sizes 0 and 1 too)
            break
        later, earlier = ltorch.narrow(a, dim, 1, length - 1), ltorch.narrow(a, dim, 0, length - 1)
        boolean = dtypes.is_boolean_dtype(dtypes.to_dtype(a.dtype))  # (a torch dtype where traced code reads it)
        a = ltorch.ne(later, earlier) if boolean else ltorch.sub(later, earlier)
    return a


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """``torch.addmm``: ``beta * input + alpha * mat1 @ mat2``. A torch fallback in thunder, which ran torch's kernel
    on fake tensors of the traced sizes: under symbolic values a compile per row count (GPT-2's ``Conv1D``, every
    projection of the model, recompiled at every sequence length)."""
    if out is not None:
        raise NotImplementedError("torch.addmm under thunder.jit takes no out=")
    product = ltorch.matmul(mat1, mat2)
    if alpha != 1:
        product = ltorch.mul(product, alpha)
    if beta == 0:  # (torch ignores input then, NaNs included)
        return product
    input = ltorch.expand(input, product.shape)  # (torch's input must expand to the product, not broadcast with it)
    return ltorch.add(input if beta == 1 else ltorch.mul(input, beta), product)


def _elementwise_when_binary(torch_fn, elementwise, reduction):
    """``torch.min``/``torch.max``: of two tensors, ``torch.minimum``/``maximum``; of one, ``amin``/``amax`` of all of
    it; over a dim, thunder's torch fallback. The fallback ran torch's kernel on fake tensors of the traced sizes:
    under symbolic values a compile per shape (T5's relative position buckets, `torch.min(a, torch.full_like(a,
    c))`, per length)."""

    def min_or_max(input, *args, **kwargs):
        if not args and not kwargs and isinstance(input, TensorProxy):
            return reduction(input, tuple(range(input.ndim)))
        other = (
            args[0] if len(args) == 1 and not kwargs else kwargs.get("other") if not args and len(kwargs) == 1 else None
        )
        if isinstance(other, TensorProxy) and isinstance(input, TensorProxy):
            return elementwise(input, other)
        return ltorch._torch_to_thunder_function_map[torch_fn](input, *args, **kwargs)

    return min_or_max


COMPOSITES = {
    torch.min: _elementwise_when_binary(torch.min, ltorch.minimum, ltorch.amin),
    torch.max: _elementwise_when_binary(torch.max, ltorch.maximum, ltorch.amax),
    torch.addmm: addmm,
    torch.Tensor.addmm: addmm,
    torch.eye: eye,
    torch.Tensor.unfold: unfold,
    torch.tile: tile,
    torch.Tensor.tile: tile,
    torch.diff: diff,
    torch.Tensor.diff: diff,
}
