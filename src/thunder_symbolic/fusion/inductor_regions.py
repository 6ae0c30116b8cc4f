"""A fused region compiled by Inductor once for thunder's symbolic sizes, and called without Dynamo.

thunder's torch.compile executor hands each fused region to ``torch.compile``: every call of a region then goes
through Dynamo's frame evaluation and guards (7 to 14 µs a call on this project's CPU machine, against about 6 for
the kernel), and Dynamo compiles the region again at the second size it sees. With 30 regions in a small decoder's
forward, that overhead outweighed the fusion: the executor made the forward slower than thunder's torch executor.

Under symbolic values thunder already knows which sizes vary and which are equal: its proxies name them, and its
prologue checks everything else. A region here is traced once (``make_fx``) on fake tensors whose sizes are
symbols of a ``ShapeEnv`` (one per distinct size proxy, none specialized for being 0 or 1, none merged for being
equal), compiled once by Inductor (``compile_fx``), and called directly (a view's strides, other than 0 and 1, are symbols too). What Inductor or the tracing assumed of
those symbols (the ``ShapeEnv``'s guards: ``s0 != 1``, ``n <= s0``) and what the compiled code takes for granted
(contiguous inputs, the strides of inputs of fixed sizes, a view's strides of 0 and 1) are checked at each call by
one generated function; a call
that fails them gets another variant compiled for its sizes (at most :data:`VARIANTS`), past that the region runs
as thunder's torch executor would run it. Nothing is ever computed by code compiled for other assumptions.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import sympy
import torch
from thunder.core.proxies import IntegerProxy, NumberProxy, TensorProxy

from thunder_symbolic.guards import algebra

__all__ = ["InductorRegion", "VARIANTS"]

log = logging.getLogger("thunder_symbolic.fusion")

VARIANTS = 4  # compiled variants a region keeps (a size of 1 in decode, larger ones in prefill...)


class _NotCompilable(Exception):
    """The region takes something a symbolic compile cannot stand for (a float that varies), or relates sizes by
    thunder's arithmetic that its tracing sees as unrelated symbols: it runs as the torch executor would."""


class InductorRegion:
    """``fn`` (the region as torch calls, thunder's torch executor's callable) over ``inputs`` (its proxies), compiled
    by Inductor for symbolic sizes on first use."""

    def __init__(self, fn: Callable, inputs: Sequence[Any], name: str, fresh_outputs: Sequence[int] = ()):
        self.fn = fn
        self.inputs = list(inputs)
        self.name = name
        self.fresh_outputs = tuple(fresh_outputs)  # outputs eager allocates: never returned sharing an input's memory
        self.variants: list[_Variant] = []
        self.eager_only = False
        self._lock = threading.Lock()

    def kernels(self) -> list[str]:
        """The names of the kernels Inductor generated for the region's variants (for reports)."""
        found = []
        for variant in self.variants:
            source = getattr(variant.compiled, "source_code", None) or ""
            found += re.findall(r"^(\w+) = async_compile\.\w+\(", source, flags=re.MULTILINE)
        return found

    def __call__(self, *args):
        for variant in self.variants:
            if (arguments := variant.prepare(args)) is not None:
                return variant(arguments)
        if self.eager_only or len(self.variants) >= VARIANTS:
            return self.fn(*args)
        with self._lock:
            try:
                variant = _Variant(*_compile(self.fn, self.inputs, args), self.fresh_outputs)
            except _NotCompilable as e:
                log.info("thunder_symbolic: a fused region (%s) runs unfused: %s", self.name, e)
                self.eager_only = True
                return self.fn(*args)
            except Exception as e:  # (Inductor's internals differ across torch versions: never a failed call)
                self.eager_only = True
                _warn_once(
                    f"thunder-symbolic: a fused region ({self.name}) runs unfused: Inductor failed on it ({e!r})"
                )
                return self.fn(*args)
            self.variants.append(variant)
        arguments = variant.prepare(args)
        return self.fn(*args) if arguments is None else variant(arguments)


