"""Functions the interpreter calls natively when traced code reaches them, and copies it interprets instead of
their lookaside.

The guard recorders run inside NumberProxy methods and meta functions that traced code calls; they must
see the real proxies and must not be traced themselves. The patches that define them mark them here;
the general-jit lookaside table (:mod:`thunder_symbolic.semantics.lookasides`) looks the mark up. A lookaside
that takes only some calls of a library function (torch's ``Module.__call__`` without hooks) hands the others to
:func:`interpreted`.
"""

from __future__ import annotations

import types
from collections.abc import Callable

__all__ = ["interpreted", "is_opaque", "opaque"]

_OPAQUE = "_thunder_symbolic_opaque"


def opaque(fn: Callable) -> Callable:
    """Mark ``fn`` to be called natively, not interpreted, when traced code calls it."""
    setattr(fn, _OPAQUE, True)
    return fn


def is_opaque(fn: Callable) -> bool:
    return getattr(fn, _OPAQUE, False)


def interpreted(fn: types.FunctionType) -> types.FunctionType:
    """``fn`` as a function of its own (same code, globals, defaults and closure): the lookaside table is keyed by
    ``fn``, so the interpreter runs this copy's code line by line, as it ran ``fn``'s before the lookaside."""
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    return copy
