"""DTensor programs under symbolic values, run on every rank by ``torchrun`` (see test_dtensor_symbolic.py).

Each case runs a program eagerly and under ``thunder.jit(..., cache="symbolic values")`` over several
sequence lengths, compares every output with eager PyTorch (tensor-parallel modules: with the unsharded
module) and reports its compile count; then again in grad mode (``grad:<case>``), where the gradients of
every floating argument and parameter must also equal those of the program run eagerly, PyTorch's
DTensor autograd. Rank 0 prints one JSON line per run (``case``, ``ok``, ``compiles`` or ``error``; a
failure on any rank is the run's result); the test decides what each case must show. ``DEVICE`` selects
cpu (gloo) or cuda (nccl).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import traceback

import thunder.dynamo
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

import thunder
from thunder_symbolic.distributed import dtensor_local
from thunder_symbolic.testing import assert_same

DEVICE = os.environ.get("DEVICE", "cpu")
LENGTHS = (3, 5, 8, 11)  # odd lengths too: Shard(0) of an odd global size is uneven


def from_local_shapes(mesh):
    def f(x):
        d = DTensor.from_local(x, mesh, [Shard(0)])
        return d.to_local() * 2, d.shape[0], d.shape[1]

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def elementwise(mesh):
    def f(x):
        d = DTensor.from_local(x, mesh, [Shard(0)])
        return (d * 2 + d).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def redistribute_to_replicate(mesh):
    def f(x):
        return DTensor.from_local(x, mesh, [Shard(0)]).redistribute(mesh, [Replicate()]).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def full_tensor(mesh):
    def f(x):
        return DTensor.from_local(x, mesh, [Shard(1)]).full_tensor()

    return f, [(torch.randn(2, n, device=DEVICE),) for n in LENGTHS]


def linear_colwise(mesh):
    def f(x, w):
        d = DTensor.from_local(x, mesh, [Replicate()])
        return F.linear(d, DTensor.from_local(w, mesh, [Shard(0)])).to_local()

    return f, [(torch.randn(n, 4, device=DEVICE), torch.randn(6, 4, device=DEVICE)) for n in LENGTHS]


def linear_rowwise(mesh):
    def f(x, w):
        d = DTensor.from_local(x, mesh, [Shard(1)])
        out = F.linear(d, DTensor.from_local(w, mesh, [Shard(1)]))
        return out.redistribute(mesh, [Replicate()]).to_local()

    return f, [(torch.randn(n, 4, device=DEVICE), torch.randn(6, 4, device=DEVICE)) for n in LENGTHS]


def partial_sums(mesh):
    """Partial DTensors: doubling keeps one partial (a local product, summed in place); exp does not (DTensor
    sums the partials first, so it stays a DTensor operation); the argument itself is summed into a copy."""

    def f(x):
        d = DTensor.from_local(x, mesh, [Partial()])
        summed = d.redistribute(mesh, [Replicate()]).to_local()
        return (d * 2).redistribute(mesh, [Replicate()]).to_local(), d.exp().to_local(), summed

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def partial_products(mesh):
    """The product of two Partial DTensors: DTensor sums one of them first (the product of two partial sums
    is not the sum of the partial products), so it stays a DTensor operation."""

    def f(x):
        d = DTensor.from_local(x, mesh, [Partial()])
        return (d * d).redistribute(mesh, [Replicate()]).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def _two_row_parallel_sums(mesh, features: int):
    def f(x, w1, w2):
        d = DTensor.from_local(x, mesh, [Shard(1)])
        first = F.linear(d, DTensor.from_local(w1, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        second = F.linear(d, DTensor.from_local(w2, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        return (first + second).to_local()

    weights = [torch.randn(features, 4, device=DEVICE) for _ in range(2)]
    return f, [(torch.randn(n, 4, device=DEVICE), *weights) for n in LENGTHS]


def sums_together(mesh):
    """Two row-parallel products summed over the ranks and added (a MoE's shared and routed experts): neither
    sum is read before both are started, so they are one collective."""
    return _two_row_parallel_sums(mesh, 6)


def large_sums(mesh):
    """The same with sums larger than a bucket (256 KiB a row): the first is started at once and the second
    product computed while it is communicated."""
    return _two_row_parallel_sums(mesh, 1 << 16)


def sum_read_first(mesh):
    """Two row-parallel products summed over the ranks, the first read before the second is computed (a MoE's
    routed experts, unpermuted, then its shared expert): the second does not need the first sum, so it is
    computed and started before that sum is waited for, and the two are one collective."""

    def f(x, w1, w2):
        d = DTensor.from_local(x, mesh, [Shard(1)])
        first = F.linear(d, DTensor.from_local(w1, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        unpermuted = first.to_local().flip(0)
        second = F.linear(d, DTensor.from_local(w2, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        return unpermuted + second.to_local()

    weights = [torch.randn(6, 4, device=DEVICE) for _ in range(2)]
    return f, [(torch.randn(n, 4, device=DEVICE), *weights) for n in LENGTHS]


def sum_feeds_the_next(mesh):
    """The same where the second product reads the first sum: it cannot be computed before the first sum is
    waited for, and the two stay two collectives."""

    def f(x, w1, w2):
        d = DTensor.from_local(x, mesh, [Shard(1)])
        first = F.linear(d, DTensor.from_local(w1, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        fed = DTensor.from_local(first.to_local()[:, :4] * 2, mesh, [Shard(1)])
        second = F.linear(fed, DTensor.from_local(w2, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        return first.to_local() + second.to_local()

    weights = [torch.randn(6, 4, device=DEVICE) for _ in range(2)]
    return f, [(torch.randn(n, 4, device=DEVICE), *weights) for n in LENGTHS]


def overlapped_sum(mesh):
    """A row-parallel product summed over the ranks while a product that does not need the sum is computed."""

    def f(x, w1, w2):
        d = DTensor.from_local(x, mesh, [Shard(1)])
        summed = F.linear(d, DTensor.from_local(w1, mesh, [Shard(1)])).redistribute(mesh, [Replicate()])
        return x @ w2 + summed.to_local() * 2

    return f, [
        (torch.randn(n, 4, device=DEVICE), torch.randn(6, 4, device=DEVICE), torch.randn(4, 6, device=DEVICE))
        for n in LENGTHS
    ]


def reshape_replicated(mesh):
    def f(x):
        d = DTensor.from_local(x, mesh, [Replicate()])
        return d.reshape(x.shape[0] * 3).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def broadcast_replicated(mesh):
    """A 1-D DTensor broadcast against a 2-D one (its gradient sums over the broadcast dim)."""

    def f(x, bias):
        d = DTensor.from_local(x, mesh, [Replicate()])
        return (d * DTensor.from_local(bias, mesh, [Replicate()])).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE), torch.randn(3, device=DEVICE)) for n in LENGTHS]


def silu_sharded(mesh):
    """silu of a DTensor: thunder composes it of exp, neg, reciprocal, add and mul."""

    def f(x):
        return F.silu(DTensor.from_local(x, mesh, [Shard(0)])).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def swiglu_bfloat16(mesh):
    """The gated MLP activation in bfloat16 (silu of one column-parallel output times the other): DTensor runs
    silu and the product as one local operation each, rounding once; so must the program (exact match)."""

    def f(gate, up):
        g, u = (DTensor.from_local(t, mesh, [Shard(1)]) for t in (gate, up))
        return (F.silu(g) * u + g).to_local()

    bf16 = {"device": DEVICE, "dtype": torch.bfloat16}
    return f, [(torch.randn(n, 8, **bf16), torch.randn(n, 8, **bf16)) for n in LENGTHS]


def grouped_mm_sharded(mesh):
    """torch._grouped_mm of DTensors: rows replicated, every expert's output features sharded (bfloat16:
    DTensor's sharding propagation runs torch's meta function, which takes no other type)."""

    def f(x, w, offsets):
        d = DTensor.from_local(x, mesh, [Replicate()])
        experts = DTensor.from_local(w, mesh, [Shard(2)])
        return torch._grouped_mm(d, experts, DTensor.from_local(offsets, mesh, [Replicate()])).to_local()

    bf16 = {"device": DEVICE, "dtype": torch.bfloat16}
    return f, [
        (torch.randn(3 * n, 8, **bf16), torch.randn(3, 8, 8, **bf16), torch.arange(n, 4 * n, n, dtype=torch.int32))
        for n in LENGTHS
    ]


def shard_uneven(mesh):
    """Sharding splits a dim unevenly: no shape rule, so the sizes are pinned (one compile per length)."""

    def f(x):
        return DTensor.from_local(x, mesh, [Replicate()]).redistribute(mesh, [Shard(0)]).to_local()

    return f, [(torch.randn(n, 3, device=DEVICE),) for n in LENGTHS]


def dtensor_input(mesh):
    """A DTensor argument: its global and local sizes are symbolic inputs; its mesh and placements are checked."""

    def f(d):
        return (d + d).to_local()

    return f, [(DTensor.from_local(torch.randn(n, 3, device=DEVICE), mesh, [Shard(0)]),) for n in LENGTHS]


def placements_change(mesh):
    """The same global shape with other placements: the spec is checked, so this is a second program."""

    def f(d):
        if d.placements[0].is_shard():
            return d.to_local() * 2
        return d.to_local() * 3

    world = mesh.size()
    sharded = DTensor.from_local(torch.ones(4, 3, device=DEVICE), mesh, [Shard(0)])
    replicated = DTensor.from_local(torch.ones(4 * world, 3, device=DEVICE), mesh, [Replicate()])
    return f, [(sharded,), (replicated,), (sharded,), (replicated,)]


class MLP(nn.Module):
    def __init__(self, dim=8, hidden=16):
        super().__init__()
        self.up, self.down = nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Attention(nn.Module):
    def __init__(self, dim=16, heads=4):
        super().__init__()
        self.head_dim = dim // heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))

    def forward(self, x):
        batch, length, _ = x.shape
        q, k, v = (p(x).view(batch, length, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(batch, length, -1))


def grouped_experts_moe(dim=16, experts=4, hidden=32):
    """The inference benchmark's MoE replacement (PYTHONPATH holds thunder/benchmarks)."""
    from layers_for_inference_benchmark import GroupedSwiGLU, Llama4MoE

    routed = GroupedSwiGLU(experts, dim, hidden)
    for p in routed.parameters():
        nn.init.normal_(p, std=0.2)
    return Llama4MoE(nn.Linear(dim, experts, bias=False), MLP(dim, hidden), routed, top_k=2)


