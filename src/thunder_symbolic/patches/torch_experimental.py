"""Patches of ``thunder/torch/experimental/`` (DTensor support) under symbolic values."""

from __future__ import annotations

import threading
from typing import Any

import torch
from thunder.core import compile_data
from thunder.core.interpreter import ProvenanceRecord, PseudoInst, wrap_const
from thunder.core.proxies import CONSTRAINT, IntegerProxy, NumberProxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.torch.experimental.dtensor_proxy import DTensorProxy

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.distributed import fake_runs
from thunder_symbolic.distributed.dtensor_state import local_tensor_provenance, symbolic_result, symbolic_shapes_of
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.runtime.cache_option import constant_values
from thunder_symbolic.semantics.opaque import opaque

if torch.distributed.is_available():
    import thunder_symbolic.distributed.dtensor_grads  # noqa: F401  registers the DTensor grad rules


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
        if not compile_data.using_symbolic_values():
            return original(x, name, history)
        if history is None:
            # A meta function's result (from_local, redistribute): its global shape from the shape rule.
            result = original(x, name, history)
            shapes = symbolic_shapes_of(x)
            return result if result is None or shapes is None else _with_shape(result, shapes.global_)
        local = getattr(x, "_local_tensor", None)
        if local is None:
            return original(x, name, history)
        if isinstance(x, torch.nn.Parameter):
            with constant_values():  # parameters keep static shapes, local ones too (as torch.compile)
                return original(x, name, history)
        attribute = ProvenanceRecord(PseudoInst.CONSTANT, inputs=[], value="_local_tensor")
        provenance = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[history, attribute])
        token = local_tensor_provenance.set((local, provenance))
        try:
            result = original(x, None, history)
        finally:
            local_tensor_provenance.reset(token)
        # An argument: its global dims are symbolic inputs too, read from the DTensor like a tensor's.
        proxy = _with_shape(result, _input_dims(x.shape, history), name=name, history=history)
        recorder = guard_recorder.current()
        if recorder is not None:
            recorder.add_tensor_input(proxy)
        return proxy

    return proxify_dtensor


def _with_shape(proxy: DTensorProxy, shape: tuple, **kwargs) -> DTensorProxy:
    """``proxy`` with the global ``shape``; it keeps requires_grad, which DTensorProxy's ``like`` drops (a
    DTensor argument that requires grad then failed the prologue's metadata check on every call)."""
    return DTensorProxy(like=proxy, shape=shape, requires_grad=proxy.requires_grad, **kwargs)


def _input_dims(shape, history) -> tuple:
    """Symbolic dims the prologue unpacks as ``<input>.shape[i]`` (how thunder proxies a tensor input's)."""
    shape_of = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[history, wrap_const("shape").provenance])
    return tuple(
        IntegerProxy(
            None,
            size,
            history=ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[shape_of, wrap_const(i).provenance]),
            constraint=CONSTRAINT.CONSTRAINABLE,
        )
        for i, size in enumerate(shape)
    )


def _pin_sizes(recorder: Any, args: tuple, kwargs: dict) -> None:
    """Pin every number and every size (local and global) the fake run was built from."""
    for arg in tree_flatten((args, kwargs))[0]:
        dims = []
        if isinstance(arg, NumberProxy):
            dims = [arg]
        elif isinstance(arg, DTensorProxy):
            dims = [*arg.shape, *arg.local_tensor.shape]
        elif isinstance(arg, TensorProxy):
            dims = list(arg.shape)
        for dim in dims:
            if isinstance(dim, NumberProxy):
                recorder.observe_value(dim, dim.value)


