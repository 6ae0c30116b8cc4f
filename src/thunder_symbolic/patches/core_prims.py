"""Patches of ``thunder/core/prims.py``: prim meta functions that observe sizes their result does not depend on."""

from __future__ import annotations

import functools

from thunder.core import utils
from thunder.core.compile_data import using_symbolic_values
from thunder.core.proxies import CONSTRAINT, NumberProxy, TensorProxy, numberproxy

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards import recorder as guard_recorder


@patch(
    "thunder.core.prims:convert_element_type.meta",
    summary="converting a number whose value is unknown while tracing (from .item()) gives an unknown number",
    why=(
        "0.2.6 converts the traced value, and bool(None) is False: `if s.item() > 0:` took the else branch "
        "under constant values, whatever s held (a silently wrong result; int and float raised TypeError). "
        "The unknown result is then refused where Python needs its value (thunder_symbolic.patches.core_proxies)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _convert_element_type_meta(original):
    @functools.wraps(original)
    def convert_element_type_meta(a, /, dtype):
        if isinstance(a, NumberProxy) and a.value is None and utils.is_numbertype(dtype):
            return numberproxy(dtype, None, constraint=CONSTRAINT.DYNAMIC)  # (a static one needs a value)
        return original(a, dtype)

    return convert_element_type_meta


@patch(
    "thunder.core.prims:cat.meta",
    summary="cat under symbolic values guards that the pieces agree outside the cat dim, not along it",
    why=(
        "0.2.6's cat meta compares every dim of every piece with the first's, the cat dim included, before "
        "skipping it: `cat([x[:n], x[n:]])` recorded `n != x.shape[0] - n` and recompiled when both pieces "
        "happened to have the same length."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _cat_meta(original):
    @functools.wraps(original)
    def cat_meta(tensors, dim):
        if not using_symbolic_values() or guard_recorder.current() is None:
            return original(tensors, dim)
        first = tensors[0] if tensors and isinstance(tensors[0], TensorProxy) else None
        if first is None or not isinstance(dim, int) or not -first.ndim <= dim < first.ndim:
            return original(tensors, dim)  # its error
        along = utils.canonicalize_dim_idx(first.ndim, dim)
        for other in tensors[1:]:
            if isinstance(other, TensorProxy) and other.ndim == first.ndim:
                for d, (size, other_size) in enumerate(zip(first.shape, other.shape)):
                    if d != along and size != other_size:
                        break  # the original raises its error
        with guard_recorder.observations_ignored():
            return original(tensors, dim)

    return cat_meta


@patch(
    "thunder.core.prims:_grouped_mm.meta",
    summary="_grouped_mm of two 2-D operands (groups along the shared dim) has its (groups, m, n) result",
    why=(
        "0.2.6's meta computes that shape and then falls into the chain of the other layouts, whose last "
        "branch rejects every shape: the weight gradient of the MoE experts' grouped matmul is this layout."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _grouped_mm_meta(original):
    @functools.wraps(original)
    def grouped_mm_meta(a, b, offsets):
        if not (isinstance(a, TensorProxy) and isinstance(b, TensorProxy) and a.ndim == b.ndim == 2):
            return original(a, b, offsets)
        utils.check(a.shape[1] == b.shape[0], lambda: f"Inner dimension mismatch: {a.shape} vs {b.shape}")
        utils.check(offsets.ndim == 1, lambda: f"`offsets` must be a vector, got shape {offsets.shape}")
        utils.check_same_dtype(a, b)
        utils.check_same_device(a, b)
        return TensorProxy(like=a, shape=(offsets.shape[0], a.shape[0], b.shape[1]))

    return grouped_mm_meta


@patch(
    "thunder.core.prims:iota.meta",
    summary="iota of length 0 is a 1-D tensor of size 0, as torch.arange(0) is",
    why=(
        "0.2.6's meta gives length 0 a 0-d result while the executors return torch.arange's (0,): "
        "`torch.arange(k).shape` was () and `.ndim` 0 for k == 0 (silently wrong, either cache option), and "
        "len(), cat and index_put of it failed; under symbolic values the size also guarded `length == 0`."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _iota_meta(original):
    @functools.wraps(original)
    def iota_meta(length, *, start, step, device, dtype):
        utils.check(length >= 0, lambda: f"length={length} was not weakly positive")
        with guard_recorder.observations_ignored():  # its `length == 0` decides only the wrong shape
            result = original(length, start=start, step=step, device=device, dtype=dtype)
        return result if result.ndim == 1 else TensorProxy(like=result, shape=(length,))

    return iota_meta
