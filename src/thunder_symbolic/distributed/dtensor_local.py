"""The DTensor local executor: a trace's DTensor operations run on the local tensors, where that is what
DTensor itself would do.

thunder runs each DTensor operation of a trace as the DTensor operation (``F.linear`` of DTensors,
``DTensor.from_local``, ``redistribute``, ...). Each one goes through DTensor's dispatch: unwrapping,
sharding propagation (cached), a new DTensor and its spec. On a decode step of a tensor-parallel model
that costs about 90 µs a linear and 40 µs a ``from_local`` on CPU, more than the local computation, and
thunder's DTensor ``silu`` alone is eleven DTensor operations.

The placements of every DTensor in a trace are known when it is compiled (the prologue checks those of
the inputs; the trace's fake runs gave those of the results), so where an operation's result has the
placements that its local computation gives, the operation is that local computation:

- ``from_local`` (no ``run_check``) and ``to_local`` are the local tensor itself;
- ``redistribute`` to the same placements is the local tensor; from ``Partial`` to ``Replicate`` it is an
  all-reduce of the local tensor (the functional collective DTensor uses; in place when nothing else
  reads a tensor the trace computed);
- ``linear`` in the layouts of column- and row-wise parallelism (and replicated ones) is the local linear;
- elementwise operations and dtype conversions whose result has the placements of all their DTensor
  operands (and, for two DTensors, the same shape) are the local operation: DTensor redistributed none of
  them, so it computed exactly this. The DTensor torch functions ``silu``, ``add``, ``mul``, ``neg``,
  ``exp`` and ``reciprocal`` are claimed whole (thunder composes them of DTensor operations: ``silu`` of
  eleven, a bfloat16 product converts its operands to float32 and back), so each is one local torch
  operation, with eager's rounding; one that is not stays one DTensor operation, as eager runs it.

:class:`DTensorLocalExecutor`'s fusion pass rewrites a trace so. A DTensor that must exist as a DTensor
(a trace output, or the operand of an operation not rewritten) keeps the DTensor operation that produced
it: the pass never builds a DTensor, it only takes ``_local_tensor`` of the DTensors it is given.

:func:`schedule` places the sums over the ranks in the execution trace once every fusion pass has run (a
fusing executor's partition reorders the whole trace): each is started just after its operand is computed
and waited for just before its first reader, whether or not ``async_op`` asks DTensor to wait at the first
use (tensor parallelism's output hooks do), so what the trace computes in between overlaps with the
communication, as in Inductor's schedule; and sums that are all started before any of them is read are
one collective of the tensors flattened together, as DDP buckets gradients: on a decode step a sum costs
the collective's latency, not its bytes. Where a sum is read before the operand of a later one is computed,
and that computation does not need the sum (a MoE's routed experts, summed and unpermuted, then its shared
expert), the computation and the later sum are moved before the wait, so that both sums are one. Each
element is summed over the same ranks either way. A small sum of CPU tensors over gloo ranks goes through
shared memory where the ranks share a host, else it is an all-gather and one local sum (see
``GATHER_BYTES``): on 2 ranks of a small CPU machine, about 15x and up to 2.5x as fast as gloo's all-reduce.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from thunder.core import dtypes
from thunder.core.prims import PrimIDs
from thunder.core.proxies import AnyProxy, TensorProxy, variableify
from thunder.core.trace import TraceProvenance, from_trace, tracectx
from thunder.core.update_aliases import _is_inplace_op
from thunder.executors.torchex import ex as pytorchex
from thunder.extend import FusionExecutor, ImplInfo, register_executor
from thunder.torch.experimental import dtensor_torch_and_prims as dtensor_ops
from thunder.torch.experimental.dtensor_proxy import DTensorProxy
from torch.distributed.distributed_c10d import _resolve_process_group
from torch.distributed.tensor import Partial, Replicate, Shard

from thunder_symbolic.distributed import shared_sums
from thunder_symbolic.distributed.dtensor_shapes import same_dims

__all__ = [
    "BUCKET_BYTES",
    "FUSIBLE",
    "GATHER_BYTES",
    "DTensorLocalExecutor",
    "executor",
    "schedule",
    "through_dtensor",
    "with_torch_compile_executor",
]


def _local_tensor(d):
    return d._local_tensor


# A sum over the ranks is started by one operator and waited for by another, which the fusion pass places
# just before the sum's first reader: what the trace computes in between overlaps with the communication.
def _all_reduce(t, reduce_op: str, group_name: str):
    group = _small_sum_group(t, reduce_op, group_name)
    if group is None:
        return torch.ops._c10d_functional.all_reduce(t, reduce_op, group_name)
    return _start_small_sum(t, torch.empty_like(t), group)


def _all_reduce_in_place(t, reduce_op: str, group_name: str):
    group = _small_sum_group(t, reduce_op, group_name)
    if group is None:
        return torch.ops._c10d_functional.all_reduce_(t, reduce_op, group_name)
    return _start_small_sum(t, t, group)


def _wait(t):
    started = _started.pop(id(t), None)
    if started is None:
        return torch.ops._c10d_functional.wait_tensor(t)
    result, source, ticket = started
    if isinstance(source, shared_sums.SharedSums):
        return source.finish(ticket)
    ticket.wait()
    return torch.sum(source, 0, out=result)


# A small sum of CPU tensors over gloo ranks (up to GATHER_BYTES over all ranks) is not gloo's all-reduce:
# - on ranks of one host, it goes through shared memory (thunder_symbolic.distributed.shared_sums): 32-38 µs, where
#   gloo's all-reduce of a decode step's 512 bytes on 2 ranks of this project's CPU machine takes 0.5-0.6 ms;
# - else it is an all-gather and a local sum: on 2 ranks of that machine gloo's all-reduce of 512 bytes to
#   128 KiB took up to 2-2.5x as long as the gather and the sum, and kept gloo's threads busy twice as long
#   (CPU that a rank's computation lacks on a busy machine); at 1 MiB a rank the all-reduce is faster again.
# Either way every rank adds the same operands in rank order with the same kernel, so the sum is the same
# on every rank (on 2 ranks, bit for bit gloo's: one addition, rounded once); on more ranks it is
# accumulated at float precision and rounded once, where gloo rounds after each addition.
GATHER_BYTES = 256 << 10

# The small sums started and not yet waited for, by the id of the tensor the start returned (the one the
# wait is given): that tensor, then the shared sums and the sum's number, or the gathered tensors and the
# collective's work.
_started: dict[int, tuple[torch.Tensor, Any, Any]] = {}


def _small_sum_group(t, reduce_op: str, group_name: str):
    """The process group of a sum of ``t`` to start as a small sum, or None for c10d's all-reduce."""
    if reduce_op != "sum" or t.device.type != "cpu" or not t.is_floating_point():
        return None
    group = _resolve_process_group(group_name)
    if group._get_backend_name() != "gloo" or t.numel() * t.element_size() * group.size() > GATHER_BYTES:
        return None
    return group


