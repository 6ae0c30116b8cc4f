"""Patches of ``thunder/transforms/autodiff.py``: a backward is shape-polymorphic only when proven so.

thunder builds the backward after the prologue is final, and grad rules (and the meta functions the
executors re-run on the joint and backward traces) may read sizes in Python, ``int(a.shape[0] - stop)``
for one: such a value would be baked into the backward with no guard to check it. Under symbolic
values everything from the grad transform until the cache entry is built runs under a watch (see
:func:`thunder_symbolic.guards.recorder.start_backward_watch`); the ``CacheEntry`` patch ends it.
"""

from __future__ import annotations

import functools

from thunder.core import compile_data

from thunder_symbolic._registry import patch
from thunder_symbolic.guards import recorder as guard_recorder

_WHY = (
    "0.2.6 built backwards whose sizes came from the first call's inputs (slice padding, expand shapes) "
    "and reused them for other shapes: wrong gradient shapes or silently wrong gradients."
)


@patch(
    "thunder.transforms.autodiff:grad_transform_on_trace",
    summary="starts the watch over what building the backward reads of symbolic numbers",
    why=_WHY,
    upstream="Lightning-AI/lightning-thunder#463",
)
def _grad_transform_on_trace(original):
    @functools.wraps(original)
    def grad_transform_on_trace(*args, **kwargs):
        if not compile_data.using_symbolic_values():
            return original(*args, **kwargs)
        guard_recorder.start_backward_watch()
        with guard_recorder.building_backward():
            return original(*args, **kwargs)

    return grad_transform_on_trace


@patch(
    "thunder.transforms.autodiff:split_into_forward_and_backward",
    summary="runs under the backward watch, where every observation must be expressible over the inputs",
    why=_WHY,
    upstream="Lightning-AI/lightning-thunder#463",
)
def _split_into_forward_and_backward(original):
    @functools.wraps(original)
    def split_into_forward_and_backward(*args, **kwargs):
        with guard_recorder.building_backward():
            return original(*args, **kwargs)

    return split_into_forward_and_backward
