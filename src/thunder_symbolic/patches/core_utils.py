"""Patches of ``thunder/core/utils.py``: shape comparisons that observe sizes their answer does not depend on, and
mapping over flattened arguments without a reference cycle per call."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from thunder.core import pytree
from thunder.core.proxies import Proxy

from thunder_symbolic.activation.registry import patch


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


@patch(
    "thunder.core.utils:safe_map_flat",
    summary="maps over flattened arguments with a module function instead of a closure that calls itself, made "
    "at every call",
    why=(
        "thunder's trace interpreters call it for every bound symbol they process (2,182 calls in a compile of "
        "the inference benchmark's prefill, whose compiles run with the collector paused), and its conversion "
        "of sequences to tuples is a nested function that refers to itself: a reference cycle per call, left "
        "for the first collection after the compile."
    ),
    replaces=True,
)
def _safe_map_flat(original):
    def safe_map_flat(f, *args):
        """Replaces thunder's safe_map_flat (same result, same layout check): wrapping would keep its closure."""
        flattened = [pytree.tree_flatten(_as_tuples(arg)) for arg in args]
        spec = flattened[0][1]
        for arg, (_, layout) in zip(args[1:], flattened[1:]):
            if layout != spec:
                raise AssertionError(f"safe_map_flat: {args[0]!r} and {arg!r} differ in layout")
        return pytree.tree_unflatten(list(map(f, *(leaves for leaves, _ in flattened))), spec)

    return safe_map_flat


def _as_tuples(x):
    """``x`` with every sequence in it (at any depth; not a string, not a proxy) made a tuple."""
    if isinstance(x, Sequence) and not isinstance(x, (str, Proxy)):
        return tuple(map(_as_tuples, x))
    return x
