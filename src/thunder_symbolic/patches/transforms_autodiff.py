"""Patches of ``thunder/transforms/autodiff.py``: a backward is shape-polymorphic only when proven so.

thunder builds the backward after the prologue is final, and grad rules (and the meta functions the
executors re-run on the joint and backward traces) may read sizes in Python, ``int(a.shape[0] - stop)``
for one: such a value would be baked into the backward with no guard to check it. Under symbolic
values everything from the grad transform until the cache entry is built runs under a watch (see
:mod:`thunder_symbolic.guards.backward_watch`); the ``CacheEntry`` patch ends it.
"""

from __future__ import annotations

import functools
from typing import Any

from thunder.core import compile_data, prims

from thunder_symbolic.activation.registry import patch
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


patch(
    "thunder.transforms.autodiff:grad_transform_on_trace",
    summary="starts the watch over what building the backward reads of symbolic numbers",
    why=_WHY,
    upstream="Lightning-AI/lightning-thunder#463",
)(_strictly_watched(True))


@patch(
    "thunder.transforms.autodiff:split_into_forward_and_backward",
    summary="runs under the backward watch, every observation expressible; refuses an in-place update of a "
    "tensor that has views (or is one), whose gradient and forward 0.2.6 gets wrong",
    why=_WHY + " thunder's autodiff does not carry an in-place update of a view to its base (nor the base's to its "
    "views): with `z = y[0]; z.mul_(3); return y, z` x's gradient was wrong, and `y[0].zero_()` with the "
    "output `y` was moved into the backward, so the forward returned y unchanged (either cache). An "
    "assignment (`y[0] = y[0] * 3`) is differentiated right.",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _split_into_forward_and_backward(original):
    split = _strictly_watched(False)(original)

    @functools.wraps(original)
    def split_into_forward_and_backward(joint_trace):
        _refuse_in_place_updates_of_views(joint_trace)
        return split(joint_trace)

    return split_into_forward_and_backward


def _refuse_in_place_updates_of_views(joint_trace) -> None:
    """Raise where the forward updates a view in place and does not assign it back to its base.

    thunder's alias analysis groups the tensors that share memory in ``update_aliases`` (output i is the
    new name of argument i); the member made first is the base, the others its views. An assignment
    (``y[0] = v``, and ``y[0] += v``, which updates the view and then assigns it) writes the base through
    ``copy_with_setitem``, which thunder differentiates right; a copy into a view left at that is refused.
    """
    made_at: dict[str, int] = {}  # a tensor's name -> where the memory it names was made
    views: set[str] = set()
    updated: dict[str, Any] = {}  # a view updated in place (not assigned back) -> the copy that did it
    for index, bsym in enumerate(joint_trace.bound_symbols):
        if bsym.sym is prims.get_grad:
            break  # the backward
        args, outs = [a.name for a in bsym.flat_proxy_args], [o.name for o in bsym.flat_proxy_outs]
        if bsym.sym.name == "update_aliases":
            base = min(args, key=lambda name: made_at.get(name, -1))
            for arg, out in zip(args, outs):
                made_at[out] = made_at.get(arg, -1)
                if arg != base or arg in views:
                    views.add(out)
                if arg in updated:
                    updated[out] = updated.pop(arg)
            continue
        if bsym.sym.name == "copy_with_setitem_impl":
            for arg in args[1:]:
                updated.pop(arg, None)  # assigned back
        elif (bsym.sym is prims.copy_ or bsym.sym.name == "copy_") and args[1] in views:
            updated[outs[0]] = bsym
        for out in outs:
            made_at.setdefault(out, index)
    if updated:
        bsym = next(iter(updated.values()))
        line = getattr(bsym, "source_positions", None)
        filename = bsym.source_filename or ""
        where = f" at {filename}:{line.lineno}" if line and filename and "thunder_symbolic" not in filename else ""
        raise NotImplementedError(
            f"thunder 0.2.6 cannot differentiate the in-place update of a view{where} (such as `y[0].mul_(2)`, "
            "`y[0].zero_()` or `y[0].copy_(v)`): its gradient and, in grad mode, its result would be wrong. "
            "Write it as an assignment (`y[0] = y[0] * 2`), which thunder differentiates"
        )
