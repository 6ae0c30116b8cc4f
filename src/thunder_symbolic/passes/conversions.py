"""Conversions that torch answers with the tensor itself, removed from a trace before its executors run.

``x.to(torch.float32)`` of a float32 tensor, ``x.to("cpu")`` of a CPU tensor, ``x.float()``, ``x.type_as(y)`` of
``y``'s dtype: eager PyTorch returns ``x`` itself. thunder records such a call as a ``shallow_copy`` of ``x`` and its
torch executor runs it as the call it was (``Tensor.to(x, ...)``): a Python-to-C++ round trip and a dispatcher
visit per call, for nothing: a decode step of the inference benchmark ran four (``.to(device)`` of the rotary
frequencies and of a buffer), and thunder's own gradient code makes more. Each is replaced by ``x``, which is what eager
returns; nothing else changes (copies, real conversions and moves stay: ``bf16 -> f32 -> bf16`` round trips round,
in eager too).
"""

from __future__ import annotations

from thunder.core.prims import PrimIDs
from thunder.core.proxies import TensorProxy, variableify
from thunder.core.trace import TraceProvenance, from_trace

__all__ = ["without_noop_conversions"]


def _work(bsym):
    """The primitives a bound symbol runs (itself, if it has no subsymbols)."""
    if not bsym.subsymbols:
        yield bsym
        return
    for sub in bsym.subsymbols:
        yield from _work(sub)


def _returned_input(bsym) -> TensorProxy | None:
    """The tensor argument ``bsym`` returns unchanged (all it does is a ``shallow_copy`` of it), else None."""
    output = bsym.output
    if not isinstance(output, TensorProxy):
        return None
    work = _work(bsym)
    first, rest = next(work, None), next(work, None)
    if first is None or rest is not None or first.sym.id is not PrimIDs.SHALLOW_COPY:
        return None
    source = first.args[0] if first.args else None
    if not isinstance(source, TensorProxy) or not isinstance(first.output, TensorProxy):
        return None
    if first.output.name != output.name or all(a is not source for a in bsym.flat_args):
        return None
    return source


def without_noop_conversions(trace):
    """``trace`` without the bound symbols that return a tensor argument unchanged, their outputs replaced by it (the
    trace itself when there are none)."""
    swap = {}
    kept = []
    for bsym in trace.bound_symbols:
        source = _returned_input(bsym)
        if source is not None:
            swap[variableify(bsym.output)] = swap.get(variableify(source), source)
            continue
        kept.append(bsym.from_bsym_swap_proxies(swap, skip_output=True) if swap else bsym)
    if not swap:
        return trace
    removed = from_trace(trace)
    removed.bound_symbols = kept
    removed.set_provenance(TraceProvenance(f"Removed {len(swap)} conversions that return their input"))
    return removed
