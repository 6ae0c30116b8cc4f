"""Grad rules of thunder's DTensor prims: tensor-parallel modules train under thunder.

thunder 0.2.6 differentiates only a DTensor's reshape, transpose, dtype conversion, exp and mul, so a
tensor-parallel module called in grad mode failed on its first operation ("Failed to find a gradient
transform for bound symbol ... dtensor_from_local"). The rules here give every DTensor prim on the
tensor-parallel path the gradient PyTorch's DTensor autograd gives:

- ``from_local``: the gradient is redistributed to the placements the local tensor was given (a Partial
  one read as Replicate, as torch does in a backward), then its local tensor;
- ``to_local``: the local gradient becomes a DTensor of the forward's mesh, placements (or
  ``grad_placements``) and global shape;
- ``redistribute``: the gradient is redistributed back (Partial read as Replicate);
- ``linear``, ``broadcast_in_dim`` and a DTensor ``_grouped_mm``: backward operators of the torch
  executor that run on DTensors the torch code eager autograd runs (matmuls, sums), so torch's sharding
  propagation decides each gradient's placements; their meta functions run that code on fake DTensors,
  like thunder's DTensor meta functions, and give the gradients their inputs' symbolic sizes;
- ``add``, ``mul`` (thunder's rule failed for a number factor), ``neg`` and ``reciprocal``: elementwise,
  in DTensor prims;
- ``silu``: one operation, with its rule, in :mod:`thunder_symbolic.distributed.dtensor_silu`.

Rules are registered with :func:`thunder_symbolic.autodiff.grad_rules.grad_rule`; thunder reads them while the
patch set is applied.
"""

from __future__ import annotations

import torch
from thunder.core import proxies
from thunder.core.prims import get_grad, put_grad
from thunder.core.proxies import TensorProxy
from thunder.executors.torchex import ex as pytorchex
from thunder.torch.experimental import dtensor_proxy, dtensor_utils
from thunder.torch.experimental import dtensor_torch_and_prims as dtensor_prims
from thunder.torch.experimental.dtensor_torch_and_prims import DTensorPrimIDs
from torch.distributed.tensor import DTensor, Partial, Replicate

from thunder_symbolic.autodiff.grad_rules import grad_rule
from thunder_symbolic.distributed.dtensor_shapes import DTensorShapes, shape_rule, shapes_of, shard_dims

__all__ = ["backward_placements", "fake_run_operator", "reduced", "shapes_like"]


def backward_placements(placements) -> tuple:
    """The placements a gradient is redistributed to for a forward value of ``placements``: a Partial
    one is kept Replicate, as torch's DTensor backward does (reducing it again would only cost)."""
    return tuple(Replicate() if isinstance(p, Partial) else p for p in placements)


# --- Backward operators: torch code on DTensors, executed by the torch executor ----------------------


def reduced(g):
    """``g`` with its Partial placements reduced (Replicate). A gradient proxy has its forward value's
    placements, while the gradient arriving for a Partial value is Replicate (see
    :func:`backward_placements`): the meta function's fake run then computes the layouts the run gets,
    and a gradient that does arrive Partial is reduced first (torch 2.14's matmul keeps it Partial, with
    the weight gradient's local shape then the full one)."""
    placements = backward_placements(g.placements)
    return g if tuple(g.placements) == placements else g.redistribute(g.device_mesh, placements)


def _linear_backward(g, a, w, with_bias: bool):
    """``F.linear``'s gradients as eager autograd computes them: through the 2-D matmuls of its input."""
    g = reduced(g)
    g2, a2 = g.reshape(-1, g.shape[-1]), a.reshape(-1, a.shape[-1])
    grads = (g.matmul(w), g2.t().matmul(a2))
    return (*grads, g2.sum(0)) if with_bias else grads


def _broadcast_in_dim_backward(g, expanded: tuple, reduced: tuple):
    """A broadcast's gradient: summed over the dims it ``expanded`` from 1 (kept) and those it added."""
    if expanded:
        g = g.sum(expanded, keepdim=True)
    return g.sum(reduced) if reduced else g


def _to_local_backward(g, mesh, placements, global_shape):
    """``to_local``'s gradient: the local gradient as a DTensor of the forward's layout. ``from_local``
    computes its global shape and strides from the local tensor's, as torch's backward does; an uneven
    sharding states the forward's global shape."""
    grad = DTensor.from_local(g, mesh, placements, run_check=False)
    if tuple(grad.shape) != tuple(global_shape):
        grad = DTensor.from_local(g, mesh, placements, run_check=False, shape=global_shape, stride=grad.stride())
    return grad