def grouped_experts_plan():
    from layers_for_inference_benchmark import GroupedLinearColwiseParallel, GroupedLinearRowwiseParallel

    return {
        "routed_experts.gate_proj": GroupedLinearColwiseParallel(),
        "routed_experts.up_proj": GroupedLinearColwiseParallel(),
        "routed_experts.down_proj": GroupedLinearRowwiseParallel(),
        "shared_expert.up": ColwiseParallel(),
        "shared_expert.down": RowwiseParallel(),
    }


def tensor_parallel(make_module, plan, dim, dtype=torch.float32):
    def case(mesh):
        reference = make_module().to(DEVICE, dtype)
        sharded = parallelize_module(copy.deepcopy(reference), mesh, plan() if callable(plan) else plan)
        return sharded, [(torch.randn(2, n, dim, device=DEVICE, dtype=dtype),) for n in LENGTHS], reference

    return case


CASES = {
    "from_local_shapes": from_local_shapes,
    "elementwise": elementwise,
    "redistribute_to_replicate": redistribute_to_replicate,
    "full_tensor": full_tensor,
    "linear_colwise": linear_colwise,
    "linear_rowwise": linear_rowwise,
    "partial_sums": partial_sums,
    "partial_products": partial_products,
    "sums_together": sums_together,
    "large_sums": large_sums,
    "overlapped_sum": overlapped_sum,
    "sum_read_first": sum_read_first,
    "sum_feeds_the_next": sum_feeds_the_next,
    "reshape_replicated": reshape_replicated,
    "broadcast_replicated": broadcast_replicated,
    "silu_sharded": silu_sharded,
    "swiglu_bfloat16": swiglu_bfloat16,
    "grouped_mm_sharded": grouped_mm_sharded,
    "shard_uneven": shard_uneven,
    "dtensor_input": dtensor_input,
    "placements_change": placements_change,
    "mlp_tensor_parallel": tensor_parallel(MLP, {"up": ColwiseParallel(), "down": RowwiseParallel()}, 8),
    "attention_tensor_parallel": tensor_parallel(
        Attention, {p: ColwiseParallel() for p in "qkv"} | {"o": RowwiseParallel()}, 16
    ),
    "moe_tensor_parallel": tensor_parallel(grouped_experts_moe, grouped_experts_plan, 16),
    # Through thunder's dynamo path: the graph splits hand DTensors from one thunder program to the next.
    "mlp_thunderfx": tensor_parallel(MLP, {"up": ColwiseParallel(), "down": RowwiseParallel()}, 8),
    "attention_thunderfx": tensor_parallel(
        Attention, {p: ColwiseParallel() for p in "qkv"} | {"o": RowwiseParallel()}, 16
    ),
    # bfloat16: Dynamo runs torch's meta function of _grouped_mm, which takes no other type.
    "moe_thunderfx": tensor_parallel(grouped_experts_moe, grouped_experts_plan, 16, torch.bfloat16),
    # With thunder's torch.compile executor: the local operations are fused, the DTensor ones are not.
    "mlp_torchcompile": tensor_parallel(MLP, {"up": ColwiseParallel(), "down": RowwiseParallel()}, 8),
}


