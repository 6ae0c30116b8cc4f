"""Patches of ``thunder/core/utils.py``: shape comparisons that observe sizes their answer does not depend on."""

from __future__ import annotations

import functools

from thunder_symbolic._registry import patch


@patch(
    "thunder.core.utils:same_shape",
    summary="compares the ranks of two shapes before their sizes",
    why=(
        "Python's tuple == compares items before lengths: broadcasting `x + torch.arange(x.shape[1])` asked "
        "whether the arange's length equals x.shape[0], and under symbolic values the answer became a guard "
        "(`x.shape[1] != x.shape[0]`), so a square input recompiled although the shapes differ in rank."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _same_shape(original):
    @functools.wraps(original)
    def same_shape(a, b, /) -> bool:
        return len(a) == len(b) and original(a, b)

    return same_shape