def _from_local_backward(g, mesh, placements, local_shape):
    """``from_local``'s gradient: ``g`` redistributed to the placements the local tensor was given, then
    its local tensor. ``g``'s placements are known only now: a gradient proxy has its forward value's
    placements, while the gradient flowing back may be Partial where that value was Replicate."""
    if tuple(g.placements) != tuple(placements):
        g = g.redistribute(mesh, placements)
    return g.to_local()


def _redistribute_backward(g, mesh, placements, local_shape=None, global_shape=None, like=None):
    """``redistribute``'s gradient: ``g`` redistributed to the placements of the forward's input (decided
    at run time, see :func:`_from_local_backward`). The sizes, or for a DTensor argument the argument
    itself (``like``), only give the result its symbolic shapes."""
    return g if tuple(g.placements) == tuple(placements) else g.redistribute(mesh, placements)


def _grouped_mm_backward(g, a, b, offsets):
    """``torch._grouped_mm``'s gradients by torch's own autograd (there is one grouped-matmul layout per
    operand arrangement; recomputing the product is the price of not restating them)."""
    with torch.enable_grad():
        a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
        return torch.autograd.grad(torch._grouped_mm(a, b, offsets), (a, b), reduced(g))


def _proxy_of(result):
    if isinstance(result, tuple):
        return tuple(_proxy_of(r) for r in result)
    return dtensor_proxy.proxify_dtensor(result) if isinstance(result, DTensor) else proxies.proxy(result)


def fake_run_operator(fn):
    """``fn`` as an operator of the torch executor named ``dtensor<fn's name>``; its meta function runs
    ``fn`` on fake DTensors (as thunder's DTensor meta functions do) and proxies the results."""

    def meta(*args, **kwargs):
        return _proxy_of(dtensor_utils.run_with_fake_tensor(fn, *args, **kwargs))

    op = pytorchex.register_operator(f"dtensor{fn.__name__}", meta=meta, fn=fn)
    pytorchex.register_implementation(op, op)
    return op


dtensor_linear_backward = fake_run_operator(_linear_backward)
dtensor_broadcast_in_dim_backward = fake_run_operator(_broadcast_in_dim_backward)
dtensor_to_local_backward = fake_run_operator(_to_local_backward)
dtensor_from_local_backward = fake_run_operator(_from_local_backward)
dtensor_redistribute_backward = fake_run_operator(_redistribute_backward)
dtensor_grouped_mm_backward = fake_run_operator(_grouped_mm_backward)


# --- Their symbolic result shapes ------------------------------------------------------------------


def shapes_like(grad, x) -> DTensorShapes | None:
    """``x``'s sizes for its gradient ``grad`` (a fake DTensor), when both shard the same dims."""
    if shard_dims(grad.placements, grad.ndim) != shard_dims(x.placements, len(x._shape)):
        return None
    return shapes_of(x)


@shape_rule(_linear_backward)
def _linear_backward_shapes(result, g, a, w, with_bias):
    shapes = (shapes_like(result[0], a), shapes_like(result[1], w))
    if not with_bias:
        return shapes
    bias_sharding = shard_dims(result[2].placements, 1)
    if all(d is None for d in bias_sharding):
        local = w._shape[0]
    elif bias_sharding == tuple(0 if d == 0 else None for d in shard_dims(w.placements, 2)):
        local = w.local_tensor._shape[0]  # sharded as the weight's rows
    else:
        return None
    return (*shapes, DTensorShapes((local,), (w._shape[0],)))


@shape_rule(_grouped_mm_backward)
def _grouped_mm_backward_shapes(result, g, a, b, offsets):
    return shapes_like(result[0], a), shapes_like(result[1], b)


@shape_rule(_from_local_backward)
def _from_local_backward_shapes(result, g, mesh, placements, local_shape):
    return DTensorShapes(tuple(local_shape), tuple(local_shape))


@shape_rule(_to_local_backward)
def _to_local_backward_shapes(result, g, mesh, placements, global_shape):
    return DTensorShapes(tuple(g._shape), tuple(global_shape))


@shape_rule(_redistribute_backward)
def _redistribute_backward_shapes(result, g, mesh, placements, local_shape=None, global_shape=None, like=None):
    if like is not None:
        return shapes_of(like)
    return DTensorShapes(tuple(local_shape), tuple(global_shape))


@shape_rule(_broadcast_in_dim_backward)
def _broadcast_in_dim_backward_shapes(result, g, expanded, reduced):
    kept = [d for d in range(len(g._shape)) if d not in reduced]
    sharded = {d for d in shard_dims(result.placements, len(kept)) if d is not None}
    global_, local = [], []
    for i, d in enumerate(kept):
        size = 1 if d in expanded else g._shape[d]
        global_.append(size)
        local.append(g.local_tensor._shape[d] if i in sharded and d not in expanded else size)
    return DTensorShapes(tuple(local), tuple(global_))


