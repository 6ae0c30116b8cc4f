"""Patches of ``thunder/core/transform_common.py``: the safety net for dims nothing produces."""

from __future__ import annotations

from thunder.core import compile_data
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceProvenance, from_trace
from thunder.executors import torchex

from thunder_symbolic._registry import patch


def ensure_dims_produced(trace):
    """Bind ``prims.shape`` of an available tensor before the first use of any dim nothing produced yet."""
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
                bound.append(torchex.shape.bind(owner, output=dims))  # executable in any trace, as is
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
    fixed.set_provenance(TraceProvenance("Dims produced before their first use"))
    return fixed


@patch(
    "thunder.core.transform_common:dce",
    summary="under symbolic values, a dim used before any producer gets prims.shape of a tensor holding it",
    why=(
        "Every pass ends with DCE. A pass that builds operations out of existing dims (0.2.6's alias updates "
        "reshaped one input to another's shape) left the dims without a producer, and the generated code "
        "failed ('cannot access local variable i6'). Symbol calls produce dims as they are traced; this "
        "catches what later passes add."
    ),
    upstream="Lightning-AI/lightning-thunder#2746",
)
def _dce(original):
    def dce(trace, needed_proxies=None):
        result = original(trace, needed_proxies)
        return ensure_dims_produced(result) if compile_data.using_symbolic_values() else result

    return dce
