"""Patches of ``thunder/executors/passes.py``: the execution trace's communication scheduled last."""

from __future__ import annotations

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
