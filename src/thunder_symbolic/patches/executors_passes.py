"""Patches of ``thunder/executors/passes.py``: the execution trace's communication scheduled last, no executor
pass whose result thunder would throw away, and no symbol traced a second time to bind it to its executor's
operation."""

from __future__ import annotations

import functools
import sys
import time

import torch
from thunder.extend import FusionExecutor

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.passes import conversions, size_reads


@patch(
    "thunder.executors.passes:transform_for_execution",
    summary="conversions that return their input (x.to(its own dtype or device)) are removed first; with a fusing "
    "executor, sizes read from computed tensors are computed from the inputs' sizes, and size arithmetic that "
    "reads nothing computed runs first; after every fusion pass, the DTensor local executor's sums over the ranks "
    "are scheduled: waited for just before their first reader, and those started before any is read sent as one "
    "collective",
    why=(
        "The executors' fusion passes run in turn, and a fusing executor's partition reorders the whole "
        "trace: on CPU the default torchcompile_xentropy executor, which fused nothing in the inference "
        "benchmark, moved every wait back up to its sum (the MoE's shared-expert sum was waited for before "
        "the routed experts were computed). Only the end of the pass sees the order that runs. And the torch "
        "executor ran every conversion eager answers with the tensor itself as a call (3 of the 242 operations of "
        "the benchmark's large decode region, 1 of the 11 of its small one; thunder_symbolic.passes.conversions). "
        "A size read from a computed tensor (prims.shape, which no fusing executor claims) cut the fusions on "
        "either side of it: a tiny Llama's forward ran as 11 torch.compile regions, as 2 with the reads computed "
        "from the inputs (thunder_symbolic.passes.size_reads)."
    ),
)
def _transform_for_execution(original):
    def transform_for_execution(trace, executors_list):
        trace = conversions.without_noop_conversions(trace)
        if any(isinstance(executor, FusionExecutor) for executor in executors_list):
            trace = size_reads.sizes_read_from_inputs(trace)
        extrace = original(trace, executors_list)
        if not torch.distributed.is_available():
            return extrace
        from thunder_symbolic.distributed import dtensor_local

        return dtensor_local.schedule(extrace) if dtensor_local.executor in executors_list else extrace

    return transform_for_execution


@patch(
    "thunder.executors.passes:_transform_for_operator_executor_execution",
    summary="the operator executors' pass binds a symbol to the executor's operation without tracing the "
    "symbol again where that operation is the symbol or is registered from it (like= or meta=), also behind "
    "an execution transform that only passes the arguments on (torch's reshape and add); when "
    "thunder.jit runs the pass only to see whether it yields waits for thunder's collectives to sort, and "
    "the trace has none to yield, the pass is skipped",
    why=(
        "The pass calls each claimed symbol's operation on the symbol's arguments, which traces the symbol "
        "once more (its decomposition and the broadcasting checks of its sizes) only to rename its output. "
        "For an operation registered from the symbol, or the symbol itself, that trace is the one the bound "
        "symbol already holds: a fifth of thunder's transforms of the inference benchmark's prefill. "
        "Before transform_for_execution, which runs the same pass, thunder.jit runs it on the computation "
        "trace and keeps the result only if it holds the torch executor's wait for a collective (to sort the "
        "waits). A wait there comes from a wait of thunder.distributed at some depth of the trace, through an "
        "execution transform: with none in the trace and only thunder's executors (and this package's), the "
        "result was always thrown away. It was a sixth of thunder's compile of the inference benchmark's "
        "prefill."
    ),
    replaces=True,
)
def _transform_for_operator_executor_execution(original):
    def _transform_for_operator_executor_execution(trace, executors_list):
        """Replaces thunder's pass: its processor is a class local to the function, and the shortcut needs
        the bound symbol it processes, which its calls of the operation do not pass on."""
        if _probes_for_waits(sys._getframe(1).f_code) and not _may_yield_waits(trace, executors_list):
            return trace  # thunder's maybe_sort_waits finds no wait in it, as it would in the pass's result
        from thunder.core.trace import TraceProvenance

        began = time.perf_counter_ns()
        extrace, _ = _operator_lowering()(trace, executors_list)()
        took = (time.perf_counter_ns() - began) // 1_000_000
        extrace.set_provenance(TraceProvenance(f"Transform for operator executor execution (took {took} milliseconds)"))
        return extrace

    return _transform_for_operator_executor_execution


