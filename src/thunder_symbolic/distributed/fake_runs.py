"""The memo of the DTensor meta functions' fake runs.

Every DTensor operation's meta function runs the torch operation on fake tensors made from its inputs'
metadata (``thunder.torch.experimental.dtensor_utils.run_with_fake_tensor``): DTensor's sharding propagation
decides the result's placements and sizes. A compile repeats each run: thunderfx's splitter runs the symbol to
decide whether thunder takes the node, the trace runs it, the operator executors' pass traces the symbol again,
and the next layer runs the same operations on inputs of the same kinds. The run reads only what :func:`key`
describes (the operation; each proxy's sizes, dtype, device and DTensor spec; the other arguments by value), so
runs with equal keys give equal results, and a hit hands back the first run's fake result (meta functions read
its metadata only).
"""

from __future__ import annotations

import collections
import threading
import types
from collections.abc import Callable
from typing import Any

import torch
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.torch.experimental.dtensor_proxy import DTensorProxy

__all__ = ["key", "memoized"]

_SIZE = 1024  # runs remembered: a layer's operations on every kind of input a process compiles
_results: collections.OrderedDict[tuple, Any] = collections.OrderedDict()
_lock = threading.Lock()  # (compiles in several threads)
_MISSING = object()

_CONSTANTS = (type(None), bool, int, str, torch.dtype, torch.device, torch.layout, torch.memory_format)


class _Unkeyed(Exception):
    """An argument this module cannot describe by value: the run is not memoized."""


def memoized(run: Callable, torch_op: Callable, args: tuple, kwargs: dict) -> Any:
    """``run(torch_op, *args, **kwargs)``, or the result of an earlier run with an equal :func:`key`."""
    run_key = key(torch_op, args, kwargs)
    if run_key is None:
        return run(torch_op, *args, **kwargs)
    with _lock:
        result = _results.get(run_key, _MISSING)
        if result is not _MISSING:
            _results.move_to_end(run_key)
            return result
    result = run(torch_op, *args, **kwargs)
    with _lock:
        _results[run_key] = result
        if len(_results) > _SIZE:
            _results.popitem(last=False)
    return result


def key(torch_op: Callable, args: tuple, kwargs: dict) -> tuple | None:
    """What a fake run of ``torch_op`` is built from; None where a part is not described by value, or cannot be
    hashed (a DTensor spec of SymInt sizes)."""
    try:
        run_key = _operation(torch_op), _described(args), _described(kwargs), torch.get_default_dtype()
        hash(run_key)
    except (_Unkeyed, TypeError):
        return None
    return run_key


def _operation(torch_op: Callable) -> Any:
    """The operation: a lambda without closure or defaults by its code (meta functions pass a new one at every
    call, such as ``lambda x, dt: x.to(dt)``), anything else by identity."""
    if isinstance(torch_op, types.FunctionType) and torch_op.__name__ == "<lambda>":
        if torch_op.__closure__ or torch_op.__defaults__ or torch_op.__kwdefaults__:
            raise _Unkeyed
        return torch_op.__code__, id(torch_op.__globals__)
    return torch_op


def _described(value: Any) -> Any:
    """``value`` as the fake run sees it: a proxy by what its fake tensor is made from, a number proxy by its
    value (read without a guard: the caller guards the sizes it depends on), a constant by type and value."""
    if isinstance(value, DTensorProxy):
        local = value.local_tensor
        return DTensorProxy, _sizes(local.shape), local.dtype, local.device, value.spec._o
    if isinstance(value, TensorProxy):
        return TensorProxy, _sizes(value.shape), value.dtype, value.device
    if isinstance(value, NumberProxy):
        return type(value), _described(value.value)
    if isinstance(value, (tuple, list)):
        return type(value), tuple(map(_described, value))
    if isinstance(value, dict):
        return dict, tuple((name, _described(item)) for name, item in value.items())
    if isinstance(value, float):
        return float, repr(value)  # (-0.0 and 0.0 apart, a nan equal to itself)
    if type(value) in _CONSTANTS or _is_distributed_constant(value):
        return type(value), value
    raise _Unkeyed


def _sizes(shape) -> tuple[int, ...]:
    return tuple(dim.value if isinstance(dim, NumberProxy) else dim for dim in shape)


def _is_distributed_constant(value: Any) -> bool:
    """A device mesh or a placement: immutable, compared and hashed by value."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor.placement_types import Placement

    return isinstance(value, (DeviceMesh, Placement))