@patch(
    "thunder.torch.experimental.dtensor_utils:FakeTensorMode",
    summary="the DTensor meta functions' fake runs share one FakeTensorMode per thread instead of making one each",
    why=(
        "A FakeTensorMode records the Python stack it was made in (traceback.extract_stack, for its error "
        "messages), and under thunder's interpreter that stack is hundreds of frames: 0.25-0.75 ms a run, "
        "and every DTensor operation's meta function runs on fake tensors three times per compile (the "
        "splitter's support check, the trace, the operator-executor pass). A mode can be entered again once "
        "exited; the fake runs keep only their results' metadata."
    ),
    rebinds=False,  # the name in dtensor_utils only: torch's own FakeTensorMode stays a class everywhere else
)
def _fake_tensor_mode(original):
    modes = threading.local()

    def fake_tensor_mode(*args, **kwargs):
        if args or kwargs:
            return original(*args, **kwargs)
        mode = getattr(modes, "mode", None)
        if mode is None:
            mode = modes.mode = original()
        return mode

    return fake_tensor_mode


@patch(
    "thunder.torch.experimental.dtensor_utils:run_with_fake_tensor",
    summary="DTensor results get symbolic shapes where a shape rule gives them; other fake runs pin their sizes; "
    "a run with the same operation and inputs as an earlier one reuses its result",
    why=(
        "DTensor meta functions run the torch op on fake tensors built from the traced sizes, and read "
        "number arguments' values directly: nothing guarded the numbers, and every size became a pin, so "
        "DTensor programs recompiled for every sequence length (see thunder_symbolic.distributed.dtensor_shapes). A "
        "compile ran each operation's fake run three times, and once more per layer (see "
        "thunder_symbolic.distributed.fake_runs)."
    ),
    upstream="Lightning-AI/lightning-thunder#463, #2755",
)
def _run_with_fake_tensor(original):
    def run_with_fake_tensor(torch_op, *args, **kwargs):
        recorder = guard_recorder.current()
        if recorder is None:
            return fake_runs.memoized(original, torch_op, args, kwargs)
        from thunder_symbolic.distributed.dtensor_shapes import (
            result_shapes,  # torch.distributed: only when DTensors run
        )

        with guard_recorder.paused():
            result = fake_runs.memoized(original, torch_op, args, kwargs)
        shapes = result_shapes(torch_op, args, kwargs, result)
        if shapes is None:
            _pin_sizes(recorder, args, kwargs)
        symbolic_result.set(shapes)
        return result

    return run_with_fake_tensor