class _Variant:
    """One compile of a region: its ``prepare`` (the check, and the compiled code's arguments) and the compiled code.

    Where Inductor returns an input itself, or a view of it, for an output eager allocates (``z * 1``), the output
    is copied: it would change with the input. Whether an output aliases an input is decided by the compiled code,
    not by the call: it is found on the first call and the copies are made on every call after."""

    def __init__(self, prepare: Callable, compiled: Callable, fresh_outputs: tuple[int, ...]):
        self.prepare, self.compiled = prepare, compiled
        self.fresh_outputs = fresh_outputs
        self.aliasing: tuple[int, ...] | None = None  # (found on the first call)

    def __call__(self, arguments: list):
        inputs = list(arguments) if self.aliasing is None else None  # (the compiled code may empty the list)
        outputs = self.compiled(arguments)
        aliasing = self.aliasing if self.aliasing is not None else self._aliasing(inputs, outputs)
        if aliasing:
            outputs = list(outputs)
            for i in aliasing:
                outputs[i] = outputs[i].clone()
        return outputs

    def _aliasing(self, inputs: list, outputs) -> tuple[int, ...]:
        """The fresh outputs that share an input's memory; kept once every fresh output has memory to tell by (an
        empty one has none, and needs no copy)."""
        storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
        pointers = {i: outputs[i].untyped_storage().data_ptr() for i in self.fresh_outputs}
        aliasing = tuple(i for i, pointer in pointers.items() if pointer and pointer in storages)
        if all(pointers.values()):
            self.aliasing = aliasing
        return aliasing


