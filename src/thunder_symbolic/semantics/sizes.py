"""Traced sizes that user code sees as ``torch.Size``.

thunder traces a tensor's ``shape`` and ``size()`` as tuples (a ``torch.Size`` cannot hold symbolic ints), and
so are the sizes Python derives from them: slices (``x.shape[1:]``), concatenations (``x.shape[:-1] + (n,)``),
repetitions, and ``torch.Size(...)`` of symbolic dims. Eager PyTorch gives a ``torch.Size`` each time, so code
asking ``isinstance(s, torch.Size)``, ``type(s)``, ``str(s)`` or ``s.numel()`` got a tuple's answers: wrong
results under either cache option. :func:`is_size` tells such a value apart by its interpreter wrapper, which
:func:`mark` marks: the getattr lookaside marks a tensor's ``shape`` (the interpreter may hand out a wrapper it
made for an earlier read, such as thunder's own ``numel``), the opcode handlers the sizes derived from a size,
and the ``torch.Size`` lookaside its results; ``x.size()`` is recognised by its provenance. A tuple itself
cannot be marked: the empty one is shared by all.
"""

from __future__ import annotations

from typing import Any

import torch
from thunder.core import prims
from thunder.core.interpreter import (
    BINARY_OP,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    interpreter_needs_wrap,
    unwrap,
    wrap_const,
)
from thunder.core.proxies import IntegerProxy, NumberProxy

__all__ = ["SIZE_OPS", "is_size", "mark", "size_lookaside", "size_of"]

_MARK = "_thunder_symbolic_size"

# The binary operations whose result is a torch.Size when an operand is one (+ and * of torch.Size are).
SIZE_OPS = frozenset(op.value for op in (BINARY_OP.ADD, BINARY_OP.IADD, BINARY_OP.MUL, BINARY_OP.IMUL))


def is_size(wrapped: Any) -> bool:
    """Whether ``wrapped`` holds a tuple that eager PyTorch would have as a ``torch.Size``."""
    if type(unwrap(wrapped)) is not tuple or not isinstance(wrapped, WrappedValue):
        return False
    return getattr(wrapped, _MARK, False) or _size_call(wrapped)


def mark(wrapped: WrappedValue) -> None:
    """``wrapped`` holds a size (a torch.Size in eager)."""
    if type(unwrap(wrapped)) is tuple:
        setattr(wrapped, _MARK, True)


def _size_call(wrapped: WrappedValue) -> bool:
    """A tensor's ``size()``, by the wrapper's provenance: it returns what the shape primitive does."""
    provenance = wrapped.provenance
    if provenance.inst is not PseudoInst.OPAQUE or not provenance.inputs:
        return False
    called = getattr(provenance.inputs[0], "value", None)
    return getattr(called, "__wrapped__", called) is prims.shape


def size_of(iterable) -> tuple | torch.Size:
    """``torch.Size(iterable)``, or its items as a tuple when some are symbolic ints (kept symbolic: converting
    each to an int, as torch.Size does, pinned it)."""
    items = tuple(iterable)
    if any(isinstance(d, NumberProxy) for d in items) and all(
        type(d) is int or isinstance(d, IntegerProxy) and d.python_type is int for d in items
    ):
        return items
    return torch.Size(items)


def size_lookaside(*args, **kwargs):
    """``torch.Size(iterable)`` in traced code: its items read through the interpreter (a generator runs
    interpreted), then a ``torch.Size``, or a tuple marked as a size when some items are symbolic."""
    if len(args) != 1 or kwargs:
        return interpreter_needs_wrap(torch.Size)(*args, **kwargs)  # torch.Size() and errors as in eager
    items = _interpret_call(wrap_const(tuple), args[0])
    if not isinstance(items, WrappedValue):
        return items  # an exception raised by the iteration
    result = interpreter_needs_wrap(size_of)(items)
    if isinstance(result, WrappedValue):
        mark(result)
    return result