def compile_case(name, fn):
    """``fn`` under symbolic values: through thunderfx for the ``*_thunderfx`` cases, else thunder.jit, with
    thunder's torch.compile executor after the DTensor local executor for the ``*_torchcompile`` cases."""
    if name.endswith("_thunderfx"):
        torch._dynamo.reset()
        return thunder.dynamo.thunderfx(fn, cache="symbolic values")
    if name.endswith("_torchcompile"):
        executors = dtensor_local.with_torch_compile_executor(thunder.get_default_executors())
        return thunder.jit(fn, cache="symbolic values", executors=executors)
    return thunder.jit(fn, cache="symbolic values")


class _Comparisons:
    """A case's comparisons, run to its last call even after one fails; the first failure is raised at the end.

    Every call runs collectives: a rank whose comparison failed (rounding can differ between ranks) and that left
    its loop while another went on waited in a different collective, and the launch hung until its timeout,
    reporting nothing."""

    def __init__(self):
        self._failure: AssertionError | None = None

    @contextlib.contextmanager
    def check(self):
        try:
            yield
        except AssertionError as error:
            self._failure = self._failure or error

    def raise_first(self):
        if self._failure is not None:
            raise self._failure


def run_case(name, mesh) -> dict:
    made = CASES[name](mesh)
    fn, arg_sets = made[:2]
    reference = made[2] if len(made) > 2 else fn
    jfn = compile_case(name, fn)
    comparisons = _Comparisons()
    with torch.no_grad():
        for i, args in enumerate(arg_sets):
            actual, expected = jfn(*args), reference(*args)
            with comparisons.check():
                assert_same(actual, expected, path=f"{name} call {i}", **_tolerance(args, name))
    comparisons.raise_first()
    return {
        "case": name,
        "ok": True,
        "compiles": compiles(jfn),
        "dtensor_operations": dtensor_operations(jfn),
        "split_reasons": split_reasons(jfn),
        "fusions": fusions(jfn),
        "operations": operations(jfn),
    }


