"""torch's calling conventions where thunder's operators take or give another form: var/std's ``unbiased``,
the named tuples of ``torch.return_types``, ``torch._grouped_mm``'s keywords, and Dynamo's
``autograd_function_apply`` in torch >= 2.12's form.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from thunder.core.interpreter import (
    INTERPRETER_SIGNALS,
    ProvenanceRecord,
    PseudoInst,
    unwrap,
    wrap,
    wrap_const,
)
from thunder.core.symbol import Symbol
from thunder.core.utils import is_hashable

from thunder_symbolic.guards import algebra
from thunder_symbolic.guards import recorder as guard_recorder


def _returns_output_tuple(graph: torch.fx.GraphModule) -> bool:
    """Whether the forward graph returns ``(outputs, saved)`` with ``outputs`` a tuple (torch >= 2.12 packs them)."""
    (output,) = graph.graph.find_nodes(op="output")
    returned = output.args[0]
    return isinstance(returned, (tuple, list)) and isinstance(returned[0], (tuple, list))


def autograd_function_apply_without_ctx(lookaside):
    """thunder's lookaside for Dynamo's ``autograd_function_apply``, also for torch >= 2.12's form of it.

    Up to 2.11 the forward and backward graphs take a ``ctx`` first and the call says which arguments are
    tensors (``args_tensor_mask``); from 2.12 the graphs take no ``ctx`` and every argument is passed on.
    The newer form is put in the older one: graphs that accept and drop a ``ctx``, and a mask that keeps
    every argument."""

    def takes_ctx(wrapped_graph):
        """The graph as a function that accepts and drops a ``ctx``. Made here, it has a provenance of its own:
        with the graph module's, the prologue checked its identity (a new function per trace) on every call."""
        graph = unwrap(wrapped_graph)

        def with_ctx(ctx, *args):
            return graph(*args)

        return wrap(with_ctx, provenance=ProvenanceRecord(PseudoInst.OPAQUE, [wrapped_graph.provenance]))

    def autograd_function_apply(fwd, bwd, *fwd_args, **fwd_kwargs):
        if "args_tensor_mask" in fwd_kwargs:
            return lookaside(fwd, bwd, *fwd_args, **fwd_kwargs)
        fwd_kwargs["args_tensor_mask"] = wrap_const([True] * len(fwd_args))
        returns_tuple = _returns_output_tuple(unwrap(fwd))
        fwd, bwd = takes_ctx(fwd), takes_ctx(bwd)
        result = lookaside(fwd, bwd, *fwd_args, **fwd_kwargs)
        if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED or not returns_tuple or isinstance(unwrap(result), tuple):
            return result
        # thunder's operator returns a lone output bare; the graph indexes the tuple the forward returned
        return wrap((unwrap(result),), provenance=result.provenance)

    return autograd_function_apply


def thunder_operator(fn) -> bool:
    """Whether ``fn`` is thunder's operator or a torch function thunder maps to one."""
    from thunder.torch import _torch_to_thunder_function_map as thunder_operators

    return isinstance(fn, Symbol) or is_hashable(fn) and fn in thunder_operators


def _with_thunder_operators(fns) -> list:
    """``fns`` (torch functions and tensor methods) that thunder traces, and the thunder operators they map to."""
    from thunder.torch import _torch_to_thunder_function_map as thunder_operators

    return [key for fn in fns if fn in thunder_operators for key in (fn, thunder_operators[fn])]


def adapters_by_id() -> dict[int, tuple[Any, Any]]:
    """``id -> (function, adapter of its lookaside)`` for the torch functions (and their thunder operators:
    thunder's symbols hash by their fields, hence ids) whose arguments or result thunder's operators take or
    give in another form: var/std's ``unbiased``, the named tuples of ``torch.return_types``
    (``torch.topk``, ``Tensor.sort``, ``torch.max`` with a dim...) and ``torch._grouped_mm``'s keywords."""
    adapters = {}
    for name in dir(torch.return_types):
        structseq = getattr(torch.return_types, name)
        if not (isinstance(structseq, type) and hasattr(structseq, "n_fields")):
            continue
        owner, attribute = (torch.linalg, name.removeprefix("linalg_")) if name.startswith("linalg_") else (torch, name)
        fns = (getattr(owner, attribute, None), getattr(torch.Tensor, name, None))
        for key in _with_thunder_operators(fn for fn in fns if fn is not None):
            adapters[id(key)] = (key, partial(_returning_structseq, structseq=structseq))
    names = ("var", "std", "var_mean", "std_mean")
    fns = (getattr(owner, name) for name in names for owner in (torch, torch.Tensor) if hasattr(owner, name))
    for key in _with_thunder_operators(fns):
        adapters[id(key)] = (key, _taking_unbiased)
    if hasattr(torch, "_grouped_mm"):
        for key in _with_thunder_operators([torch._grouped_mm]):
            adapters[id(key)] = (key, partial(_renaming_keywords, names={"offs": "offsets", "out_dtype": "dtype"}))
    return adapters


def _renaming_keywords(lookaside, names: dict[str, str]):
    """torch's keywords for arguments that thunder's operator names otherwise (``torch._grouped_mm``'s ``offs``
    is its ``offsets``)."""

    def renamed_lookaside(*args, **kwargs):
        return lookaside(*args, **{names.get(name, name): value for name, value in kwargs.items()})

    return renamed_lookaside


def _taking_unbiased(lookaside):
    def unbiased_lookaside(*args, **kwargs):
        args, kwargs = _unbiased_as_correction(args, kwargs)
        return lookaside(*args, **kwargs)

    return unbiased_lookaside


def _unbiased_as_correction(args, kwargs) -> tuple[tuple, dict]:
    """torch's older forms of var/std (``var(x, unbiased)``, ``var(x, dim, unbiased, keepdim)``,
    ``unbiased=``) in the form thunder's operators take (``correction=``)."""

    def is_bool(wrapped) -> bool:
        return algebra.python_type(unwrap(wrapped)) is bool

    if "unbiased" in kwargs:
        kwargs = dict(kwargs)
        unbiased = kwargs.pop("unbiased")
    elif len(args) == 2 and is_bool(args[1]):
        args, unbiased = args[:1], args[1]
    elif len(args) in (3, 4) and is_bool(args[2]):
        if len(args) == 4:
            kwargs = {**kwargs, "keepdim": args[3]}
        args, unbiased = args[:2], args[2]
    else:
        return args, kwargs
    return args, {**kwargs, "correction": wrap_const(int(guard_recorder.python_value(unwrap(unbiased))))}


def _returning_structseq(lookaside, structseq):
    """thunder's operators return plain tuples: ``torch.topk(x, 2).values`` failed ('tuple' object has no
    attribute 'values'); the tuple becomes the named tuple eager returns."""

    def structseq_lookaside(*args, **kwargs):
        result = lookaside(*args, **kwargs)
        value = unwrap(result)
        if type(value) is tuple and len(value) == structseq.n_fields:
            return wrap(structseq(value), provenance=result.provenance)
        return result

    return structseq_lookaside