@functools.cache
def _operator_lowering():
    """The processor class, made at first use: thunder's trace processor is importable only once thunder is."""
    from thunder.core import prims
    from thunder.core.baseutils import check
    from thunder.core.symbol import BoundSymbolTag, has_tags
    from thunder.core.trace_interpreter import TraceSubstitutionProcessor
    from thunder.extend import FusionExecutor, OperatorExecutor

    class OperatorLowering(TraceSubstitutionProcessor):
        """Each bound symbol becomes what the first executor that claims it makes of it, in the list's order:
        its execution transform's symbols, the operator executor's operation, or itself for a fusion executor
        (fused later). One that no executor claims stays if an executor's own symbol and is replaced by its
        subsymbols otherwise, and a symbol with a Python implementation stays."""

        def __init__(self, trace, executors_list):
            super().__init__(trace)
            self.executors_list = executors_list

        def process_bsym(self, bsym) -> None:
            if bsym.sym.python_impl is not None or bsym.sym.id == prims.PrimIDs.GET_GRAD:
                return self.keep(bsym)
            for ex in self.executors_list:
                operator = isinstance(ex, OperatorExecutor)
                if not (ex.can_execute(bsym) if operator else isinstance(ex, FusionExecutor) and ex.can_fuse(bsym)):
                    continue
                if (transform := ex.get_execution_transform(bsym)) is not None:
                    bound = _passed_on_without_tracing(transform, bsym)
                    return self.trace_call(transform, bsym) if bound is None else self.keep(bound)
                if not operator:
                    return self.keep(bsym)
                op = ex.implmap[bsym.sym.id].symbol
                bound = _bound_without_tracing(op, bsym)
                return self.trace_call(op, bsym) if bound is None else self.keep(bound)  # (bound.output is bsym's)
            if bsym.sym.executor is not None:
                return self.keep(bsym)
            check(not bsym.sym.is_prim, lambda: f"Failed to find an executor for bound symbol {bsym=}")
            if has_tags(bsym, {BoundSymbolTag.BACKWARD}):
                for sub in bsym.subsymbols:
                    sub.tags.add(BoundSymbolTag.BACKWARD)
            self.add_unprocessed_bsyms(list(bsym.subsymbols))

        def keep(self, bsym) -> None:
            self.add_processed_bsyms([bsym])
            self.set_result(bsym.output)

        def trace_call(self, fn, bsym) -> None:
            self.add_bsyms_from_function(fn, *bsym.args, **bsym.kwargs, tags=bsym.tags)

    return OperatorLowering


@functools.cache
def _passing_on() -> dict:
    """torch executor's execution transforms that only pass their symbol's arguments on, in another form, to
    the operation registered like the symbol: the transform -> that operation, and the arguments it gets."""
    from thunder.core.utils import extract_shape_from_varargs
    from thunder.executors import torchex

    def reshape(a, *shape):
        return (a, extract_shape_from_varargs(shape)), {}

    def add(a, b, *, alpha=None):
        return (a, b), {} if alpha is None else {"alpha": alpha}

    ops = torchex.ex.opmap
    return {torchex._reshape_transform: (ops["reshape"], reshape), torchex._add_transform: (ops["add"], add)}


def _passed_on_without_tracing(transform, bsym):
    """What the execution ``transform`` makes of ``bsym`` where it only passes the arguments on (see
    :func:`_passing_on`): its operation bound without tracing, as :func:`_bound_without_tracing` binds it, to
    the arguments in the form the transform gives them; None for any other transform. Calling the transform
    traced the symbol again: reshape's checks and arithmetic of the sizes, a fifteenth of the operator pass
    over the inference benchmark's prefill."""
    passing_on = _passing_on().get(transform)
    if passing_on is None:
        return None
    op, arguments = passing_on
    args, kwargs = arguments(*bsym.args, **bsym.kwargs)
    return _bound_without_tracing(op, bsym.from_bsym(args=args, kwargs=kwargs))


