"""Trace validation: every proxy a trace uses is defined before its first use, and defined once."""

from __future__ import annotations

from thunder.core.proxies import Proxy
from thunder.core.pytree import tree_flatten

__all__ = ["TraceValidationError", "validate_trace", "validate_traces_of"]


class TraceValidationError(AssertionError):
    pass


def _proxies(tree) -> list[Proxy]:
    return [p for p in tree_flatten(tree)[0] if isinstance(p, Proxy)]


def validate_trace(trace) -> None:
    """Raise :class:`TraceValidationError` naming the first proxy used before it is defined or defined twice."""
    defined = {p.name for p in _proxies((trace.args, trace.kwargs))}
    unpacked_args = set(defined)  # a signature argument may also be bound once by an unpack symbol
    for index, bsym in enumerate(trace.bound_symbols):
        inputs = {p.name for p in bsym.flat_proxy_args}
        for name in sorted(inputs - defined):
            raise TraceValidationError(f"{name} is used by bound symbol {index} ({bsym.sym.name}) before it is defined")
        for p in bsym.flat_proxy_outs:
            if p.name in unpacked_args:
                unpacked_args.discard(p.name)
            elif p.name in defined and p.name not in inputs:  # an output that is also an input passes through
                raise TraceValidationError(f"{p.name} is defined a second time by bound symbol {index} ({bsym.sym.name})")
            defined.add(p.name)


def validate_traces_of(jfn) -> int:
    """Validate the last prologue, computation and backward traces of a jitted function; returns how many."""
    import thunder

    traces = [thunder.last_prologue_traces(jfn)[-1], thunder.last_traces(jfn)[-1]]
    backward = thunder.last_backward_traces(jfn)
    if backward:
        traces.append(backward[-1])
    for trace in traces:
        validate_trace(trace)
    return len(traces)
