"""Symbolic result shapes of thunder's DTensor operations.

thunder 0.2.6 computes the result of a DTensor operation by running the torch operation on fake tensors
built from the traced sizes. The run needs concrete sizes, so every size it read became a value pin and a
DTensor program recompiled for every sequence length. The fake run still decides what only torch's
sharding propagation knows (placements, dtype); for the operations below, the result's local and global
shapes then follow from the input shapes, the mesh and those placements, and are given here as
expressions of the input dims. Every rule is checked against the fake run's concrete sizes; an operation
without a rule (or a rule that does not reproduce them) pins its input sizes, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from numbers import Number
from typing import Any

import torch
import torch.nn.functional as F
from thunder.torch.experimental.dtensor_proxy import is_dtensor_proxy
from torch.distributed.tensor import DTensor, Replicate, Shard

from thunder_symbolic.guards.algebra import provably_equal

__all__ = ["DTensorShapes", "result_shapes", "same_dims", "shape_preserving", "shape_rule", "shapes_of", "shard_dims"]


@dataclass(frozen=True)
class DTensorShapes:
    """The result's local shape and, for a DTensor result, its global shape (else the local one)."""

    local: tuple
    global_: tuple

    def matches(self, result: Any) -> bool:
        """Whether the traced values of these shapes are the fake run's sizes."""
        local = result._local_tensor.shape if isinstance(result, DTensor) else result.shape
        return _values(self.local) == tuple(local) and _values(self.global_) == tuple(result.shape)


def _values(shape: Sequence) -> tuple[int, ...]:
    return tuple(int(getattr(d, "value", d)) for d in shape)


def _placements(x: Any) -> tuple:
    return tuple(x.placements)


def shard_dims(placements: Sequence, ndim: int) -> tuple:
    """Per mesh dim, the tensor dim it shards (None for Replicate and Partial): two layouts with the same
    shard dims have the same local sizes."""
    return tuple(p.dim % ndim if isinstance(p, Shard) else None for p in placements)


def same_dims(a: Sequence, b: Sequence) -> bool:
    """Whether two shapes are provably the same (comparing proxies with ``==`` would record a guard)."""
    return len(a) == len(b) and all(provably_equal(x, y) for x, y in zip(a, b))


def _equal_dims(a: Sequence, b: Sequence) -> bool:
    """Whether two shapes are equal: provably, else by a guard on each pair of dims (two inputs of one length
    are one program; a broadcast, whose result shape has no rule here, still pins the sizes)."""
    return len(a) == len(b) and all(provably_equal(x, y) or bool(x == y) for x, y in zip(a, b))


def shapes_of(x: Any) -> DTensorShapes:
    """A DTensor proxy's own local and global sizes."""
    return DTensorShapes(tuple(x.local_tensor._shape), tuple(x._shape))


def _nonempty(*shapes: Sequence) -> bool:
    """Every symbolic dim is at least 1 (a predicate guard each): with an empty operand every sharding
    strategy costs nothing, and torch's choice among them, so the result's placement, could change."""
    return all(bool(d >= 1) for shape in shapes for d in shape if not isinstance(d, int))


def _only_output_placements(result: Any) -> tuple:
    return tuple(result._spec.placements) if isinstance(result, DTensor) else ()


# --- Rules: (the traced arguments, the fake result) -> shapes or None --------------------------------


def _from_local(result, x, mesh, placements, *, run_check=False, shape=None, stride=None):
    if shape is not None:
        return DTensorShapes(tuple(x._shape), tuple(shape))  # the caller states the global shape
    global_shape = list(x._shape)
    for mesh_dim, placement in enumerate(placements):
        if isinstance(placement, Shard):
            dim = placement.dim % len(global_shape)
            global_shape[dim] = global_shape[dim] * mesh.size(mesh_dim)
    return DTensorShapes(tuple(x._shape), tuple(global_shape))


def _to_local(result, dtensor, *, grad_placements=None):
    local = tuple(dtensor.local_tensor._shape)
    return DTensorShapes(local, local)


def _normalized(placements: Sequence, ndim: int) -> tuple:
    return tuple(Shard(p.dim % ndim) if isinstance(p, Shard) else p for p in placements)


def _redistribute(result, dtensor, device_mesh=None, placements=None, *, async_op=False):
    if placements is None:
        return None
    ndim = len(dtensor._shape)
    if _normalized(placements, ndim) == _normalized(_placements(dtensor), ndim):
        return shapes_of(dtensor)  # nothing moves
    if all(isinstance(p, Replicate) for p in placements):
        full = tuple(dtensor._shape)
        return DTensorShapes(full, full)
    return None  # sharding a dim splits it unevenly in general: its sizes stay pinned


def _reshape(result, a, shape):
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    if not all(isinstance(p, Replicate) for p in _placements(a)) or any(type(d) is int and d < 0 for d in shape):
        return None  # a sharded reshape (or an inferred -1) depends on the sizes: pinned
    if not all(bool(d >= 0) for d in shape if type(d) is not int):
        return None  # a symbolic -1 (guarded against from now on)
    return DTensorShapes(shape, shape)


