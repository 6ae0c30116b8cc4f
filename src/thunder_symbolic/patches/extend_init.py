"""Patches of ``thunder/extend/__init__.py``: the default executors."""

from __future__ import annotations

import torch

from thunder_symbolic.activation.registry import patch


@patch(
    "thunder.extend:_default_executors",
    summary="the DTensor local executor comes first among the default executors (where torch.distributed is)",
    why=(
        "thunder runs every DTensor operation of a trace through DTensor's dispatch, which costs more than "
        "the local computation on a decode step (about 90 µs a linear on CPU). Where the result's placements "
        "say DTensor computes locally, the executor's fusion pass writes the local computation instead "
        "(see thunder_symbolic.distributed.dtensor_local)."
    ),
)
def _default_executors(original):
    if not torch.distributed.is_available():
        return original
    from thunder_symbolic.distributed.dtensor_local import executor

    return [executor, *original]