def _bound_without_tracing(op, bsym):
    """``op`` bound to ``bsym``'s arguments and output as calling it would bind it, or None where the call
    could bind something else. The call traces ``op``'s meta function: when ``op`` is ``bsym``'s symbol, it
    yields ``bsym`` again; when ``op`` is registered like that symbol (``like=``), a bound ``op`` whose one
    subsymbol is ``bsym``; when registered with that symbol as its meta function (a prim), a bound ``op``
    without subsymbols. What differs:

    - the names of the proxies the call makes;
    - under symbolic values, the subsymbols that read a size (``prims.shape``): here those recorded when ``bsym``
      was traced, less the reads of static sizes that DCE dropped since (it drops them again after the pass);
    - the grad-disabled tag on the call's outputs, which only the autodiff transforms (run before this pass)
      read.

    A call that applies autocast, or whose output includes an argument (the call would copy it), is traced. So
    is a DTensor operation: under symbolic values, its sizes when traced are symbolic where the meta function
    makes them so (from_local, redistribute) and ints elsewhere, and the call, outside the interpreter, gives
    ints throughout, which the DTensor local executor compares."""
    from thunder.core.proxies import Proxy
    from thunder.core.pytree import tree_flatten
    from thunder.torch.experimental.dtensor_proxy import DTensorProxy
    from thunder.transforms.autocast import maybe_apply_autocast

    if op is not bsym.sym and op.meta is not bsym.sym:
        return None
    if maybe_apply_autocast(op) is not None or maybe_apply_autocast(bsym.sym) is not None:
        return None
    inputs = [a for a in tree_flatten((bsym.args, bsym.kwargs))[0] if isinstance(a, Proxy)]
    outputs = tree_flatten(bsym.output)[0]
    if any(o is a for o in outputs for a in inputs) or any(isinstance(p, DTensorProxy) for p in (*inputs, *outputs)):
        return None
    if op is bsym.sym:
        return bsym
    traced = bsym.from_bsym(tags=set())  # a new bound symbol: the call tags the top one only
    subsymbols = () if op.is_prim else [traced]  # a prim's call (meta=) records nothing under it
    bound = op.bind(*bsym.args, **bsym.kwargs, output=bsym.output, subsymbols=subsymbols)
    bound.tags.update(bsym.tags)
    return bound


def _probes_for_waits(code) -> bool:
    """Whether ``code`` is thunder.jit's closure that calls the pass only to hand it to maybe_sort_waits."""
    thunder_init = sys.modules["thunder"].__file__
    return code.co_name == "apply_transforms_and_build_cache_entry" and code.co_filename == thunder_init


def _may_yield_waits(trace, executors_list) -> bool:
    """Whether the pass over ``trace`` could yield a wait for a collective: a wait of thunder.distributed in
    the trace (at any depth: a symbol no executor claims is replaced by its subsymbols), or an executor whose
    execution transforms come from elsewhere than thunder and this package (a transform may add symbols)."""
    if not torch.distributed.is_available():
        return False  # thunder's maybe_sort_waits does not look
    from thunder.distributed.prims import PrimIDs
    from thunder.executors.torchex import wait_prim_impl

    waits = {PrimIDs.WAIT, wait_prim_impl.id}
    pending = list(trace.bound_symbols)
    while pending:
        bsym = pending.pop()
        if bsym.sym.id in waits:
            return True
        pending.extend(bsym.subsymbols)
    return not all(_transforms_known(ex) for ex in executors_list)


def _transforms_known(executor) -> bool:
    transforms = (info.execution_transform for info in getattr(executor, "implmap", {}).values())
    return all(t is None or _defined_here(t) for t in transforms) and _defined_here(type(executor))


def _defined_here(obj) -> bool:
    module = getattr(getattr(obj, "func", obj), "__module__", None) or ""
    return module.partition(".")[0] in ("thunder", "thunder_symbolic")