# --- The grad rules --------------------------------------------------------------------------------
# They read sizes as ``_shape``: ``.shape`` binds a shape operation on the proxy in the joint trace, which
# made the backward need the forward's DTensor (or a local tensor no trace holds) only for its sizes.


@grad_rule("dtensor_from_local")
def _from_local_grad(x, mesh, placements, *, run_check=False, shape=None, stride=None):
    out = dtensor_prims.dtensor_from_local_prim(x, mesh, placements, run_check=run_check, shape=shape, stride=stride)
    put_grad(x, dtensor_from_local_backward(get_grad(out), mesh, backward_placements(placements), x._shape))
    return out


@grad_rule("dtensor_to_local")
def _to_local_grad(d, *, grad_placements=None):
    out = dtensor_prims.dtensor_to_local_prim(d, grad_placements=grad_placements)
    g = get_grad(out)
    placements = tuple(d.placements if grad_placements is None else grad_placements)
    put_grad(d, dtensor_to_local_backward(g, d.device_mesh, placements, d._shape))
    return out


@grad_rule("dtensor_redistribute")
def _redistribute_grad(d, device_mesh=None, placements=None, *, async_op=False):
    out = dtensor_prims.dtensor_redistribute_prim(d, device_mesh, placements, async_op=async_op)
    target = backward_placements(d.placements)
    # A replicated or partial d holds the global shape locally. The local sizes of a sharded DTensor
    # argument are read by the prologue, not values of the computation: the argument (alive anyway)
    # gives them; an intermediate d is not kept for its sizes.
    if not any(p.is_shard() for p in d.placements):
        sizes = {"local_shape": d._shape, "global_shape": d._shape}
    elif getattr(d, "history", None) is not None:
        sizes = {"like": d}
    else:
        sizes = {"local_shape": d.local_tensor._shape, "global_shape": d._shape}
    put_grad(d, dtensor_redistribute_backward(get_grad(out), d.device_mesh, target, **sizes))
    return out


@grad_rule(DTensorPrimIDs.LINEAR)
def _linear_grad(a, w, bias=None):
    out = dtensor_prims.dtensor_linear_prim(a, w, bias)
    grads = dtensor_linear_backward(get_grad(out), a, w, bias is not None)
    for x, grad in zip((a, w, bias), grads):
        put_grad(x, grad)
    return out


@grad_rule(DTensorPrimIDs.BROADCAST_IN_DIM)
def _broadcast_in_dim_grad(a, shape, broadcast_dimensions):
    out = dtensor_prims.dtensor_broadcast_in_dim_prim(a, shape, broadcast_dimensions)
    g = get_grad(out)
    reduced = tuple(d for d in range(len(shape)) if d not in broadcast_dimensions)
    expanded = tuple(d for size, d in zip(a._shape, broadcast_dimensions) if size == 1 and shape[d] != 1)
    put_grad(a, dtensor_broadcast_in_dim_backward(g, expanded, reduced) if expanded or reduced else g)
    return out


@grad_rule(DTensorPrimIDs.ADD)
def _add_grad(a, b):
    out = dtensor_prims.dtensor_add_prim(a, b)
    g = get_grad(out)
    for x in (a, b):
        if isinstance(x, TensorProxy):
            put_grad(x, g)
    return out


@grad_rule(DTensorPrimIDs.MUL)
def _mul_grad(a, b):
    """Replaces thunder's rule, which multiplies ``b`` by the gradient and so failed for a number ``b``
    (``d * 2``): the gradient comes first."""
    out = dtensor_prims.dtensor_mul_prim(a, b)
    g = get_grad(out)
    put_grad(a, dtensor_prims.dtensor_mul_prim(g, b))
    if isinstance(b, TensorProxy):
        put_grad(b, dtensor_prims.dtensor_mul_prim(g, a))
    return out


@grad_rule(DTensorPrimIDs.NEG)
def _neg_grad(a):
    out = dtensor_prims.dtensor_neg_prim(a)
    put_grad(a, dtensor_prims.dtensor_neg_prim(get_grad(out)))
    return out


@grad_rule(DTensorPrimIDs.RECIPROCAL)
def _reciprocal_grad(a):
    out = dtensor_prims.dtensor_reciprocal_prim(a)
    square = dtensor_prims.dtensor_mul_prim(out, out)
    put_grad(a, dtensor_prims.dtensor_neg_prim(dtensor_prims.dtensor_mul_prim(get_grad(out), square)))
    return out


@grad_rule(DTensorPrimIDs._GROUPED_MM)
def _grouped_mm_grad(a, b, offsets):
    out = dtensor_prims.dtensor_grouped_mm_prim(a, b, offsets)
    grad_a, grad_b = dtensor_grouped_mm_backward(get_grad(out), a, b, offsets)
    put_grad(a, grad_a)
    put_grad(b, grad_b)
    return out
