"""Patches of ``thunder/transforms/autodiff.py``: a backward is shape-polymorphic only when proven so.

thunder builds the backward after the prologue is final, and grad rules (and the meta functions the
executors re-run on the joint and backward traces) may read sizes in Python, ``int(a.shape[0] - stop)``
for one: such a value would be baked into the backward with no guard to check it. Under symbolic
values everything from the grad transform until the cache entry is built runs under a watch (see
:mod:`thunder_symbolic.guards.backward_watch`); the ``CacheEntry`` patch ends it.
"""

from __future__ import annotations

import functools

from thunder.core import compile_data

from thunder_symbolic._registry import patch
from thunder_symbolic.guards import backward_watch

_WHY = (
    "0.2.6 built backwards whose sizes came from the first call's inputs (slice padding, expand shapes) "
    "and reused them for other shapes: wrong gradient shapes or silently wrong gradients."
)


def _strictly_watched(starts_watch: bool):
    """A patch whose function runs where every observation must be expressible; the first starts the watch."""

    def make(original):
        @functools.wraps(original)
        def build(*args, **kwargs):
            if starts_watch and compile_data.using_symbolic_values():
                backward_watch.start()
            with backward_watch.strictly():  # a no-op without a watch
                return original(*args, **kwargs)

        return build

    return make


for _name, _summary, _starts in (
    ("grad_transform_on_trace", "starts the watch over what building the backward reads of symbolic numbers", True),
    ("split_into_forward_and_backward", "runs under the backward watch, every observation expressible", False),
):
    patch(
        f"thunder.transforms.autodiff:{_name}",
        summary=_summary,
        why=_WHY,
        upstream="Lightning-AI/lightning-thunder#463",
    )(_strictly_watched(_starts))
del _name, _summary, _starts
