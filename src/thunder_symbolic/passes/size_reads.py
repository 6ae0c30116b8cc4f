"""Sizes read from an intermediate tensor are computed from the inputs instead, so fusions are not cut at them.

Under symbolic values a program reads sizes of the tensors it computes: ``inputs_embeds.shape[1]`` for the
cache positions, ``q.shape[0]`` for a reshape. Each read is a ``shape`` of the intermediate, which no fusing
executor claims, so the fusion before it and the fusion after it (which uses the size) cannot merge: a tiny
Llama's forward ran as 11 regions of thunder's torch.compile executor, separated by such reads.

The algebra (:mod:`thunder_symbolic.guards.algebra`) knows each of these sizes as an expression of the
program's inputs, the one the prologue's guards are written in. Where every size a read yields that the
program uses is such an expression over sizes of the trace's tensor arguments, the read is replaced by those
expressions: ``input_size(x, 1)`` where the size is, in canonical form, ``x.shape[1]``
(``-((0 - (0 + x.shape[1])) // 1)`` is), else ``size_of_inputs("(1 + a0.shape[1])", x)``. They depend on
nothing computed. The size computations that depend on nothing computed (these reads, reads of the
arguments' sizes, and the number arithmetic over them) are then moved to the start of the trace, so the
tensor operations on either side become consecutive and thunder's fusion pass (which fuses consecutive
operations) makes one region of them. The numbers are the same proxies, computed as tracing computed them;
a read of any other size (of an int argument, or one the algebra does not know) stays where it was.
"""

from __future__ import annotations

import functools
from typing import Any

from thunder.core.prims import PrimIDs
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.trace import TraceProvenance, from_trace
from thunder.executors.pythonex import ex as pythonex

from thunder_symbolic.guards import algebra

__all__ = ["input_size", "size_of_inputs", "sizes_read_from_inputs"]


def _input_size(tensor, dim: int) -> int:
    return tensor.shape[dim]


input_size = pythonex.register_operator("input_size", meta=lambda tensor, dim: tensor.shape[dim], fn=_input_size)
pythonex.register_implementation(input_size, input_size, checker=lambda *args: True)


@functools.lru_cache(maxsize=4096)
def _evaluator(source: str, count: int):
    names = ", ".join(f"a{k}" for k in range(count))
    return eval(f"lambda {names}: {source}", dict(algebra.NAMESPACE))  # noqa: S307  (an expression the algebra rendered)


def _size_of_inputs(source: str, *tensors) -> int:
    return _evaluator(source, len(tensors))(*tensors)


def _meta(source: str, *tensors):
    raise NotImplementedError("size_of_inputs is bound by sizes_read_from_inputs only")


size_of_inputs = pythonex.register_operator("size_of_inputs", meta=_meta, fn=_size_of_inputs)
pythonex.register_implementation(size_of_inputs, size_of_inputs, checker=lambda *args: True)


def _tensor_arguments(trace) -> list[TensorProxy]:
    """The tensors the trace has before it computes anything: its tensor arguments, and those its first bound
    symbols unpack from collections (a backward's saved tensors and cotangents)."""
    found = [p for p in trace.args if isinstance(p, TensorProxy)]
    for bsym in trace.bound_symbols[: _unpacked(trace.bound_symbols)]:
        found += [p for p in bsym.flat_outs if isinstance(p, TensorProxy)]
    return found


def _unpacked(bsyms: list) -> int:
    """How many of the first bound symbols unpack the arguments."""
    count = 0
    while (
        count < len(bsyms)
        and isinstance(bsyms[count].sym.id, PrimIDs)
        and bsyms[count].sym.id.name.startswith("UNPACK")
    ):
        count += 1
    return count