EXACT = {"swiglu_bfloat16"}  # programs whose every operation is one torch operation on local tensors, as eager's


def _tolerance(args, name: str = "") -> dict:
    """bfloat16 programs: thunder and eager round differently (fused or reordered sums), by a few ulps."""
    if name in EXACT:
        return {"atol": 0, "rtol": 0}
    low = any(isinstance(a, torch.Tensor) and a.dtype == torch.bfloat16 for a in args)
    return {"atol": 1e-2, "rtol": 2e-2} if low else {}


def _leaf(x):
    """A fresh leaf that requires grad, for a floating tensor (plain or DTensor); anything else as it is."""
    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.detach().clone().requires_grad_()
    return x


def _full(t):
    return t.full_tensor() if isinstance(t, DTensor) else t


def _backward(outputs, seed: int):
    """Backpropagate fixed random cotangents (the same for eager and thunder) through the tensor outputs."""
    generator = torch.Generator().manual_seed(seed)
    loss = 0
    for out in outputs if isinstance(outputs, tuple) else (outputs,):
        if isinstance(out, torch.Tensor) and out.requires_grad:
            local = out.to_local() if isinstance(out, DTensor) else out
            cotangent = torch.randn(local.shape, generator=generator).to(local.device)
            loss = loss + (local * cotangent).sum()
    loss.backward()