def _start_small_sum(t, result, group):
    shared = shared_sums.for_group(group, GATHER_BYTES // group.size())
    if shared is not None:
        _started[id(result)] = (result, shared, shared.start(t, result))
        return result
    gathered = t.new_empty((group.size(), *t.shape))
    work = group._allgather_base(gathered.view(-1), t.reshape(-1))
    _started[id(result)] = (result, gathered, work)
    return result


def _all_reduce_together(tensors, reduce_op: str, group_name: str):
    """One sum over the ranks of ``tensors`` (of one dtype), flattened into one new tensor."""
    flat = torch.cat([t.reshape(-1) for t in tensors])
    return _all_reduce_in_place(flat, reduce_op, group_name), [t.shape for t in tensors]


def _wait_together(started):
    """The sums of :func:`_all_reduce_together`, shaped as its tensors (views of the summed tensor)."""
    flat, shapes = started
    parts = _wait(flat).split([shape.numel() for shape in shapes])
    return tuple(part.view(shape) for part, shape in zip(parts, shapes))


def _to(t, dtype: torch.dtype):
    return t.to(dtype)


# What the rewritten trace calls, by operator name.
_OPERATIONS: dict[str, Callable] = {
    "dtensor_local_tensor": _local_tensor,
    "local_all_reduce": _all_reduce,
    "local_all_reduce_": _all_reduce_in_place,  # of a tensor no one else reads: no copy (Inductor's choice too)
    "local_wait": _wait,
    "local_all_reduce_together": _all_reduce_together,
    "local_wait_together": _wait_together,
    "local_linear": F.linear,
    "local_to": _to,
    "local_add": torch.add,
    "local_mul": torch.mul,
    "local_neg": torch.neg,
    "local_exp": torch.exp,
    "local_reciprocal": torch.reciprocal,
    "local_silu": F.silu,
}

_STARTS = {"local_all_reduce", "local_all_reduce_"}
_COMMUNICATION = _STARTS | {"local_wait", "local_all_reduce_together", "local_wait_together"}

# The operators a fusing executor may take into its fusions (thunder's torch.compile executor): the
# computations on local tensors (a fusion would wait for a sum where it starts).
FUSIBLE = set(_OPERATIONS) - {"dtensor_local_tensor"} - _COMMUNICATION

# Sums over the ranks started together are one collective up to this many bytes in all, the size of DDP's
# first gradient bucket: a larger sum costs its bytes more than a collective's latency, and the
# communication of the first one started would no longer overlap with the work before the last one.
BUCKET_BYTES = 1 << 20

# The operators whose result is a new tensor: all but the unwrap, the in-place sum and Tensor.to (which
# may return its input). A wait returns the sum's tensor, one the trace allocated (an in-place sum is
# only started on such a tensor).
_ALLOCATING = set(_OPERATIONS) - {"dtensor_local_tensor", "local_all_reduce_", "local_to"}

# The torch executor's DTensor operators that have a local form: the local operator of the elementwise ones.
_ELEMENTWISE = {
    "dtensor_add_prim": "local_add",
    "dtensor_mul_prim": "local_mul",
    "dtensor_neg_prim": "local_neg",
    "dtensor_exp_prim": "local_exp",
    "dtensor_reciprocal_prim": "local_reciprocal",
}


# The DTensor torch functions this executor claims whole, by thunder's symbol name: the torch function its
# operator of that name runs (on DTensors: DTensor's dispatch, as eager) and the local operator.
_TORCH_FUNCTIONS: dict[str, tuple[Callable, str]] = {
    "dtensor_silu": (F.silu, "local_silu"),
    "dtensor_add": (torch.add, "local_add"),
    "dtensor_mul": (torch.mul, "local_mul"),
    "dtensor_neg": (torch.neg, "local_neg"),
    "dtensor_exp": (torch.exp, "local_exp"),
    "dtensor_reciprocal": (torch.reciprocal, "local_reciprocal"),
}

# The products among the elementwise operations of both kinds: linear in each operand, not in both.
_PRODUCTS = {"dtensor_mul_prim", "dtensor_mul"}


def _spec(d: DTensorProxy):
    return d.spec._o


class _Lowering:
    """The rewritten trace as it is built: each DTensor proxy's local tensor proxy, once known."""

    def __init__(self, executor: DTensorLocalExecutor, readers: dict[str, int]):
        self.executor = executor
        self.readers = readers  # how many bound symbols of the trace read each proxy
        self.bound_symbols: list = []
        self.locals: dict[str, TensorProxy] = {}
        self.swap: dict = {}  # to_local results (variableified): their uses read the local tensor proxy instead
        self.new: set[str] = set()  # local tensor proxies of tensors the rewritten trace allocated

    def only_reader(self, d: DTensorProxy) -> bool:
        """Whether one bound symbol reads ``d`` and its local tensor is one the trace allocated for it."""
        return self.readers.get(d.name) == 1 and self.local(d).name in self.new

    def resolve(self, p):
        """``p``, or the local tensor proxy that stands for it when ``p`` is a rewritten to_local's result."""
        return self.swap.get(variableify(p), p)

    def local(self, d: DTensorProxy) -> TensorProxy:
        local = self.locals.get(d.name)
        if local is None:  # a DTensor the trace is given or a kept operation makes: unwrap it once
            local = self.emit("dtensor_local_tensor", (d,), like=d.local_tensor)
            self.locals[d.name] = local
        return local

    def keep(self, bsym) -> None:
        """Add a bound symbol that is not rewritten: it reads local tensor proxies for rewritten to_local
        results, and a ``del`` forgets the proxies the rewritten trace no longer has. One that reads no
        such result is added as it is (its subsymbols see only its arguments): copying every bound symbol
        with its subsymbols was most of the pass."""
        if bsym.sym.id == PrimIDs.DEL:
            kept = tuple(p for p in bsym.args if p.name not in self.locals and variableify(p) not in self.swap)
            if kept:
                self.bound_symbols.append(bsym.from_bsym(args=kept))
        elif any(variableify(p) in self.swap for p in bsym.flat_proxy_args):
            self.bound_symbols.append(bsym.from_bsym_swap_proxies(self.swap))
        else:
            self.bound_symbols.append(bsym)

    def operand(self, a: Any) -> Any:
        return self.local(a) if isinstance(a, DTensorProxy) else a

    def emit(self, name: str, args: tuple, *, like: TensorProxy) -> TensorProxy:
        out = TensorProxy(like=like)
        self.bound_symbols.append(self.executor.opmap[name].bind(*args, output=out))
        if name in _ALLOCATING:
            self.new.add(out.name)
        return out


# --- When an operation is its local computation ----------------------------------------------------
# Each rule takes a bound symbol of the torch executor's DTensor operator and returns how to write it
# on local tensors (a function of the lowering), or None when its result is not the local computation.


def _from_local(bsym):
    x = bsym.args[0]
    if bsym.kwargs.get("run_check") or isinstance(x, DTensorProxy) or not isinstance(x, TensorProxy):
        return None  # run_check broadcasts a replicated tensor from the first rank

    def write(lowering: _Lowering):
        lowering.locals[bsym.output.name] = lowering.resolve(x)

    return write


def _to_local(bsym):
    (d,) = bsym.args

    def write(lowering: _Lowering):
        lowering.swap[variableify(bsym.output)] = lowering.local(d)

    return write


def _redistribute(bsym):
    d, mesh = bsym.args[0], bsym.args[1]
    source, target = _spec(d), _spec(bsym.output)
    if (mesh is not None and mesh != source.mesh) or target.mesh != source.mesh:
        return None
    reductions = []
    for mesh_dim, (p, q) in enumerate(zip(source.placements, target.placements)):
        if p == q:
            continue
        if type(p) is not Partial or not isinstance(q, Replicate):
            return None
        reductions.append((p.reduce_op, source.mesh.get_group(mesh_dim).group_name))

    def write(lowering: _Lowering):
        name = "local_all_reduce_" if lowering.only_reader(d) else "local_all_reduce"
        local = lowering.local(d)
        for reduce_op, group_name in reductions:
            started = lowering.emit(name, (local, reduce_op, group_name), like=bsym.output.local_tensor)
            local = lowering.emit("local_wait", (started,), like=bsym.output.local_tensor)
            name = "local_all_reduce_"  # the result of the first is the trace's own
        lowering.locals[bsym.output.name] = local

    return write


def _linear(bsym):
    a, w, bias = bsym.args
    operands = [x for x in (a, w, bias) if x is not None]
    if not all(isinstance(x, DTensorProxy) for x in operands):
        return None
    specs = [_spec(x) for x in operands]
    out = _spec(bsym.output)
    if out.mesh.ndim != 1 or any(s.mesh != out.mesh for s in specs):
        return None
    (pa,), (pw,) = specs[0].placements, specs[1].placements
    pb = specs[2].placements[0] if bias is not None else None
    ndim = a.ndim
    if isinstance(pa, Replicate) and isinstance(pw, Replicate) and pb in (None, pw):
        expected = Replicate()
    elif isinstance(pa, Replicate) and pw == Shard(0) and pb in (None, Shard(0)):
        expected = Shard(bsym.output.ndim - 1)
    elif pa == Shard(ndim - 1) and pw == Shard(1) and pb is None:
        expected = Partial()
    elif isinstance(pa, Shard) and pa.dim < ndim - 1 and isinstance(pw, Replicate) and pb in (None, pw):
        expected = Shard(pa.dim)
    else:
        return None
    if tuple(out.placements) != (expected,):
        return None
    return _writer("local_linear", bsym)


def _elementwise(bsym):
    dtensors = [a for a in bsym.args if isinstance(a, DTensorProxy)]
    out = _spec(bsym.output)
    if any(_spec(d).mesh != out.mesh or tuple(_spec(d).placements) != tuple(out.placements) for d in dtensors):
        return None
    replicated = all(isinstance(p, Replicate) for p in out.placements)
    if len(dtensors) == 2 and not replicated and not same_dims(dtensors[0].shape, dtensors[1].shape):
        return None  # broadcasting against a sharded dim is not the local broadcast
    if len(dtensors) == 2 and bsym.sym.name in _PRODUCTS and any(isinstance(p, Partial) for p in out.placements):
        return None  # the product of two partial sums is not the sum of the partial products: DTensor sums one first
    if not dtensors or any(isinstance(a, TensorProxy) and not isinstance(a, DTensorProxy) for a in bsym.args):
        return None
    local = _ELEMENTWISE[bsym.sym.name] if bsym.sym.executor is pytorchex else _TORCH_FUNCTIONS[bsym.sym.name][1]
    return _writer(local, bsym)


def _convert_element_type(bsym):
    d, dtype = bsym.args
    if tuple(_spec(d).placements) != tuple(_spec(bsym.output).placements):
        return None

    def write(lowering: _Lowering):
        to = dtypes.to_torch_dtype(dtype)
        lowering.locals[bsym.output.name] = lowering.emit(
            "local_to", (lowering.local(d), to), like=bsym.output.local_tensor
        )

    return write


def _writer(name: str, bsym):
    def write(lowering: _Lowering):
        args = tuple(lowering.operand(a) for a in bsym.args)
        lowering.locals[bsym.output.name] = lowering.emit(name, args, like=bsym.output.local_tensor)

    return write


_RULES: dict[str, Callable] = {
    "dtensor_from_local": _from_local,
    "dtensor_to_local": _to_local,
    "dtensor_redistribute": _redistribute,
    "dtensor_linear_prim": _linear,
    "dtensor_convert_element_type_prim": _convert_element_type,
    **dict.fromkeys(_ELEMENTWISE, _elementwise),
}


def _rule(bsym):
    if bsym.sym.executor is pytorchex:
        rule = _RULES.get(bsym.sym.name)
    else:  # one of this executor's DTensor torch functions
        rule = _elementwise if bsym.sym.executor is executor and bsym.sym.name in _TORCH_FUNCTIONS else None
    return None if rule is None else rule(bsym)


def through_dtensor(bsym) -> bool:
    """Whether a bound symbol of an execution trace runs a DTensor operation through DTensor's dispatch."""
    if bsym.sym.executor is executor:
        return bsym.sym.name in _TORCH_FUNCTIONS
    return bsym.sym.name.startswith("dtensor_")


def _readers(bound_symbols) -> dict[str, int]:
    """How many bound symbols read each proxy (``del`` does not count)."""
    readers: dict[str, int] = {}
    for bsym in bound_symbols:
        if bsym.sym.id != PrimIDs.DEL:
            for name in {p.name for p in bsym.flat_proxy_args}:
                readers[name] = readers.get(name, 0) + 1
    return readers


def _needed_as_dtensors(bound_symbols, writers: dict[int, Callable]) -> None:
    """Drop the rewrites whose DTensor result is needed as a DTensor: read by a bound symbol that is not
    rewritten (the trace's return among them). Repeated until none is: a dropped rewrite reads DTensors."""
    producer = {}
    for i, bsym in enumerate(bound_symbols):
        for out in bsym.flat_proxy_outs:
            if isinstance(out, DTensorProxy):
                producer[out.name] = i
    changed = True
    while changed:
        changed = False
        for i, bsym in enumerate(bound_symbols):
            if i in writers or bsym.sym.id == PrimIDs.DEL:
                continue
            for arg in bsym.flat_proxy_args:
                j = producer.get(arg.name) if isinstance(arg, DTensorProxy) else None
                if j is not None and j in writers:
                    del writers[j]
                    changed = True


def schedule(trace):
    """``trace``, an execution trace after every fusion pass, with its sums over the ranks placed (see the
    module docstring): each started just after its operand is computed and waited for just before the
    first bound symbol that reads it, a sum whose operand does not need an earlier sum computed before that
    one is waited for, and sums started before any of them is read started as one."""
    bound_symbols = trace.bound_symbols
    if not any(map(_is_start, bound_symbols)):
        return trace
    if any(b.sym.id == PrimIDs.DEL for b in bound_symbols):
        return trace  # a del pins a tensor's last use where it is (thunder adds them after this pass)
    scheduled = from_trace(trace)
    with tracectx(scheduled):
        scheduled.bound_symbols = _sum_together(_start_before_waits(_wait_late(_start_early(bound_symbols))))
    scheduled.set_provenance(TraceProvenance("Sums over the ranks scheduled (thunder_symbolic)"))
    return scheduled


def _is_start(bsym) -> bool:
    return bsym.sym.executor is executor and bsym.sym.name in _STARTS


def _start_early(bound_symbols) -> list:
    """The bound symbols with each sum started just after the one that computes its operand (a fusion pass
    may have moved it down)."""
    rest = [b for b in bound_symbols if not _is_start(b)]
    producer = {out.name: i for i, b in enumerate(rest) for out in b.flat_proxy_outs}
    after: dict[int, list] = {}  # by position in rest (-1: before all): the sums started there
    for start in filter(_is_start, bound_symbols):
        after.setdefault(producer.get(start.args[0].name, -1), []).append(start)
    scheduled = list(after.get(-1, ()))
    for i, bsym in enumerate(rest):
        scheduled.append(bsym)
        scheduled.extend(after.get(i, ()))
    return scheduled


def _wait_late(bound_symbols) -> list:
    """The bound symbols with each wait for a sum moved down to just before the first one that reads the sum
    (Inductor's schedule too): the bound symbols in between do not depend on it."""
    wait = executor.opmap["local_wait"]
    scheduled, pending = [], {}
    for bsym in bound_symbols:
        if bsym.sym is wait:
            pending[bsym.output.name] = bsym
            continue
        if bsym.sym.id == PrimIDs.RETURN:
            scheduled.extend(pending.values())  # what nothing read waits before the trace returns
            pending.clear()
        for p in bsym.flat_proxy_args:
            if (ready := pending.pop(p.name, None)) is not None:
                scheduled.append(ready)
        scheduled.append(bsym)
    return scheduled + list(pending.values())


def _start_before_waits(bound_symbols) -> list:
    """The bound symbols (waits placed late) with each sum that an earlier sum's bucket could take moved up,
    with what computes its operand, to before that earlier sum's wait, where the computation does not
    need that sum: a MoE's routed experts are summed and read (unpermuted) before its shared expert is
    computed, and were two collectives a step where one does.

    Only computations move, and only above bound symbols they do not read: none between the wait and the
    sum may write a tensor in place (a moved reader would see it unwritten) or communicate."""
    wait = executor.opmap["local_wait"]
    scheduled = list(bound_symbols)
    started = {b.output.name: b for b in scheduled if _is_start(b)}
    i = 0
    while i < len(scheduled):
        waiting = scheduled[i]
        first = started.get(waiting.args[0].name) if waiting.sym is wait else None
        later = None
        if first is not None:
            later = next((k for k in range(i + 1, len(scheduled)) if _is_start(scheduled[k])), None)
        if later is None or not _joins(first, scheduled[later]):
            i += 1
            continue
        segment, start = scheduled[i + 1 : later], scheduled[later]
        moved = _operand_computation(segment, start, {first.args[0].name, first.output.name, waiting.output.name})
        if moved is None:
            i += 1
            continue
        moving = set(map(id, moved))
        scheduled[i : later + 1] = [*moved, start, waiting, *(b for b in segment if id(b) not in moving)]
        i += len(moved) + 1  # the wait again: a later sum may join too
    return scheduled


def _joins(first, start) -> bool:
    """Whether a bucket holding the sum ``first`` would take ``start`` (were nothing read in between)."""
    bucket = _Bucket(first)
    bucket.add(first)
    return bucket.accepts(start)


def _operand_computation(segment, start, needing: set[str]) -> list | None:
    """The bound symbols of ``segment`` that compute ``start``'s operand, in order, or None where one of
    them reads ``needing`` (a sum, its operand) or what depends on it, or where ``segment`` holds a bound
    symbol that writes in place or communicates."""
    if any(_writes_or_communicates(b) for b in segment):
        return None
    depends = set(needing)
    for bsym in segment:
        if any(p.name in depends for p in bsym.flat_proxy_args):
            depends |= {out.name for out in bsym.flat_proxy_outs}
    operands, moved = {p.name for p in start.flat_proxy_args}, []
    for bsym in reversed(segment):
        if any(out.name in operands for out in bsym.flat_proxy_outs):
            moved.append(bsym)
            operands |= {p.name for p in bsym.flat_proxy_args}
    return None if operands & depends else moved[::-1]


def _writes_or_communicates(bsym) -> bool:
    """thunder's test of an in-place operation (its tag, or a last subsymbol that copies), or an executor's
    operator named in place (``copy_``), or this executor's communication."""
    if bsym.sym.executor is executor and bsym.sym.name in _COMMUNICATION:
        return True
    name = bsym.sym.name
    return (name.endswith("_") and not name.endswith("__")) or _is_inplace_op(bsym)


class _Bucket:
    """Sums over the ranks that can be started as one: of one group, operation, dtype and device, each
    operand unread since its sum was started, and no sum waited for yet."""

    def __init__(self, start):
        self.key = self._key(start)
        self.starts, self.bytes, self.names = [], 0, set()

    @staticmethod
    def _key(start) -> tuple:
        x, reduce_op, group_name = start.args
        return reduce_op, group_name, x.dtype, x.device

    def accepts(self, start) -> bool:
        return self._key(start) == self.key and self.bytes + _bytes(start.args[0]) <= BUCKET_BYTES

    def add(self, start) -> None:
        self.starts.append(start)
        self.bytes += _bytes(start.args[0])
        self.names |= {start.args[0].name, start.output.name}

    def blocked_by(self, bsym) -> bool:
        """Whether ``bsym`` reads an operand or a sum of the bucket: no later sum joins it."""
        return any(p.name in self.names for p in bsym.flat_proxy_args)


def _bytes(t: TensorProxy) -> int:
    """``t``'s size in bytes, from the sizes it was traced with (a performance choice: nothing depends on it)."""
    return math.prod(int(getattr(d, "value", d)) for d in t.shape) * dtypes.to_torch_dtype(t.dtype).itemsize


def _sum_together(bound_symbols) -> list:
    """The bound symbols (waits placed late) with each bucket of two or more sums started as one collective
    where its last sum was started, and waited for where its first sum was (inside a trace context)."""
    buckets, bucket = [], None
    for bsym in bound_symbols:
        if _is_start(bsym):
            if bucket is None or not bucket.accepts(bsym):
                bucket = _Bucket(bsym)
                buckets.append(bucket)
            bucket.add(bsym)
        elif bucket is not None and bucket.blocked_by(bsym):
            bucket = None
    wait_for = {w.args[0].name: w for w in bound_symbols if w.sym is executor.opmap["local_wait"]}
    together = [b for b in buckets if len(b.starts) > 1 and all(s.output.name in wait_for for s in b.starts)]
    position = {id(b): i for i, b in enumerate(bound_symbols)}
    replacing: dict[int, Any] = {}  # by id of the bound symbol: the bound symbol in its place, None for none
    for b in together:
        waits = [wait_for[start.output.name] for start in b.starts]
        handle = AnyProxy(None, prefix="sums")
        reduce_op, group_name = b.starts[0].args[1:]
        operands = tuple(start.args[0] for start in b.starts)
        replacing |= dict.fromkeys(map(id, (*b.starts, *waits)))
        replacing[id(b.starts[-1])] = executor.opmap["local_all_reduce_together"].bind(
            operands, reduce_op, group_name, output=handle
        )
        first_wait = min(waits, key=lambda w: position[id(w)])
        replacing[id(first_wait)] = executor.opmap["local_wait_together"].bind(
            handle, output=tuple(w.output for w in waits)
        )
    kept = (replacing.get(id(b), b) for b in bound_symbols)
    return [b for b in kept if b is not None]


def _all_dtensors(*args, **kwargs) -> bool:
    return all(isinstance(a, DTensorProxy) for a in args if isinstance(a, TensorProxy))


class DTensorLocalExecutor(FusionExecutor):
    """Runs DTensor operations on local tensors where DTensor would (see the module docstring). While thunder
    assigns operations to executors it takes the DTensor torch functions of ``_TORCH_FUNCTIONS`` whole (its
    operator of the same name, which runs the torch function on the DTensors); its fusion pass rewrites those
    and the torch executor's DTensor operations."""

    def __init__(self):
        super().__init__("dtensor_local")
        for name, fn in _OPERATIONS.items():
            self.register_operator(name, meta=_not_traced, fn=fn)
        for name, (fn, _) in _TORCH_FUNCTIONS.items():
            symbol = getattr(dtensor_ops, name)
            self._implmap[symbol.id] = ImplInfo(
                checker=_all_dtensors, execution_transform=self.register_operator(name, like=symbol, fn=fn)
            )

    def can_fuse(self, bsym) -> bool:
        return self.can_execute(bsym)  # what it takes itself, never a function made of such parts

    def fusion_pass(self, trace):
        bound_symbols = trace.bound_symbols
        writers = {i: w for i, bsym in enumerate(bound_symbols) if (w := _rule(bsym)) is not None}
        _needed_as_dtensors(bound_symbols, writers)
        if not writers:
            return trace
        rewritten = from_trace(trace)
        lowering = _Lowering(self, _readers(bound_symbols))
        with tracectx(rewritten):
            for i, bsym in enumerate(bound_symbols):
                write = writers.get(i)
                if write is None:
                    lowering.keep(bsym)
                else:
                    write(lowering)
        rewritten.bound_symbols = lowering.bound_symbols
        rewritten.set_provenance(TraceProvenance("DTensor operations on local tensors (thunder_symbolic)"))
        return rewritten


def _not_traced(*args, **kwargs):
    raise AssertionError("the DTensor local executor's operators are bound by its fusion pass, never traced")


executor = register_executor(DTensorLocalExecutor())


def with_torch_compile_executor(executors) -> list:
    """``executors`` with thunder's torch.compile executor right after this one (if there) and before the
    others: fusion passes run in the executors' order, so it fuses the operations on local tensors this one
    writes."""
    from thunder.executors.torch_compile import torch_compile_ex

    position = next((i + 1 for i, ex in enumerate(executors) if ex is executor), 0)
    return [*executors[:position], torch_compile_ex, *executors[position:]]
