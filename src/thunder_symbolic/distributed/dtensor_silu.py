"""A DTensor's ``silu`` as one operation.

thunder 0.2.6 composes a DTensor ``silu`` of eleven DTensor operations (dtype conversions, neg, exp, add,
reciprocal and mul), and differentiates it through them: in bfloat16 its gradient differed from eager's in
the last bit. Each operation's meta function runs it on fake DTensors through DTensor's sharding propagation,
which a process caches per operation and layout: the fake runs of neg, exp, add and reciprocal took about
30 ms of the inference benchmark's first compile (Inductor's compile of the same model had cached only
``silu``'s). Here the symbol records one operation of the torch executor, ``dtensor_silu_prim``: ``F.silu`` on
the DTensor, as eager runs it (DTensor's dispatch, rounded once), whose meta function runs the same on fake
DTensors (3-4 ms), and whose gradient is torch's ``silu_backward`` on the DTensors, as eager autograd's. The
DTensor local executor claims the symbol whole as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from thunder.core.prims import get_grad, put_grad

from thunder_symbolic.autodiff.grad_rules import grad_rule
from thunder_symbolic.distributed.dtensor_grads import fake_run_operator, reduced, shapes_like
from thunder_symbolic.distributed.dtensor_shapes import shape_preserving, shape_rule

__all__ = ["silu"]


def _silu_prim(a):
    return F.silu(a)


def _silu_backward(g, a):
    return torch.ops.aten.silu_backward(reduced(g), a)


silu = fake_run_operator(_silu_prim)
_dtensor_silu_backward = fake_run_operator(_silu_backward)


shape_rule(_silu_prim)(shape_preserving)


@shape_rule(_silu_backward)
def _silu_backward_shapes(result, g, a):
    return shapes_like(result, a)


@grad_rule(silu.id)
def _silu_grad(a):
    out = silu(a)
    put_grad(a, _dtensor_silu_backward(get_grad(out), a))
    return out
