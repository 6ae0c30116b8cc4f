"""transformers' attention masks traced as tensor operations, not ``torch.vmap``.

transformers (4.5x) builds every SDPA and eager mask by applying a mask function of one ``(batch, head, q, kv)``
index to all of them with four nested ``torch.vmap`` (``masking_utils._vmap_for_bhqkv``), under
``TransformGetItemToIndex`` (a torch function mode that lets the function index tensors with 0-d tensors).
thunder's interpreter cannot trace functorch's vmap (0.2.6 fails in it; its ``hf-transformers`` recipe runs the
vmap eagerly, as an opaque operation, at every call). The mask functions are elementwise in their indices, so the
same mask is the function applied once to broadcast index tensors (``b[:, None, None, None]``, ``h[None, :, None,
None]``, ``q[None, None, :, None]``, ``kv[None, None, None, :]``), expanded to the full shape: plain comparisons,
arithmetic and indexing that thunder traces with symbolic sizes. Padding masks indexed as ``padding[b, kv]`` are
advanced indexing with broadcast indices, which needs no mode.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch

__all__ = ["lookaside"]


def _broadcast_mask(mask_function, bh_indices: bool):
    """``_vmap_for_bhqkv(mask_function, bh_indices)``'s result, computed by broadcasting."""

    def mask(batch_idx, head_idx, q_idx, kv_idx):
        if bh_indices:
            b, h = batch_idx.reshape(-1, 1, 1, 1), head_idx.reshape(1, -1, 1, 1)
            q, kv = q_idx.reshape(1, 1, -1, 1), kv_idx.reshape(1, 1, 1, -1)
            shape = (batch_idx.shape[0], head_idx.shape[0], q_idx.shape[0], kv_idx.shape[0])
        else:
            b, h, q, kv = batch_idx, head_idx, q_idx.reshape(-1, 1), kv_idx.reshape(1, -1)
            shape = (q_idx.shape[0], kv_idx.shape[0])
        result = mask_function(b, h, q, kv)
        if not isinstance(result, torch.Tensor):
            result = torch.tensor(result, dtype=torch.bool, device=q_idx.device)
        return result.expand(shape)

    return mask


def _vmap_for_bhqkv(mask_function, bh_indices: bool = True):
    return _broadcast_mask(mask_function, bh_indices)


def _without_index_transform():
    """``TransformGetItemToIndex()`` in traced code: broadcast indices index without it."""
    return contextlib.nullcontext()


def lookaside(fn: Any):
    """The function to trace instead of ``fn``, where ``fn`` is one of transformers' mask builders; else None."""
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None:
        return None
    if fn is getattr(masking, "_vmap_for_bhqkv", None):
        return _vmap_for_bhqkv
    if fn is getattr(masking, "TransformGetItemToIndex", None):
        return _without_index_transform
    return None
