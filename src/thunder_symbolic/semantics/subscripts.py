"""``container[key]`` in traced code without interpreted frames.

The interpreter computes a subscript by interpreting small Python functions (`lambda d, k: d[k]`, then
`obj.__getitem__(index)`) that end in its own lookaside for `dict.__getitem__`, `list.__getitem__` or
`tuple.__getitem__`. For those containers and plain keys, :func:`lookaside` finds that lookaside and
:func:`subscript` calls it directly: the same wrapped value and provenance, without the frames. Tracing the
benchmark's prefill interpreted 12,612 frames, about 11,000 of them for such subscripts: a global read (two
frames, four for a builtin), a call's `*args` (two per argument), an index into a tuple of results.
"""

from __future__ import annotations

import operator

from thunder.core.interpreter import (
    WrappedValue,
    _interpret_call,
    get_interpretercompilectx,
    get_interpreterruntimectx,
)

__all__ = ["call", "lookaside", "subscript"]

_PLAIN_KEYS = {dict: str, list: int, tuple: int}


def lookaside(container: object, key: object):
    """The interpreter's own lookaside for ``container[key]`` when both are plain (a dict and a str, a list or
    tuple and an int), else None: then the caller keeps the interpreted path."""
    if not (isinstance(container, WrappedValue) and isinstance(key, WrappedValue)):
        return None
    ctype = type(container.value)
    if _PLAIN_KEYS.get(ctype) is not type(key.value):
        return None
    ctx = get_interpretercompilectx()
    if not ctx._with_provenance_tracking:
        return None
    found = ctx.lookaside(ctype.__getitem__, container, key)
    return found if callable(found) else None


def call(found, container: WrappedValue, key: WrappedValue):
    """``container[key]`` through ``found``, a :func:`lookaside`."""
    get_interpreterruntimectx().record_lookaside(found)
    return found(container, key)


def subscript(container: WrappedValue, key: WrappedValue):
    """``container[key]``: through the interpreter's lookaside where :func:`lookaside` finds one, else interpreted."""
    found = lookaside(container, key)
    if found is None:
        return _interpret_call(operator.getitem, container, key)
    return call(found, container, key)
