"""Patches of ``thunder/transforms/autodiff.py``: a backward is shape-polymorphic only when proven so.

thunder builds the backward after the prologue is final, and grad rules may read sizes in Python
(``int(a.shape[0] - stop)`` for a slice's padding): such a value would be baked into the backward with
no guard to check it. Under symbolic values the build runs under a watch that lets through only what
the prologue already checks; anything else aborts it, and the call is compiled with exact shapes.
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


def _watched(original):
    @functools.wraps(original)
    def build(*args, **kwargs):
        if not compile_data.using_symbolic_values():
            return original(*args, **kwargs)
        with guard_recorder.watching_backward():
            return original(*args, **kwargs)

    return build


for _name in ("grad_transform_on_trace", "split_into_forward_and_backward"):
    patch(
        f"thunder.transforms.autodiff:{_name}",
        summary=f"{_name} raises BackwardSpecializes when it observes a number the prologue does not check",
        why=_WHY,
        upstream="Lightning-AI/lightning-thunder#463",
    )(_watched)
del _name