def _gradients(args, module) -> dict:
    grads = {
        f"argument {i}": _full(a.grad) for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.requires_grad
    }
    if isinstance(module, nn.Module):
        grads |= {name: _full(p.grad) for name, p in module.named_parameters() if p.grad is not None}
        module.zero_grad(set_to_none=True)
    return grads


def run_grad_case(name, mesh) -> dict:
    """The case in grad mode: outputs, and the gradients of every floating argument and parameter (as full
    tensors) against the same program run eagerly, which is PyTorch's DTensor autograd."""
    fn, arg_sets = CASES[name](mesh)[:2]
    eager = copy.deepcopy(fn) if isinstance(fn, nn.Module) else fn
    jfn = compile_case(name, fn)
    comparisons = _Comparisons()
    for i, args in enumerate(arg_sets):
        jargs, eargs = [_leaf(a) for a in args], [_leaf(a) for a in args]
        actual, expected = jfn(*jargs), eager(*eargs)
        tolerance = _tolerance(args)
        with comparisons.check():
            assert_same(actual, expected, path=f"{name} call {i}", **tolerance)
        _backward(actual, seed=i)
        _backward(expected, seed=i)
        gradients = _gradients(jargs, fn), _gradients(eargs, eager)  # full tensors: collectives, on every rank
        with comparisons.check():
            assert_same(*gradients, path=f"{name} call {i} gradients", **tolerance)
    comparisons.raise_first()
    return {"case": f"grad:{name}", "ok": True, "compiles": compiles(jfn)}


def programs(jfn) -> list:
    """The thunder programs behind ``jfn``: itself (thunder.jit), or thunderfx's."""
    backend = getattr(jfn, "_backend", None)
    if backend is None:
        return [jfn]
    return [fn for info in backend.subgraph_infos for fn in info.thunder_compiled_fns]


def compiles(jfn) -> int:
    """thunder.jit: its compiles; thunderfx: the most compiles of any of its thunder programs."""
    return max(thunder.cache_misses(fn) for fn in programs(jfn))


def fusions(jfn) -> list[list[str]]:
    """The operations each fusion of the last programs runs."""
    return [
        [sub.sym.name for sub in b.subsymbols]
        for fn in programs(jfn)
        for b in thunder.last_traces(fn)[-1].bound_symbols
        if b.sym.is_fusion
    ]


def operations(jfn) -> list[str]:
    """The operations the last programs run, in their order."""
    return [b.sym.name for fn in programs(jfn) for b in thunder.last_traces(fn)[-1].bound_symbols]


def split_reasons(jfn) -> list[str]:
    """thunderfx: why it split the graphs (none for thunder.jit)."""
    backend = getattr(jfn, "_backend", None)
    infos = backend.subgraph_infos if backend is not None else ()
    return [reason.info for info in infos for reason in info.split_reasons or ()]


def dtensor_operations(jfn) -> list[str]:
    """The DTensor operations the last programs run through DTensor's dispatch (the DTensor local
    executor's rewrites, which run on local tensors, are not among them)."""
    names = set()
    for fn in programs(jfn):
        names |= {b.sym.name for b in thunder.last_traces(fn)[-1].bound_symbols if dtensor_local.through_dtensor(b)}
    return sorted(names)


def main():
    if DEVICE == "cuda":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo")
    mesh = init_device_mesh(DEVICE, (dist.get_world_size(),))
    runs = [(name, run_case) for name in CASES] + [(f"grad:{name}", run_grad_case) for name in CASES]
    try:
        for case, run in runs:
            torch.manual_seed(0)
            try:
                result = run(case.removeprefix("grad:"), mesh)
            except Exception as error:  # noqa: BLE001  (reported per case; the test names it)
                result = {"case": case, "ok": False, "error": "".join(traceback.format_exception(error))[-2000:]}
            results = [None] * dist.get_world_size()
            dist.all_gather_object(results, result)  # a case passes only if it passed on every rank
            if dist.get_rank() == 0:
                failed = [r for r in results if not r["ok"]]
                print(json.dumps(failed[0] if failed else result), flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    # Ended without Python's finalization, as the benchmarks' ranks are (rank_exit.py): a gloo group outlives
    # destroy_process_group, and its threads releasing a collective's tensors during finalization abort a rank
    # now and then on torch 2.14 (pytorch/pytorch#65231).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
