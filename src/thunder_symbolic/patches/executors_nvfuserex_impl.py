"""Patches of ``thunder/executors/nvfuserex_impl.py``: shapes reach nvFuser as Python ints and fusion scalars.

nvFuser's shape-taking operations accept a list that mixes Python ints (static extents, folded into the
fusion) with scalars (symbolic extents, fusion inputs or ``size()`` of an input tensor). Under symbolic
values a thunder shape mixes ints and NumberProxies, and 0.2.6's translators either pass it on raw (a
NumberProxy reaches nvFuser: ``full``, ``pad``, ``reshape``/``broadcast_in_dim`` without proxies) or turn
every int into a defined scalar constant as soon as one dim is a proxy. These patches translate every
shape the same way: ints stay ints, NumberProxies become the fusion values the fusion maps them to.

Importing this module does not import nvFuser: the patch applies when thunder imports the executor.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from numbers import Number
from typing import Any

from thunder_symbolic.activation.registry import patch

_IMPL = "thunder.executors.nvfuserex_impl"


def inline_shape(shape: Any, lc_to_nv_map: Any) -> Any:
    """``shape`` for nvFuser: ints kept (inlined), NumberProxies replaced by their fusion values; nested
    sequences (pad configurations) keep their structure."""
    from thunder.core.proxies import NumberProxy

    if isinstance(shape, NumberProxy):
        if shape not in lc_to_nv_map:
            raise AssertionError(
                f"symbolic extent {shape.name} is used in an nvFuser fusion that neither receives nor produces it"
            )
        return lc_to_nv_map[shape]
    if isinstance(shape, Number):
        return shape
    if isinstance(shape, (list, tuple)):
        items = [inline_shape(s, lc_to_nv_map) for s in shape]
        return tuple(items) if isinstance(shape, tuple) else items
    raise TypeError(f"expected a shape of ints and NumberProxies, got {shape!r} of type {type(shape).__name__}")


def with_inlined_shape(translator: Callable, parameter: str) -> Callable:
    """``translator`` with its ``parameter`` argument inlined first.

    The 0.2.6 translators of full, reshape, broadcast_in_dim and pad pass a shape without NumberProxies
    straight to nvFuser, so handing them the inlined shape is all they need.
    """
    signature = inspect.signature(translator)

    def translate(*args, fd, lc_to_nv_map, **kwargs):
        bound = signature.bind_partial(*args, **kwargs)
        bound.arguments[parameter] = inline_shape(bound.arguments[parameter], lc_to_nv_map)
        return translator(*bound.args, **bound.kwargs, fd=fd, lc_to_nv_map=lc_to_nv_map)

    translate.__wrapped__ = translator
    translate.__name__ = getattr(translator, "__name__", "translate")
    return translate


def uniform(shape, minval, maxval, *, device, dtype, fd, lc_to_nv_map, seed=None, offset=None) -> Any:
    """Translator of ``prims.uniform`` and ``prims.uniform_philox`` (with ``seed``/``offset``).

    Replaces 0.2.6's ``uniform`` and ``uniform_philox`` translators: they convert the shape element by
    element with ``getnv``, which turns every static extent into a scalar constant; no argument a wrapper
    could pass makes ``getnv`` keep an int, so the call to nvFuser is written here.
    """
    impl = sys.modules[_IMPL]
    rng = {}
    if seed is not None:
        rng = {
            "rng_seed": impl.getnv(seed, fd, lc_to_nv_map),
            "rng_offset": impl.getnv(offset, fd, lc_to_nv_map),
        }
    low, high = impl.getnv(minval, fd, lc_to_nv_map), impl.getnv(maxval, fd, lc_to_nv_map)
    impl._select_device(fd, device)
    nv_shape = list(inline_shape(shape, lc_to_nv_map))
    return fd.ops.uniform(low, high, nv_shape, dtype=impl.lcdtype_to_nvdtype(dtype), **rng)


def _shape_parameters() -> dict[Any, str]:
    """Symbol id -> the name of its shape parameter, for the translators that pass shapes on raw."""
    from thunder.core.prims import PrimIDs
    from thunder.torch.experimental.dtensor_torch_and_prims import DTensorPrimIDs

    return {
        PrimIDs.FULL: "shape",
        PrimIDs.RESHAPE: "shape",
        PrimIDs.BROADCAST_IN_DIM: "shape",
        PrimIDs.PAD: "padding_config",
        DTensorPrimIDs.RESHAPE: "shape",
        DTensorPrimIDs.BROADCAST_IN_DIM: "shape",
    }


def _nvfuser_usable() -> bool:
    from thunder.executors.nvfuserex import nvfuser_available

    return nvfuser_available()


@patch(
    f"{_IMPL}:get_translator",
    summary="nvFuser translators of full, reshape, broadcast_in_dim, pad, uniform inline static extents and "
    "pass symbolic extents as fusion scalars",
    why=(
        "Under symbolic values shapes mix ints and NumberProxies: full and pad handed the NumberProxy itself "
        "to nvFuser (TypeError), and the others turned every static extent into a scalar constant once one "
        "dim was symbolic, so nvFuser could not fold them."
    ),
    upstream="Lightning-AI/lightning-thunder#2746",
    requires="nvFuser and a CUDA GPU (thunder imports its nvFuser executor only then)",
    available=_nvfuser_usable,
)
def _get_translator(original):
    shape_parameters = _shape_parameters()
    from thunder.core.prims import PrimIDs

    replaced = {PrimIDs.UNIFORM: uniform, PrimIDs.UNIFORM_PHILOX: uniform}
    wrapped: dict[Any, Callable] = {}

    def get_translator(bsym):
        sym_id = bsym.sym.id
        if sym_id in replaced:
            return replaced[sym_id]
        translator = original(bsym)
        parameter = shape_parameters.get(sym_id)
        if parameter is None:
            return translator
        cached = wrapped.get(sym_id)
        if cached is None or cached.__wrapped__ is not translator:
            cached = wrapped[sym_id] = with_inlined_shape(translator, parameter)
        return cached

    return get_translator
