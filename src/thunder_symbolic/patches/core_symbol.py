"""Patches of ``thunder/core/symbol.py``: every dynamic dim a trace uses is produced in that trace."""

from __future__ import annotations

from thunder.core import compile_data, prims
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import get_tracectx

from thunder_symbolic._registry import patch

_PRODUCED = "_thunder_symbolic_produced"


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
    summary="after a top-level symbol returns a tensor with new symbolic dims, binds prims.shape to produce them",
    why=(
        "Dims computed inside meta functions (outputs of cat, slicing, reshape) were NumberProxies nothing "
        "produced: using them (numel(), size arithmetic) failed while building the prologue ('has history None')."
    ),
    upstream="Lightning-AI/lightning-thunder#2746, #471",
)
def _symbol_call(original):
    def __call__(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        if compile_data.using_symbolic_values():
            trace = get_tracectx()
            if trace is not None and trace.peek_scope() is trace.bound_symbols:
                materialize_dims(trace, tree_flatten(result)[0])
        return result

    return __call__


def ensure_dims_produced(trace):
    """Bind ``prims.shape`` of an available tensor before the first use of any dim nothing produced yet.

    The safety net after passes that build new operations out of existing dims (alias updates reshape
    one input to another's shape): the reshape then has the producer it needs.
    """
    from thunder.core.trace import from_trace

    produced = {
        p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, (NumberProxy, TensorProxy))
    }
    owners: dict[str, TensorProxy] = {}

    def note(tensor):
        for dim in tensor._shape:
            if isinstance(dim, NumberProxy):
                owners.setdefault(dim.name, tensor)

    for arg in tree_flatten((trace.args, trace.kwargs))[0]:
        if isinstance(arg, TensorProxy):
            note(arg)
    bound, changed = [], False
    for bsym in trace.bound_symbols:
        for p in bsym.flat_proxy_args:
            owner = owners.get(p.name) if isinstance(p, NumberProxy) and p.name not in produced else None
            if owner is not None and owner.name in produced:
                dims = tuple(
                    d if isinstance(d, NumberProxy) and d.name not in produced else getattr(d, "value", d)
                    for d in owner._shape
                )
                bound.append(prims.shape.bind(owner, output=dims))
                produced.update(d.name for d in dims if isinstance(d, NumberProxy))
                changed = True
        bound.append(bsym)
        for out in bsym.flat_proxy_outs:
            produced.add(out.name)
            if isinstance(out, TensorProxy):
                note(out)
    if not changed:
        return trace
    fixed = from_trace(trace)
    fixed.bound_symbols = bound
    return fixed