def shape_preserving(result, a, *rest, **kwargs):
    """The rule of an operation whose result has its (first) DTensor operand's sizes (a Partial operand's result
    is Replicate: both hold the global shape locally)."""
    return shapes_of(a)


def _binary(result, a, b, **kwargs):
    if not is_dtensor_proxy(a):
        a, b = b, a
    if isinstance(b, Number) or getattr(b, "python_type", None) in (int, float, bool, complex):
        return shapes_of(a)
    if not is_dtensor_proxy(b) or _placements(a) != _placements(b):
        return None
    if not (_equal_dims(a._shape, b._shape) and _equal_dims(a.local_tensor._shape, b.local_tensor._shape)):
        return None
    return shapes_of(a) if _nonempty(a._shape) else None


def _linear(result, a, w, bias=None):
    global_shape = (*a._shape[:-1], w._shape[0])
    out = _only_output_placements(result)
    if len(out) != 1 or not _nonempty(a._shape, w._shape):
        return None
    (placement,) = out
    if not isinstance(placement, Shard):  # Replicate or Partial: every rank holds the full extent
        return DTensorShapes(global_shape, global_shape)
    if placement.dim % len(global_shape) == len(global_shape) - 1 and _placements(w) == (Shard(0),):
        return DTensorShapes((*a.local_tensor._shape[:-1], w.local_tensor._shape[0]), global_shape)
    if _placements(a) == out and _placements(w) == (Replicate(),):
        return DTensorShapes((*a.local_tensor._shape[:-1], w._shape[0]), global_shape)
    return None


def _grouped_mm(result, a, b, offsets, **kwargs):
    """Rows of ``a`` grouped by ``offsets`` times one matrix of ``b`` per group (the MoE experts' layout)."""
    if len(a._shape) != 2 or len(b._shape) != 3 or any(d is not None for d in shard_dims(_placements(a), 2)):
        return None
    global_shape = (a._shape[0], b._shape[2])
    out = shard_dims(_only_output_placements(result), 2)
    if not _nonempty(a._shape, b._shape) or any(d == 0 for d in out):
        return None
    if all(d is None for d in out):
        return DTensorShapes(global_shape, global_shape)
    if shard_dims(_placements(b), 3) != tuple(None if d is None else 2 for d in out):
        return None
    return DTensorShapes((a._shape[0], b.local_tensor._shape[2]), global_shape)


def _broadcast_in_dim(result, a, shape, broadcast_dimensions):
    shape = tuple(shape)
    local = list(shape)
    for d in shard_dims(_only_output_placements(result), len(shape)):
        if d is None:
            continue
        if d not in broadcast_dimensions:
            return None  # sharding a dim the broadcast adds
        i = list(broadcast_dimensions).index(d)
        if not provably_equal(a._shape[i], shape[d]):
            return None  # sharding a dim the broadcast expands
        local[d] = a.local_tensor._shape[i]
    return DTensorShapes(tuple(local), shape)


_RULES: dict[Any, Callable[..., DTensorShapes | None]] = {
    DTensor.from_local: _from_local,
    DTensor.to_local: _to_local,
    DTensor.redistribute: _redistribute,
    torch.add: _binary,
    torch.mul: _binary,
    torch.reshape: _reshape,
    torch.exp: shape_preserving,
    torch.neg: shape_preserving,
    torch.reciprocal: shape_preserving,
    F.linear: _linear,
    torch._grouped_mm: _grouped_mm,
}
# thunder 0.2.6's DTensor dtype conversion and broadcast run lambdas defined in their meta functions.
_LAMBDA_RULES = {
    "dtensor_convert_element_type_meta.<locals>.<lambda>": shape_preserving,
    "dtensor_broadcast_in_dim_meta.<locals>.<lambda>": _broadcast_in_dim,
}


def shape_rule(torch_op: Callable) -> Callable[[Callable], Callable]:
    """Register the decorated ``rule(result, *args, **kwargs)`` for ``torch_op``'s fake runs (operations
    defined outside this module: the DTensor backward operators of :mod:`thunder_symbolic.distributed.dtensor_grads`).
    A rule of an operation with several results returns one :class:`DTensorShapes` (or None, for a None
    result) per result."""

    def register(rule: Callable) -> Callable:
        _RULES[torch_op] = rule
        return rule

    return register


def result_shapes(
    torch_op: Callable, args: tuple, kwargs: dict, result: Any
) -> tuple[tuple[Any, DTensorShapes], ...] | None:
    """``(fake result, its symbolic shapes)`` for each result of ``torch_op(*args, **kwargs)``'s fake run,
    or None when the operation has no rule or its rule does not give every result its sizes."""
    rule = _RULES.get(torch_op) or _LAMBDA_RULES.get(getattr(torch_op, "__qualname__", ""))
    if rule is None:
        return None
    shapes = rule(result, *args, **kwargs)
    results, shapes = (result, shapes) if isinstance(result, tuple) else ((result,), (shapes,))
    if shapes is None or len(shapes) != len(results):
        return None
    pairs = tuple((r, s) for r, s in zip(results, shapes) if r is not None)
    if any(s is None or not s.matches(r) for r, s in pairs):
        return None
    return pairs
