"""Patches of ``thunder/executors/torch_compile.py``: the torch.compile executor under symbolic values."""

from __future__ import annotations

from thunder.core.prims import PrimIDs

from thunder_symbolic._registry import patch


@patch(
    "thunder.executors.torch_compile:torch_compile_ex._implmap",
    summary="prims.shape stays outside torch.compile fusions (as nvFuser keeps it); the dims enter as inputs",
    why=(
        "A trace may produce a dim in several prims.shape calls (each .shape access binds one), and DCE "
        "writes the repeated outputs as ints: inside a fusion region that failed with 'name i0 already "
        "used' or \"'int' object has no attribute 'name'\"."
    ),
    upstream="Lightning-AI/lightning-thunder#2730, #2746",
)
def _implmap(original):
    return {op: info for op, info in original.items() if op != PrimIDs.SHAPE}
