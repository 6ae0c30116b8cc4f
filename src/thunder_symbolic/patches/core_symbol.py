"""Patches of ``thunder/core/symbol.py``: every dynamic dim a trace uses is produced in that trace; a symbol that
raises closes its scope; a meta function's signature is read once."""

from __future__ import annotations

import functools
import inspect

from thunder.core import compile_data, prims
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx

from thunder_symbolic._registry import patch

_PRODUCED = "_thunder_symbolic_produced"
# Unpacking hands over values made elsewhere (inputs, saved tensors): where their dims are needed, the
# safety net after DCE (patches.core_transform_common) produces them with an executable operation.
_UNPACKS = frozenset(p for p in prims.PrimIDs if p.name.startswith("UNPACK_"))


def _needs_producer(dim) -> bool:
    # Input dims have provenance (the prologue unpacks them); dims computed by meta functions have none.
    return isinstance(dim, NumberProxy) and dim.history is None and not getattr(dim, _PRODUCED, False)


def materialize_dims(trace, outputs) -> None:
    """Mark the numbers in ``outputs`` produced; bind ``prims.shape`` for tensors with unproduced dims."""
    for out in outputs:
        if isinstance(out, NumberProxy):
            object.__setattr__(out, _PRODUCED, True)
        elif isinstance(out, TensorProxy) and any(_needs_producer(d) for d in out._shape):
            # Dims produced elsewhere appear as their int value, which the trace prints as `_`.
            fresh = tuple(d if _needs_producer(d) else getattr(d, "value", d) for d in out._shape)
            trace.bound_symbols.append(prims.shape.bind(out, output=fresh))
            for d in fresh:
                if isinstance(d, NumberProxy):
                    object.__setattr__(d, _PRODUCED, True)


@patch(
    "thunder.core.symbol:Symbol.__call__",
    summary="after a top-level symbol returns a tensor with new symbolic dims, binds prims.shape to produce them; "
    "a symbol that raises leaves the trace's scopes as it found them",
    why=(
        "Dims computed inside meta functions (outputs of cat, slicing, reshape) were NumberProxies nothing "
        "produced: using them (numel(), size arithmetic) failed while building the prologue ('has history None'). "
        "A symbol that raised left the scope it had opened: when the traced code caught the error (`try: "
        "x.view(4, -1) except RuntimeError:`), every later operation went into that dead scope and thunder failed "
        "at the return (IndexError: pop from empty list, either cache)."
    ),
    upstream="Lightning-AI/lightning-thunder#2746, #471",
)
def _symbol_call(original):
    def __call__(self, *args, **kwargs):
        trace = get_tracectx()
        depth = len(trace.scopes) if trace is not None else 0
        try:
            result = original(self, *args, **kwargs)
        except BaseException:
            if trace is not None:
                del trace.scopes[depth:]  # with what the failed call had recorded in them
            raise
        if compile_data.using_symbolic_values() and self.id not in _UNPACKS:
            trace = get_tracectx()
            if trace is not None and trace.peek_scope() is trace.bound_symbols:
                materialize_dims(trace, tree_flatten(result)[0])
        return result

    return __call__


@patch(
    "thunder.core.symbol:Symbol.normalize",
    summary="binds a call's arguments to its meta function's signature, read once per meta function; a call "
    "passing every parameter by position is taken as it is",
    why=(
        "Every bound symbol normalizes its arguments, and 0.2.6 builds the meta function's inspect.Signature "
        "each time: a twentieth of thunder's compile of the inference benchmark's prefill. Binding by the "
        "signature then still cost 15 us a call (4,768 calls in that compile, three in four by position)."
    ),
    replaces=True,
)
def _normalize(original):
    def normalize(self, *args, **kwargs):
        """Replaces ``Symbol.normalize``: its one expensive step is the signature, which a wrapper cannot
        reuse. A meta that cannot be a cache key (unhashable) goes to the original. A call that passes every
        parameter by position (three calls in four) is bound as it is."""
        try:
            signature, positional = _signature(self.meta)
        except TypeError:
            return original(self, *args, **kwargs)
        if not kwargs and len(args) == positional:
            return args, {}
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.args, bound.kwargs

    return normalize


_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


@functools.lru_cache(maxsize=4096)
def _signature(meta) -> tuple[inspect.Signature, int | None]:
    """The signature, and its number of parameters when all can be passed by position (else None)."""
    signature = inspect.signature(meta)
    parameters = signature.parameters.values()
    return signature, len(parameters) if all(p.kind in _POSITIONAL for p in parameters) else None