@patch(
    "thunder.torch.experimental.dtensor_proxy:create_dtensor_proxy_from_proxies",
    summary="the DTensor result of a meta function with a shape rule gets its symbolic local and global shapes",
    why=(
        "Meta functions build their result from the fake run's concrete sizes (the spec's shape, the fake "
        "local tensor's shape): under symbolic values those are the shapes of the first call only."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _create_dtensor_proxy_from_proxies(original):
    def create_dtensor_proxy_from_proxies(local_tensor, spec, requires_grad):
        from thunder_symbolic.distributed.dtensor_shapes import same_dims

        shapes = symbolic_shapes_of(spec._o) if compile_data.using_symbolic_values() else None
        if shapes is None:
            return original(local_tensor, spec, requires_grad)
        if not same_dims(local_tensor.shape, shapes.local):  # provably: comparing proxies with == is a guard
            local_tensor = TensorProxy(like=local_tensor, shape=shapes.local)
        result = original(local_tensor, spec, requires_grad)
        return _with_shape(result, shapes.global_)

    return create_dtensor_proxy_from_proxies


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


@patch(
    "thunder.torch.experimental.dtensor_proxy:DTensorProxy.full_tensor",
    summary="DTensorProxy.full_tensor(): redistribute to Replicate on every mesh dim, then to_local (as torch)",
    why="0.2.6 has no full_tensor on DTensor proxies: traced code calling it failed with 'Unknown attribute'.",
    upstream="Lightning-AI/lightning-thunder#463",
    adds=True,
)
def _full_tensor(original):
    from torch.distributed.tensor import Replicate

    def full_tensor(self, *, grad_placements=None):
        """The global tensor on every rank, as ``DTensor.full_tensor``."""
        mesh = self.device_mesh
        replicated = self.redistribute(mesh, [Replicate()] * mesh.ndim)
        return replicated.to_local(grad_placements=grad_placements)

    return full_tensor


@patch(
    "thunder.torch.experimental.dtensor_torch_and_prims:maybe_convert_to_dtype",
    summary="numbers in DTensor elementwise operations are converted as numbers, not with the DTensor prim",
    why=(
        "`dtensor * 2` converted the 2 to the computation type with the DTensor conversion prim, which "
        "failed (\"<class 'float'> had an unexpected type\") in both cache modes."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _maybe_convert_to_dtype(original):
    from thunder.clang import maybe_convert_to_dtype as convert_number

    def maybe_convert_to_dtype(a, dtype, *args, **kwargs):
        if isinstance(a, TensorProxy):
            return original(a, dtype, *args, **kwargs)
        return convert_number(a, dtype, *args, **kwargs)

    return maybe_convert_to_dtype


@patch(
    "thunder.torch.experimental.dtensor_torch_and_prims:dtensor_reshape_prim",
    summary="reshape of a DTensor to an int shape (`d.reshape(n)`) is a reshape to (n,)",
    why="0.2.6 handed the int to torch's fake reshape, which failed ('must be tuple of ints, not int').",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _dtensor_reshape_prim(original):
    def dtensor_reshape_prim(a, shape):
        return original(a, (shape,) if isinstance(shape, (int, NumberProxy)) else shape)

    return dtensor_reshape_prim


def _replicated_or_partial(placement) -> bool:
    return placement.is_replicate() or placement.is_partial()


@patch(
    "thunder.torch.experimental.dtensor_utils:check_dtensor_cotangent_metadata",
    summary=(
        "a DTensor cotangent may be Partial where the traced one was Replicate (or the reverse), and of "
        "another shape under symbolic values"
    ),
    why=(
        "The gradient of a replicated DTensor output is often Partial (torch's DTensor autograd keeps it "
        "unreduced); thunderfx hands DTensors from one thunder program to the next, so the tensor-parallel "
        "attention failed in grad mode ('Metadata (placement and mesh) has changed for cotangent'). Both "
        "have the full local shape, and the backward's DTensor operations run on the actual placements. "
        "The check also compared the traced shape, which symbolic values let change."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _check_dtensor_cotangent_metadata(original):
    def check_dtensor_cotangent_metadata(dtensor, metadata):
        spec = dtensor._spec
        if (
            spec.mesh == metadata.mesh
            and spec.tensor_meta is not None
            and metadata.tensor_meta is not None
            and spec.tensor_meta.dtype == metadata.tensor_meta.dtype
            and len(spec.placements) == len(metadata.placements)
            and all(
                p == q or (_replicated_or_partial(p) and _replicated_or_partial(q))
                for p, q in zip(spec.placements, metadata.placements)
            )
        ):
            return
        original(dtensor, metadata)

    return check_dtensor_cotangent_metadata


@patch(
    "thunder.torch.experimental.dtensor_torch_and_prims:dtensor_silu.meta",
    summary="a DTensor's silu is one operation (F.silu on the DTensor, as eager), not eleven DTensor operations; "
    "its gradient is torch's silu_backward",
    why=(
        "0.2.6 composes it of dtype conversions, neg, exp, add, reciprocal and mul, each traced with a fake "
        "run through DTensor's sharding propagation (about 30 ms of the inference benchmark's first compile), "
        "and differentiates it through them: a bfloat16 gradient differed from eager's in the last bit. See "
        "thunder_symbolic.distributed.dtensor_silu."
    ),
    replaces=True,
    requires="torch.distributed (its operation and gradient are DTensor code)",
    available=torch.distributed.is_available,
)
def _dtensor_silu(original):
    from thunder_symbolic.distributed import dtensor_silu

    def silu(a, inplace: bool = False):
        """Replaces thunder's decomposition of a DTensor silu: wrapping would still trace its operations."""
        if inplace:
            raise NotImplementedError("silu(..., inplace=True) of a DTensor is not supported within thunder.jit")
        return dtensor_silu.silu(a)

    return silu