class _Inputs:
    """The sizes of a trace's tensor arguments, by the algebra's symbol of each (a size that is, in canonical
    form, one input's size)."""

    def __init__(self, trace):
        self.symbols = algebra.Symbols()
        self.by_symbol: dict[Any, tuple[TensorProxy, int]] = {}
        for arg in _tensor_arguments(trace):
            for dim, size in enumerate(arg._shape):
                form = self.form(size)
                if form is not None and form.is_Symbol:
                    self.by_symbol.setdefault(form, (arg, dim))

    def form(self, size):
        expr = algebra.expr_of(size) if isinstance(size, NumberProxy) else None
        return None if expr is None else algebra.simplify(expr, self.symbols)[1]

    def read(self, size):
        """A bound symbol computing ``size`` from the arguments' sizes, or None."""
        form = self.form(size)
        if form is not None and form in self.by_symbol:
            return input_size.bind(*self.by_symbol[form], output=size)
        expr = algebra.expr_of(size)
        tensors: dict[str, TensorProxy] = {}
        source = self._render(expr, tensors) if expr is not None else None
        if source is None or not tensors:
            return None
        return size_of_inputs.bind(source, *tensors.values(), output=size)

    def _render(self, expr, tensors: dict) -> str | None:
        """``expr`` as Python over ``a0, a1...`` (the arguments it reads, added to ``tensors``), or None."""
        if isinstance(expr, algebra.Const):
            return algebra.literal(expr.value)
        if isinstance(expr, algebra.InputDim):
            found = self.by_symbol.get(self.symbols.of(expr))
            if found is None:
                return None
            arg, dim = found
            tensors.setdefault(arg.name, arg)
            return f"a{list(tensors).index(arg.name)}.shape[{dim}]"
        if isinstance(expr, algebra.Op):
            operands = [self._render(o, tensors) for o in expr.operands]
            return None if any(o is None for o in operands) else expr.operation.source.format(*operands)
        return None  # (a number argument, or a simplified form: not read from tensors)


# Number arithmetic: pure, and run by the Python executor outside any fusion.
_ARITHMETIC = frozenset(
    getattr(PrimIDs, name)
    for name in (
        "ADD", "SUB", "MUL", "DIV", "NEG", "ABS", "FMOD", "REMAINDER", "SIGNBIT", "EQ", "NE", "LT", "LE", "GT",
        "GE", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_NOT", "CONVERT_ELEMENT_TYPE", "FLOOR", "CEIL",
        "TRUNC",
    )
    if hasattr(PrimIDs, name)
)  # fmt: skip


def _is_size_computation(bsym, arguments: set[str]) -> bool:
    """Whether ``bsym`` computes numbers from numbers, or reads an argument's sizes (nothing else it reads)."""
    outputs = bsym.flat_outs
    if not outputs or not all(isinstance(o, NumberProxy) for o in outputs):
        return False
    if bsym.sym in (input_size, size_of_inputs):
        return True
    if bsym.sym.id is PrimIDs.SHAPE:
        return bool(bsym.args) and getattr(bsym.args[0], "name", None) in arguments
    return bsym.sym.id in _ARITHMETIC and not any(isinstance(a, TensorProxy) for a in bsym.flat_args)


def _sizes_first(bsyms: list, arguments: set[str]) -> list:
    """``bsyms`` with the size computations that depend only on the arguments moved right after the arguments'
    unpacking, in their order."""
    start = _unpacked(bsyms)
    available = set(arguments) | {o.name for b in bsyms[:start] for o in b.flat_outs if isinstance(o, Proxy)}
    early, rest = [], []
    for bsym in bsyms[start:]:
        if _is_size_computation(bsym, arguments) and all(p.name in available for p in bsym.flat_proxy_args):
            early.append(bsym)
            available.update(o.name for o in bsym.flat_outs)
        else:
            rest.append(bsym)
    return [*bsyms[:start], *early, *rest]


def sizes_read_from_inputs(trace):
    """``trace`` with the reads of an intermediate's sizes replaced by computations from the arguments' sizes,
    and the size computations that depend on nothing computed first (the trace itself when nothing changes)."""
    inputs = _Inputs(trace)
    if not inputs.by_symbol:
        return trace
    arguments = {arg.name for arg in _tensor_arguments(trace)}
    used = {p.name for bsym in trace.bound_symbols for p in bsym.flat_proxy_args}
    kept, replaced = [], 0
    for bsym in trace.bound_symbols:
        if bsym.sym.id is not PrimIDs.SHAPE or not bsym.args or bsym.args[0].name in arguments:
            kept.append(bsym)
            continue
        reads = [inputs.read(o) for o in bsym.flat_outs if isinstance(o, NumberProxy) and o.name in used]
        if not reads or any(r is None for r in reads):
            kept.append(bsym)
            continue
        kept += reads
        replaced += 1
    ordered = _sizes_first(kept, {p.name for p in trace.args if isinstance(p, Proxy)} | arguments)
    if not replaced and all(a is b for a, b in zip(ordered, trace.bound_symbols)):
        return trace
    out = from_trace(trace)
    out.bound_symbols = ordered
    out.set_provenance(
        TraceProvenance(f"Computed {replaced} size reads of intermediates from the inputs; size computations first")
    )
    return out