_warned: set[str] = set()


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _compile(fn: Callable, inputs: Sequence[Any], args: Sequence[Any]) -> tuple[Callable, Callable]:
    """(prepare, compiled): ``prepare(args)`` is None where a call breaks an assumption of the compiled code, else
    its arguments for it (the region's, then the values of the sizes and strides read from its tensors)."""
    from torch._dynamo.source import ConstantSource
    from torch._guards import TracingContext, tracing
    from torch._inductor import config
    from torch._inductor.compile_fx import compile_fx_inner
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

    env = ShapeEnv(specialize_zero_one=False, duck_shape=False)
    fake_mode = FakeTensorMode(shape_env=env)
    symbols: dict[str, Any] = {}  # a size proxy's name -> its SymInt
    by_form: dict[Any, Any] = {}  # a size's canonical form over the program's inputs -> its SymInt
    reads: dict[sympy.Symbol, str] = {}  # a symbol -> how it is read from the arguments
    read_from_tensors: list[tuple[sympy.Symbol, Any]] = []  # sizes and strides read from tensors: graph inputs
    layout_checks: list[str] = []

    def new_symbol(value: int, read: str, name: str, from_tensor: bool):
        if from_tensor:  # (a size or a stride: never negative)
            symbol = env.create_symbol(value, ConstantSource(name))
        else:  # (an int argument may be negative: T5's relative positions are; no sign assumed, none to check)
            symbol = env.create_unspecified_symbol(value, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
        symint = env.create_symintnode(symbol, hint=value)
        reads[symbol] = read
        if from_tensor:
            read_from_tensors.append((symbol, symint))
        return symint

    forms = algebra.Symbols()

    def size(proxy_dim, value: int, read: str, from_tensor: bool = True):
        if not isinstance(proxy_dim, IntegerProxy):
            return int(value)
        if proxy_dim.name in symbols:  # (one proxy is one value)
            return symbols[proxy_dim.name]
        form = _canonical(proxy_dim, forms)
        if form in by_form:  # (another proxy of the same size: checked all the same, it costs nothing)
            layout_checks.append(f"{read} == {reads[by_form[form].node.expr]}")
            symint = by_form[form]
        else:
            symint = new_symbol(int(value), read, proxy_dim.name, from_tensor)
            if form is not None:
                by_form[form] = symint
        symbols[proxy_dim.name] = symint
        return symint

    fakes = []
    with fake_mode:
        for i, (proxy, arg) in enumerate(zip(inputs, args, strict=True)):
            if isinstance(proxy, TensorProxy) and isinstance(arg, torch.Tensor):
                sizes = [size(d, arg.shape[k], f"args[{i}].shape[{k}]") for k, d in enumerate(proxy._shape)]
                if all(isinstance(s, int) for s in sizes):
                    fake = torch.empty_strided(sizes, arg.stride(), dtype=arg.dtype, device=arg.device)
                    layout_checks.append(f"args[{i}].stride() == {tuple(arg.stride())!r}")
                elif arg.is_contiguous():
                    fake = torch.empty(sizes, dtype=arg.dtype, device=arg.device)
                    layout_checks.append(f"args[{i}].is_contiguous()")
                else:  # (a view: its strides are read from it, those of 0 and 1 kept and checked)
                    strides = []
                    for k, stride in enumerate(arg.stride()):
                        if stride in (0, 1):
                            strides.append(stride)
                            layout_checks.append(f"args[{i}].stride({k}) == {stride}")
                        else:
                            strides.append(new_symbol(stride, f"args[{i}].stride({k})", f"stride{len(reads)}", True))
                    fake = torch.empty_strided(sizes, strides, dtype=arg.dtype, device=arg.device)
                fakes.append(fake)
            elif isinstance(proxy, IntegerProxy) and type(arg) is int:  # (one proxy is one value: thunder's trace
                # gives a tensor whose size is this proxy that size, so a symbol read from either stands for both)
                fakes.append(size(proxy, arg, f"args[{i}]", from_tensor=False))
            elif isinstance(proxy, NumberProxy):
                raise _NotCompilable(f"input {i} is a {type(arg).__name__} that may vary")
            else:
                raise _NotCompilable(f"input {i} is a {type(arg).__name__}")
    count = len(fakes)

    def region(*arguments):  # (the sizes read from tensors are graph inputs, as Dynamo makes them)
        return fn(*arguments[:count])

    example = [*fakes, *(symint for _, symint in read_from_tensors)]
    try:
        with fake_mode, torch.no_grad():
            traced = make_fx(region, decomposition_table=select_decomp_table(), tracing_mode="symbolic")(*example)
    except Exception as e:  # (sizes thunder relates by its own arithmetic are separate symbols here: `s0 + s1`
        # does not match `s2`; such a region runs unfused)
        raise _NotCompilable(f"tracing it on symbolic sizes failed: {e!r}") from e
    graph = torch.fx.GraphModule(traced, traced.graph)  # (the attributes the graph reads, not make_fx's others:
    # Inductor's cache pickles the module)
    with tracing(TracingContext(fake_mode)), config.patch(size_asserts=False):  # (the layouts are checked here)
        compiled = compile_fx_inner(graph, example)
    return _preparer(env, reads, read_from_tensors, layout_checks), compiled


def _canonical(proxy: IntegerProxy, forms) -> Any:
    """The canonical form of a size's expression over the program's inputs, where the algebra knows it (else
    None): two proxies of one size, ``i60`` read from a tensor the positions made and ``kv_length`` read from the
    input, are one symbol; as two, Inductor checked an index against the other and its C++ failed to build."""
    expr = algebra.expr_of(proxy)
    form = algebra.simplify(expr, forms)[1] if expr is not None else None
    return None if form is None or form.is_number else form


def _preparer(env, reads: dict[sympy.Symbol, str], read_from_tensors: list, layout_checks: list[str]) -> Callable:
    """One generated function of the arguments: None where a layout the compiled code takes for granted, or a guard
    of the ShapeEnv (what tracing and Inductor assumed of the sizes), fails; else the compiled code's arguments."""
    from torch.utils._sympy.printers import PythonPrinter

    names = {symbol: sympy.Symbol(f"v{k}") for k, symbol in enumerate(reads)}
    unknown = {s for guard in env.guards for s in guard.expr.free_symbols} - set(reads)
    if unknown:  # (a guard on a symbol no argument gives: never the case for inputs made here)
        raise _NotCompilable(f"guards on {sorted(map(str, unknown))}")
    printer = PythonPrinter()
    conditions = dict.fromkeys(f"({printer.doprint(guard.expr.xreplace(names))})" for guard in env.guards)
    extra = ", ".join(str(names[symbol]) for symbol, _ in read_from_tensors)
    lines = [f"    {names[symbol]} = {read}" for symbol, read in reads.items()]
    body = " and ".join([*layout_checks, *conditions]) or "True"
    source = (
        "def prepare(args):\n"
        + "".join(line + "\n" for line in lines)
        + f"    if not ({body}):\n        return None\n"
        + f"    return [*args, {extra}]\n"
    )
    namespace: dict[str, Any] = {}
    exec(compile(source, "<thunder_symbolic inductor region check>", "exec"), namespace)
    return namespace["prepare"]
