"""Patches of ``thunder/clang/utils.py``: no needless size-1 guards from broadcasting."""

from __future__ import annotations

from thunder_symbolic.activation.registry import patch


def _identical(shapes) -> bool:
    first = shapes[0]
    return all(len(s) == len(first) and all(a is b for a, b in zip(s, first)) for s in shapes[1:])


@patch(
    "thunder.clang.utils:compute_broadcast_shape",
    summary="returns the shape itself when all shapes are the same dims (one tensor, or x op x)",
    why=(
        "Broadcasting compares every dim with 1; under symbolic values each comparison becomes a guard, "
        "so `x * 2` recompiled whenever a dim became 1 although nothing is broadcast."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _compute_broadcast_shape(original):
    def compute_broadcast_shape(*shapes):
        present = [s for s in shapes if s is not None]
        if present and _identical(present):
            return tuple(present[0])
        return original(*shapes)

    return compute_broadcast_shape
