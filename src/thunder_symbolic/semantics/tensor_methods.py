"""A traced tensor's methods (``x.float()``, ``x.view(...)``) bound and called without interpreting thunder's
machinery for them.

thunder resolves such a method in ``TensorProxy.__getattr__``: the language context's method, bound to the
tensor with ``functools.partial``. Its interpreter reaches ``__getattr__`` only after emulating
``object.__getattribute__`` over the class's MRO (interpreting ``getattr`` for each descriptor slot) and raising
an AttributeError, and then calls the partial by interpreting a helper that reads the partial's ``func``,
``args`` and ``keywords`` and merges the keywords. The inference benchmark's prefill graph makes 93 such calls:
its compiles (one rank's CPU time, after the first in a process) took 3.9-4.1 s with thunder's path, 3.2-3.4 s
with this one.

:func:`bind` binds the method as ``TensorProxy.__getattr__`` would, into a :class:`BoundMethod` that also keeps
the tensor's interpreter wrapper, and :func:`call` calls the method on that wrapper through the interpreter's
usual call (the symbol's lookaside, its source location): the same trace, names aside. Anything else (a name the
class or the instance defines, ``numel``, which thunder's ``__getattr__`` special-cases, a subclass with its own
``__getattr__``, any other partial) takes thunder's path.

A method thunder registers as a plain function rather than a symbol (its DTensor dispatchers) is bound as the
torch function thunder maps to it (``torch.Tensor.mul``), which the jit calls natively: see
:func:`_mapped_torch_function`.

``x.unfold`` and ``x.tile`` are :mod:`thunder_symbolic.semantics.torch_composites`' (thunder's ran F.unfold, and a
fallback that failed for dims given as arguments), and ``x.broadcast_to`` is ``expand`` (thunder had only the
function: AttributeError). The casting methods thunder's language context lacks (it has ``float`` and ``long``)
are bound as ``to(dtype)``: 0.2.6 ran ``x.half()``, ``x.bfloat16()``, ``x.double()``, ``x.int()``, ``x.bool()``...
as fallbacks of torch at the first call's shape, so under symbolic values a program that cast an input was
compiled again for every shape.
"""

from __future__ import annotations

import functools

import thunder.torch as ltorch
import torch
from thunder.core.interpreter import (
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    default_lookaside,
    unwrap,
    wrap,
    wrap_const,
)
from thunder.core.jit_ext import _general_jit_lookaside_map
from thunder.core.langctxs import resolve_method
from thunder.core.proxies import TensorProxy
from thunder.core.symbol import Symbol

from thunder_symbolic.semantics import torch_composites

__all__ = ["BoundMethod", "bind", "call"]


class BoundMethod(functools.partial):
    """``partial(method, tensor)``, as ``TensorProxy.__getattr__`` returns it, with the tensor's wrapper."""

    __slots__ = ("wrapped_tensor",)


def bind(obj: WrappedValue, name: WrappedValue) -> WrappedValue | None:
    """``obj.name`` for a language-context method of a tensor proxy; None where thunder's own lookup applies."""
    tensor, attr = unwrap(obj), unwrap(name)
    if type(attr) is not str or attr.startswith("_") or attr == "numel" or not isinstance(tensor, TensorProxy):
        return None
    cls = type(tensor)
    if cls.__getattr__ is not TensorProxy.__getattr__ or attr in obj.attribute_wrappers:
        return None
    if any(attr in vars(base) for base in cls.__mro__) or attr in vars(tensor):
        return None
    method = _METHODS.get(attr) or resolve_method(attr, tensor)
    if method is None or not callable(method):
        return None
    if not isinstance(method, Symbol) and _mapped_torch_function(attr) is method:
        method = getattr(torch.Tensor, attr)  # (called as thunder calls the torch function: natively)
    bound = BoundMethod(method, tensor)
    bound.wrapped_tensor = obj
    return wrap(bound, provenance=ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[obj.provenance, name.provenance]))


def _mapped_torch_function(attr: str):
    """What thunder maps ``torch.Tensor.<attr>`` to. Where that is the method itself but not a symbol (the DTensor
    dispatchers thunder registers for ``add``, ``mul``, ``reshape``, ``transpose``, ``exp``, ``neg`` and
    ``reciprocal``), the method is bound as the torch function: the jit calls that natively, as it calls
    ``torch.mul(...)``, where it interpreted the method, its ``tree_flatten`` included (10 to 30 ms a call; the
    inference benchmark's prefill graph makes 24 such calls)."""
    torch_function = getattr(torch.Tensor, attr, None)
    if torch_function is None or torch_function not in _general_jit_lookaside_map:
        return None
    return ltorch._torch_to_thunder_function_map.get(torch_function)


def call(partial_object, *args, **kwargs):
    """The lookaside for calling a ``functools.partial``: a :class:`BoundMethod`'s method is called directly,
    any other partial as the interpreter calls it."""
    bound = unwrap(partial_object)
    if type(bound) is not BoundMethod:
        return default_lookaside(functools.partial.__call__)(partial_object, *args, **kwargs)
    return _interpret_call(wrap_const(bound.func), bound.wrapped_tensor, *args, **kwargs)


def _cast_to(dtype: torch.dtype):
    def cast(tensor, memory_format=torch.preserve_format):
        return tensor.to(dtype, memory_format=memory_format)

    cast.__name__ = cast.__qualname__ = f"to_{str(dtype).removeprefix('torch.')}"
    return cast


_CASTS = {
    name: _cast_to(dtype)
    for name, dtype in {
        "half": torch.float16,
        "bfloat16": torch.bfloat16,
        "double": torch.float64,
        "cfloat": torch.complex64,
        "cdouble": torch.complex128,
        "bool": torch.bool,
        "byte": torch.uint8,
        "char": torch.int8,
        "short": torch.int16,
        "int": torch.int32,
    }.items()
}
_METHODS = {
    **_CASTS,
    "unfold": torch_composites.unfold,
    "tile": torch_composites.tile,
    "diff": torch_composites.diff,
    "broadcast_to": ltorch.expand,  # (thunder maps the function, not the method: AttributeError)
}
