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
    summary="the slice grad rule computes its pad widths from symbolic sizes instead of int()-ing them",
    why=(
        "0.2.6's rule converts the pad widths to Python ints, so a backward built under symbolic values "
        "kept the first input's widths: the backward of x[: x.shape[0] // 2] needed one program per size."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _grad_fn_map(original):
    return _GradRules(original, {PrimIDs.SLICE: langctx(Languages.TORCH)(_slice_grad)})
