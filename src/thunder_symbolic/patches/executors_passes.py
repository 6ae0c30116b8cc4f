"""Patches of ``thunder/executors/passes.py``: the execution trace's communication scheduled last, and no
executor pass whose result thunder would throw away."""

from __future__ import annotations

import sys

import torch

from thunder_symbolic._registry import patch


@patch(
    "thunder.executors.passes:transform_for_execution",
    summary="after every fusion pass, the DTensor local executor's sums over the ranks are scheduled: waited "
    "for just before their first reader, and those started before any is read sent as one collective",
    why=(
        "The executors' fusion passes run in turn, and a fusing executor's partition reorders the whole "
        "trace: on CPU the default torchcompile_xentropy executor, which fused nothing in the inference "
        "benchmark, moved every wait back up to its sum (the MoE's shared-expert sum was waited for before "
        "the routed experts were computed). Only the end of the pass sees the order that runs."
    ),
)
def _transform_for_execution(original):
    def transform_for_execution(trace, executors_list):
        extrace = original(trace, executors_list)
        if not torch.distributed.is_available():
            return extrace
        from thunder_symbolic import dtensor_local

        return dtensor_local.schedule(extrace) if dtensor_local.executor in executors_list else extrace

    return transform_for_execution


@patch(
    "thunder.executors.passes:_transform_for_operator_executor_execution",
    summary="when thunder.jit runs the operator executors' pass only to see whether it yields waits for "
    "thunder's collectives to sort, and the trace has none to yield, the pass is skipped",
    why=(
        "Before transform_for_execution, which runs the same pass, thunder.jit runs it on the computation "
        "trace and keeps the result only if it holds the torch executor's wait for a collective (to sort the "
        "waits). A wait there comes from a wait of thunder.distributed at some depth of the trace, through an "
        "execution transform: with none in the trace and only thunder's executors (and this package's), the "
        "result was always thrown away. It was a sixth of thunder's compile of the inference benchmark's "
        "prefill."
    ),
)
def _transform_for_operator_executor_execution(original):
    def _transform_for_operator_executor_execution(trace, executors_list):
        if _probes_for_waits(sys._getframe(1).f_code) and not _may_yield_waits(trace, executors_list):
            return trace  # thunder's maybe_sort_waits finds no wait in it, as it would in the pass's result
        return original(trace, executors_list)

    return _transform_for_operator_executor_execution


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
