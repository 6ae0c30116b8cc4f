"""Patches of ``thunder/core/transforms.py``: grad rules that keep symbolic sizes symbolic."""

from __future__ import annotations

from collections.abc import MutableMapping

from thunder.core import prims
from thunder.core.langctxs import Languages, langctx
from thunder.core.prims import PrimIDs, get_grad, put_grad
from thunder.core.utils import const_as

from thunder_symbolic._registry import patch


def _slice_grad(a, start_indices, end_indices, strides=None):
    """The gradient of a slice: the slice's gradient padded back to ``a``'s shape.

    The pad widths are computed from the (possibly symbolic) sizes as they are, so under symbolic values
    the backward computes them per call instead of baking in those of the first input.
    """
    result = prims.slice_prim(a, start_indices, end_indices, strides)
    g = get_grad(result)
    steps = strides if strides is not None else (1,) * len(start_indices)
    padding = []
    for start, end, step, length, sliced in zip(start_indices, end_indices, steps, a.shape, g.shape):
        if step == 1:
            padding.append((start, length - end, 0))
        else:  # the last element read is start + (sliced - 1) * step; the step's gaps are interior padding
            stop = start + (sliced - 1) * step + 1 if sliced != 0 else start
            padding.append((start, length - stop, step - 1))
    put_grad(a, prims.pad(g, const_as(0, g.dtype), tuple(padding)))
    return result


def _cat_grad(tensors, dim):
    """The gradient of a cat: each input's slice of the cat's gradient.

    The slice bounds are the running sums of the inputs' (possibly symbolic) lengths; the gradient's own
    length along ``dim`` is never read, since that would produce a second proxy for the same dim in the
    joint trace (0.2.6's executor pass then failed with "Detected a cycle while swapping").
    """
    result = prims.cat(tensors, dim)
    g = get_grad(result)
    start = 0
    for t in tensors:
        stop = start + t.shape[dim]
        starts, stops = [0] * t.ndim, list(t.shape)  # the other dims of every input are the cat's
        starts[dim], stops[dim] = start, stop
        put_grad(t, prims.slice_prim(g, starts, stops))
        start = stop
    return result


class _GradRules(MutableMapping):
    """thunder's grad rule table seen through our replacements; registrations go to thunder's table."""

    def __init__(self, table: dict, replacements: dict):
        self.table, self.replacements = table, replacements

    def __getitem__(self, key):
        return self.replacements[key] if key in self.replacements else self.table[key]

    def __setitem__(self, key, value):
        self.replacements.pop(key, None)  # a later registration wins, as in thunder
        self.table[key] = value

    def __delitem__(self, key):
        self.replacements.pop(key, None)
        del self.table[key]

    def __iter__(self):
        return iter(self.table.keys() | self.replacements.keys())

    def __len__(self):
        return len(self.table.keys() | self.replacements.keys())


@patch(
    "thunder.core.transforms:_grad_fn_map",
    summary="the slice and cat grad rules keep symbolic sizes symbolic (pad widths, slice bounds)",
    why=(
        "0.2.6's slice rule converts its pad widths to Python ints, baking the first input's sizes into "
        "the backward; its cat rule reads the gradient's length, a second proxy for the cat's dim, and "
        "the executor pass then failed ('Detected a cycle while swapping'). Under symbolic values both "
        "backwards needed one program per input shape."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _grad_fn_map(original):
    rules = {PrimIDs.SLICE: _slice_grad, PrimIDs.CAT: _cat_grad}
    return _GradRules(original, {key: langctx(Languages.TORCH)(rule) for key, rule in rules.items()})
