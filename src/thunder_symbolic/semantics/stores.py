"""Recording the stores traced code makes into attributes of objects that existed before the call.

thunder's interpreter keeps a copy of an object's ``__dict__`` and has its epilogue store into it; stores it makes
natively (a class attribute, a C ``__setattr__``) would be made once, while tracing. Both kinds are recorded here
for the replay of :mod:`thunder_symbolic.semantics.side_effects`, which makes them again on every call.
"""

from __future__ import annotations

import contextvars
import types

from thunder.core.interpreter import (
    WrappedValue,
    _interpret_call,
    do_raise,
    unwrap,
    wrap_const,
)
from thunder.core.jit_ext import EXT_FLAG_IS_MODULE_MEMBER_DICT
from thunder.core.proxies import Proxy

from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.semantics import side_effects


def recording_native_stores(lookaside):
    """``setattr`` of a class the program was given or reads (``Cfg.scale = 2``, ``cls.FOO = True`` in a
    classmethod), or of an object whose type's ``__setattr__`` is C code (``types.SimpleNamespace``), is made
    natively, as thunder makes it (reads after it see it), and recorded for the replay (see
    :mod:`thunder_symbolic.semantics.side_effects`): put back when the trace ends, made again by every call's epilogue.
    Other objects' attributes go to thunder's copy of their ``__dict__`` (``object.__setattr__``'s lookaside), from
    which the replay takes them."""

    def setattr_lookaside(obj, name, value):
        effects, read = side_effects.current(), value_guards.current()
        if (
            effects is None
            or read is None
            or isinstance(obj.value, Proxy)
            or not _native_setattr(type(obj.value))
            or not read.reaches(obj.provenance)
        ):
            return lookaside(obj, name, value)
        uname = unwrap(name)
        effects.store("attr", obj, obj.provenance, uname, value)
        try:  # (made here: thunder's own call of the C setattr took a tensor value for an operator to trace)
            setattr(obj.value, uname, value.value)
        except Exception as e:
            return do_raise(e)
        obj.attribute_wrappers[uname] = value
        return wrap_const(None)

    return setattr_lookaside


def _native_setattr(cls: type) -> bool:
    setter = getattr(cls, "__setattr__", None)
    return isinstance(setter, types.WrapperDescriptorType) and setter is not object.__setattr__


_assigned: contextvars.ContextVar[WrappedValue | None] = contextvars.ContextVar(
    "thunder_symbolic_assigned", default=None
)


def assigning(lookaside):
    """thunder's lookaside of ``object.__setattr__``, which stores through ``obj.__dict__.__setitem__``: the object
    being assigned to is published for :func:`replaying_attribute_stores` and noted for the replay. thunder also
    gives the object's path a proxy, for its own epilogue store (which the replay replaces): left on the path, the
    prologue took it for one it had unpacked when it unpacked a value read through that object (KeyError)."""

    def object_setattr(obj, name, value):
        if (effects := side_effects.current()) is not None:
            effects.assigning(obj, unwrap(name))
        had_proxy = getattr(obj.provenance, "proxy", None) is not None
        token = _assigned.set(obj)
        try:
            return lookaside(obj, name, value)
        finally:
            _assigned.reset(token)
            if not had_proxy and getattr(obj.provenance, "proxy", None) is not None:
                obj.provenance.proxy = None

    return object_setattr


def replaying_attribute_stores(lookaside):
    """thunder's lookaside of ``dict.__setitem__``, which has the epilogue replay a store into a dict flagged as an
    object's member dict. thunder's ``object.__setattr__`` flags the wrapper of ``obj.__dict__`` it reads, then
    stores through a bound method of the dict that wrapper holds (thunder's copy, after a first store), which the
    interpreter wraps anew, unflagged: a second assignment of a name in one trace (`if self.cache is None:
    self.cache = zeros; self.cache = self.cache + x`) was dropped, the epilogue setting the first value (0.2.6,
    either cache). Such a store goes to the flagged wrapper."""

    def dict_setitem(d, key, value):
        obj = _assigned.get()
        if obj is not None and not d.provenance.ext_flag & EXT_FLAG_IS_MODULE_MEMBER_DICT:
            members = _interpret_call(getattr, obj, wrap_const("__dict__"))
            if isinstance(members, WrappedValue) and unwrap(members) is unwrap(d):
                members.provenance.ext_flag |= EXT_FLAG_IS_MODULE_MEMBER_DICT
                d = members
        return lookaside(d, key, value)

    return dict_setitem
