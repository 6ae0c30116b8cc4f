"""Patches of ``thunder/torch/experimental/`` (DTensor support) under symbolic values."""

from __future__ import annotations

import contextvars

from thunder.core import compile_data
from thunder.core.interpreter import ProvenanceRecord, PseudoInst
from thunder.core.proxies import NumberProxy
from thunder.core.pytree import tree_flatten

from thunder_symbolic._registry import patch
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.patches.core_jit_ext import opaque

# (local tensor, its provenance) while proxify_dtensor proxies a DTensor input's local tensor.
local_tensor_provenance: contextvars.ContextVar[tuple | None] = contextvars.ContextVar(
    "thunder_symbolic_local_tensor", default=None
)


@patch(
    "thunder.torch.experimental.dtensor_proxy:proxify_dtensor",
    summary="the local tensor of a DTensor input is unpacked from dtensor._local_tensor, not from the DTensor",
    why=(
        "0.2.6 gives the local tensor the DTensor's own provenance, so under symbolic values the prologue "
        "read the local dims from the DTensor's global shape: wrong sizes for sharded dims."
    ),
    upstream="Lightning-AI/lightning-thunder#2755",
)
def _proxify_dtensor(original):
    def proxify_dtensor(x, name=None, history=None):
        if history is None or not compile_data.using_symbolic_values():
            return original(x, name, history)
        local = getattr(x, "_local_tensor", None)
        if local is None:
            return original(x, name, history)
        attribute = ProvenanceRecord(PseudoInst.CONSTANT, inputs=[], value="_local_tensor")
        provenance = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[history, attribute])
        token = local_tensor_provenance.set((local, provenance))
        try:
            return original(x, name, history)
        finally:
            local_tensor_provenance.reset(token)

    return proxify_dtensor



@patch(
    "thunder.torch.experimental.dtensor_utils:run_with_fake_tensor",
    summary="number arguments of DTensor meta functions are pinned, as their values are baked into the fake run",
    why=(
        "DTensor meta functions run the torch op on fake tensors built from the proxies' values; a number "
        "argument's value was read directly (.value), so nothing guarded it."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _run_with_fake_tensor(original):
    def run_with_fake_tensor(torch_op, *args, **kwargs):
        recorder = guard_recorder.current()
        if recorder is not None:
            for arg in tree_flatten((args, kwargs))[0]:
                if isinstance(arg, NumberProxy):
                    recorder.observe_value(arg, arg.value)
        return original(torch_op, *args, **kwargs)

    return run_with_fake_tensor


def _native_property(original: property) -> property:
    return property(opaque(lambda self: original.fget(self)), doc=original.__doc__)


for _name in ("placements", "device_mesh"):
    patch(
        f"thunder.torch.experimental.dtensor_proxy:DTensorProxy.{_name}",
        summary=f"DTensorProxy.{_name} is read natively when traced code asks for it",
        why=(
            "Interpreting the property's body reached the spec proxy's __dict__, which failed with "
            "\"'object' object has no attribute '__dict__'\" (ColwiseParallel's output hook under thunder.jit)."
        ),
        upstream="Lightning-AI/lightning-thunder#463",
    )(_native_property)
del _name
