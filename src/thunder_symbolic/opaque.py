"""Functions the interpreter calls natively when traced code reaches them.

The guard recorders run inside NumberProxy methods and meta functions that traced code calls; they must
see the real proxies and must not be traced themselves. The patches that define them mark them here;
the general-jit lookaside table (``patches.core_jit_ext``) looks the mark up.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["is_opaque", "opaque"]

_OPAQUE = "_thunder_symbolic_opaque"


def opaque(fn: Callable) -> Callable:
    """Mark ``fn`` to be called natively, not interpreted, when traced code calls it."""
    setattr(fn, _OPAQUE, True)
    return fn


def is_opaque(fn: Callable) -> bool:
    return getattr(fn, _OPAQUE, False)
