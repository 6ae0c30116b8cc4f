"""Shortcuts in thunder's compile skip work whose result thunder throws away or already has (the executors' pass
that looks for waits, the second trace of a symbol that the executors' pass binds to its operation, DCE's walk of
the subsymbols per subsymbol, DCE of a trace DCE made, a fusion pass with nothing to fuse, thunderfx's verdict per
node, a meta's signature, a code's disassembly, a new fake tensor mode for each DTensor fake run, a DTensor fake run
like an earlier one, the DTensor local pass's copies of what it does not change, the type check and rebuild of a
flattened container, a vmap region of Dynamo's graph that nothing reads, a bound symbol for each comparison of
sizes in a meta function) and compile with the garbage collector paused, and nothing else: programs compute what eager
PyTorch computes, the passes yield what thunder's yield, and a trace that has waits for collectives still has them
sorted."""

import dataclasses

import pytest
import torch
import torch.distributed as dist
from thunder.core import trace_interpreter
from thunder.extend import OperatorExecutor

import thunder


@pytest.fixture
def executor_passes(monkeypatch):
    """Counts the runs of the operator executors' pass (its trace processor is a class named OperatorLowering)."""
    runs = []
    original = trace_interpreter.TraceSubstitutionProcessor.__call__

    def call(self, *args, **kwargs):
        if type(self).__name__ == "OperatorLowering":
            runs.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(trace_interpreter.TraceSubstitutionProcessor, "__call__", call)
    return runs


def f(x):
    return x.sin() * 2


# Per compile: two passes for the prologue and two for the computation (transform_for_execution's: the
# executors', then the always-executors'). 0.2.6 ran a fifth on the computation before them, to look for waits.
PASSES_PER_COMPILE = 4


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_a_trace_without_collectives_skips_the_pass_that_looks_for_waits(executor_passes, cache):
    jf = thunder.jit(f, cache=cache)
    torch.testing.assert_close(jf(x := torch.randn(3)), f(x))
    assert len(executor_passes) == PASSES_PER_COMPILE


def test_an_executor_from_elsewhere_keeps_the_pass_that_looks_for_waits(executor_passes):
    """An execution transform that thunder does not know could add a wait for a collective."""
    ex = OperatorExecutor("test_compile_passes_sin")
    sin = ex.register_operator("test_sin", like=thunder.torch.sin, fn=torch.sin)
    ex.register_implementation(thunder.torch.sin, execution_transform=lambda a: sin(a))
    jf = thunder.jit(f, executors=[ex, *thunder.get_default_executors()])
    torch.testing.assert_close(jf(x := torch.randn(3)), f(x))
    assert len(executor_passes) == PASSES_PER_COMPILE + 1
    assert "test_sin" in str(thunder.last_traces(jf)[-1])


def _twice_executor(name):
    """A symbol (``twice``) and an executor that runs it with an operation registered like it."""
    from thunder.core.prims import make_prim
    from thunder.core.proxies import TensorProxy

    traced = []

    def meta(a):
        traced.append(a)
        return TensorProxy(like=a)

    twice = make_prim(name, name, meta=meta)
    ex = OperatorExecutor(f"{name}_ex")
    ex.register_implementation(twice, ex.register_operator(f"{name}_impl", like=twice, fn=lambda a: a * 2))
    return twice, ex, traced


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_an_operation_registered_like_its_symbol_is_bound_without_tracing_the_symbol_again(cache):
    """The operator executors' pass called the operation, which traced the symbol a second time (its whole
    decomposition, and a DTensor's sharding propagation) to rename its output."""
    twice, ex, traced = _twice_executor(f"test_twice_{cache.split()[0]}")

    def g(x):
        return twice(x).sin() * x

    jg = thunder.jit(g, executors=[ex, *thunder.get_default_executors()], cache=cache)
    torch.testing.assert_close(jg(x := torch.randn(3)), (x * 2).sin() * x)
    assert len(traced) == 1
    (computed,) = [b.output.name for b in thunder.last_traces(jg)[0].bound_symbols if b.sym is twice]
    (executed,) = [b for b in thunder.last_traces(jg)[-1].bound_symbols if b.sym.executor is ex]
    assert executed.output.name == computed and [b.sym for b in executed.subsymbols] == [twice]
    if cache == "symbolic values":
        torch.testing.assert_close(jg(x := torch.randn(5)), (x * 2).sin() * x)
        assert len(traced) == 1 and thunder.cache_misses(jg) == 1


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_reshape_and_add_are_bound_without_calling_their_execution_transforms(monkeypatch, cache):
    """The torch executor's reshape and add transforms only pass the arguments on to the operation: calling them
    traced the symbol again (reshape's checks and arithmetic of the sizes)."""
    from thunder.executors import torchex

    called, ops = [], {torchex.reshape, torchex.add}
    for op in ops:
        monkeypatch.setattr(torchex, op.name, lambda *a, op=op, **k: called.append(op.name) or op(*a, **k))

    def g(x, n):
        return (x.reshape(-1, x.shape[-1]) + n).reshape(x.shape[0] * 2, -1)

    jg = thunder.jit(g, cache=cache)
    for shape in [(2, 4), (3, 4)]:
        torch.testing.assert_close(jg(x := torch.randn(shape), 2), g(x, 2))
    assert called == []
    assert ops <= {b.sym for b in thunder.last_traces(jg)[-1].bound_symbols}


def test_an_operation_under_autocast_is_traced(monkeypatch):
    """Where autocast applies to the symbol, the call could bind other symbols: the pass calls the operation, as
    0.2.6 did, and the symbol's autocast rule runs again."""
    from thunder.transforms import autocast

    twice, ex, traced = _twice_executor("test_twice_autocast")
    monkeypatch.setitem(autocast.autocast_impls, twice.id, lambda a, *, dtype: twice(a))
    jg = thunder.jit(lambda x: twice(x) + 1, executors=[ex, *thunder.get_default_executors()])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(jg(x := torch.randn(3)), x * 2 + 1)
    assert len(traced) == 2


def _original_of(replacement):
    """The thunder function that this package's ``replacement`` patched."""
    from thunder_symbolic.activation import registry as _registry

    (original,) = [a.original for a in _registry.applied_patches() if a.replacement is replacement]
    return original


def test_swapping_proxies_gives_thunders_result_and_leaves_no_reference_cycle():
    """0.2.6's swap is a closure that calls itself: every call left a reference cycle for the collector (thousands
    a compile, scanned by the first collection after it, compiles running with the collector paused)."""
    import gc
    import types

    from thunder.core.proxies import TensorProxy, variableify
    from thunder.core.symbol import BoundSymbol
    from thunder.core.trace import tracectx

    jf = thunder.jit(lambda x: torch.nn.functional.gelu(x).reshape(-1) * 2)
    jf(torch.randn(2, 3))
    trace = thunder.last_traces(jf)[0]
    bsym = next(b for b in trace.bound_symbols if b.sym.name == "gelu")
    (x,) = bsym.flat_proxy_args
    with tracectx(trace):
        swap_map = {variableify(x): TensorProxy(like=x)}
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)  # what the collector finds unreachable stays in gc.garbage
    try:
        ours = [bsym.from_bsym_swap_proxies(swap_map) for _ in range(10)]
        gc.collect()
        cycles = [o for o in gc.garbage if type(o) is types.FunctionType and "from_bsym_swap" in o.__qualname__]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cycles == []
    thunders = _original_of(BoundSymbol.from_bsym_swap_proxies)(bsym, swap_map)
    assert str(ours[0]) == str(thunders) != str(bsym)
    assert len(ours[0].subsymbols) == len(bsym.subsymbols)
    # a subsymbol that does not read x (at any depth) is kept, one that does is a swapped copy
    reads_x = [any(a is x for a in (*s.flat_proxy_args, *_all_args(s))) for s in bsym.subsymbols]
    assert any(reads_x) and not all(reads_x)
    for new, old, reads in zip(ours[0].subsymbols, bsym.subsymbols, reads_x):
        assert (new is not old) if reads else (new is old)


def _all_args(bsym):
    return [a for sub in bsym.subsymbols for a in (*sub.flat_proxy_args, *_all_args(sub))]


def test_mapping_over_flattened_arguments_gives_thunders_result_and_leaves_no_reference_cycle():
    """thunder's trace interpreters map over each bound symbol's flattened arguments; 0.2.6's helper converts
    sequences with a closure that calls itself, a reference cycle per call (2,182 a prefill compile)."""
    import gc
    import types

    from thunder.core import utils
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx

    with tracectx(TraceCtx()):
        t = TensorProxy(shape=(2,), device=thunder.devices.cpu, dtype=thunder.dtypes.float32)
    cases = [([t, [1, "ab"]], (t, (2, "cd"))), ([(1, [2, 3])], [[4, (5, 6)]]), ([{"k": 1}], [{"k": 2}]), ([], [])]
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        ours = [utils.safe_map_flat(lambda a, b: (a, b), *case) for case in cases]
        gc.collect()
        cycles = [o for o in gc.garbage if type(o) is types.FunctionType]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cycles == []
    assert ours == [_original_of(utils.safe_map_flat)(lambda a, b: (a, b), *case) for case in cases]
    with pytest.raises(AssertionError, match="layout"):
        utils.safe_map_flat(lambda a, b: a, [1, 2], [1, [2, 3]])


def test_a_bound_symbol_made_from_another_keeps_the_flattening_of_what_they_share(monkeypatch):
    """Passes make new bound symbols from old ones, mostly with the same arguments and output objects; thunder
    flattened them again for each new one. What differs is flattened anew."""
    import thunder.core.symbol
    from thunder.core.proxies import TensorProxy, variableify
    from thunder.core.trace import tracectx

    jf = thunder.jit(lambda x, y: torch.nn.functional.gelu(x + y) * 2)
    jf(torch.randn(2, 3), torch.randn(2, 3))
    trace = thunder.last_traces(jf)[0]
    bsym = next(b for b in trace.bound_symbols if b.sym.name == "gelu")
    (x,) = bsym.flat_proxy_args
    (out,) = bsym.flat_proxy_outs  # (computed before the copy, as a pass reads them)
    flattened, original = [], thunder.core.symbol.tree_flatten_with_dataclass

    def flatten(tree):
        flattened.append(tree)
        return original(tree)

    monkeypatch.setattr(thunder.core.symbol, "tree_flatten_with_dataclass", flatten)
    copy = bsym.from_bsym(subsymbols=[])
    assert copy.flat_proxy_args[0] is x and copy.flat_proxy_outs[0] is out
    assert flattened == []
    with tracectx(trace):
        other = TensorProxy(like=x)
        swapped = bsym.from_bsym_swap_proxies({variableify(x): other})
    assert swapped.flat_proxy_args[0] is other and swapped.flat_proxy_outs[0] is out
    assert len(flattened) == 1  # the swapped arguments


_COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})


def _lowered_by_both(jitted, trace):
    """``trace`` lowered by the operator executors' pass of this package and of thunder 0.2.6, each as a nested
    list of symbol names, arguments and tags, proxies named in their order of appearance, without comparisons
    of numbers: thunder's pass traces a symbol again outside the recording of guards, where the comparisons its
    meta function makes are recorded (while tracing, each is a bool with its guard; see patches.core_proxies).
    The torch executor's reshape and add, bound without calling their execution transforms, hold the symbol as
    traced (its decomposition one level down differs: thunder's pass traced it again, and the torch executor
    runs the operation, never its subsymbols)."""
    from thunder.core.compile_data import compile_data_and_stats
    from thunder.core.proxies import Proxy, TensorProxy
    from thunder.core.pytree import tree_flatten, tree_map
    from thunder.executors import passes, torchex

    passed_on = {torchex.reshape, torchex.add}

    replacement = passes._transform_for_operator_executor_execution
    original = _original_of(replacement)
    executors = thunder.compile_data(jitted).executors_list

    def of_numbers(b):
        return b.sym.name in _COMPARISONS and not any(isinstance(a, TensorProxy) for a in tree_flatten(b.args)[0])

    def outline(bsyms, names, depth=None):
        def name(x):
            return names.setdefault(x.name, f"p{len(names)}") if isinstance(x, Proxy) else repr(x)

        if depth == 0:
            return []
        return [
            (b.sym.name, tree_map(name, (b.args, b.kwargs)), tree_map(name, b.output), b.tags)
            + (outline(b.subsymbols, names, 1 if b.sym in passed_on else None if depth is None else depth - 1),)
            for b in bsyms
            if not of_numbers(b)
        ]

    with compile_data_and_stats(thunder.compile_data(jitted), thunder.compile_stats(jitted)):  # as in the compile
        ours, upstream = (pass_(trace, executors) for pass_ in (replacement, original))
    return outline(ours.bound_symbols, {}), outline(upstream.bound_symbols, {})


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_the_operator_pass_lowers_as_thunders_pass_does(cache):
    """Up to the names of proxies, the pass yields what 0.2.6's yields: for torch operations (registered like
    their symbols), a prim's operation registered with the prim as its meta function (``shallow_copy``), the
    prologue's checks (run as themselves), the backward's tagged symbols, and a symbol whose meta function
    returns its argument (the call copies it)."""
    from thunder.core import prims
    from thunder.core.prims import make_prim

    same = make_prim(f"test_same_{cache.split()[0]}", "test_same", meta=lambda a: a)
    ex = OperatorExecutor(f"test_same_ex_{cache.split()[0]}")
    ex.register_implementation(same, ex.register_operator("test_same_impl", like=same, fn=lambda a: a))

    def g(x, y, n, same=same, copy=prims.shallow_copy):
        return torch.nn.functional.softmax(same(x) * y + n, dim=-1).sum(0), copy(x.sin()).reshape(-1)

    jg = thunder.jit(g, executors=[ex, *thunder.get_default_executors()], cache=cache)
    for shape in [(4, 3), (5, 3)]:
        expected = g(x := torch.randn(shape), y := torch.randn(3, requires_grad=True), 2, lambda a: a, lambda a: a)
        actual = jg(x, y, 2)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(torch.autograd.grad(actual[0].sum(), y), torch.autograd.grad(expected[0].sum(), y))
        (joint,) = [t for t in thunder.last_traces(jg) if "Grad transform" in str(t.get_provenance())]
        assert any(b.tags for b in joint.bound_symbols)  # the backward's, tagged BACKWARD
        for trace in (thunder.last_traces(jg)[0], thunder.last_prologue_traces(jg)[0], joint):
            ours, upstream = _lowered_by_both(jg, trace)
            assert ours == upstream


def test_a_meta_functions_comparison_of_sizes_is_a_guard_and_no_bound_symbol():
    """Broadcasting compares sizes inside meta functions; each comparison becomes the guard it implies, with no
    bound symbol (thunder recorded one for DCE to drop). The guards still decide: one program for the sizes
    that compare alike, another once a size is 1 (it broadcasts), each equal to eager."""

    def f(x, y):
        return x * y

    def walk(bsyms):
        for b in bsyms:
            yield b
            yield from walk(b.subsymbols)

    jf = thunder.jit(f, cache="symbolic values")
    for n, m in [(4, 4), (5, 5), (7, 7), (1, 6)]:
        torch.testing.assert_close(jf(x := torch.randn(n, 3), y := torch.randn(m, 3)), f(x, y))
    traced = thunder.last_traces(jf)[0]  # as traced, before DCE
    assert {b.sym.name for b in walk(traced.bound_symbols)} & _COMPARISONS == set()
    assert thunder.cache_misses(jf) == 2


@pytest.fixture
def one_rank_group():
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield dist.new_group()
    dist.destroy_process_group()


def test_a_wait_for_a_collective_is_still_sorted(executor_passes, one_rank_group):
    from thunder.distributed import prims as dist_prims

    def g(x):
        started = dist_prims.all_reduce(x, dist_prims.DistributedReduceOps.SUM, one_rank_group, True)
        return dist_prims.wait(started) * 2

    jf = thunder.jit(g)
    torch.testing.assert_close(jf(x := torch.randn(3)), x * 2)
    assert len(executor_passes) == PASSES_PER_COMPILE + 1
    assert "Sort Waits" in [t.get_provenance().pss for t in thunder.last_traces(jf) if t.get_provenance()]


def test_dtensor_fake_runs_share_one_fake_tensor_mode(monkeypatch, one_rank_group):
    """A DTensor operation's meta function runs the torch operation on fake tensors; 0.2.6 made a FakeTensorMode
    for each run, and each records the Python stack it is made in (hundreds of frames under the interpreter)."""
    import sys

    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

    made = []
    original = FakeTensorMode.__init__

    def init(self, *args, **kwargs):
        made.append(sys._getframe(1).f_globals["__name__"])  # who makes it (DTensor's own propagation makes some)
        original(self, *args, **kwargs)

    monkeypatch.setattr(FakeTensorMode, "__init__", init)

    def g(x, w):
        return torch.nn.functional.linear(x, w) * 2

    mesh = DeviceMesh("cpu", [0])
    w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
    for n in (3, 5):
        x = distribute_tensor(torch.randn(n, 4), mesh, [Replicate()])
        torch.testing.assert_close(thunder.jit(g)(x, w).full_tensor(), g(x, w).full_tensor())
    assert made.count("thunder.torch.experimental.dtensor_utils") <= 1  # none when an earlier test made it


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_a_dtensor_silu_is_one_operation_with_eagers_gradient(one_rank_group, cache):
    """thunder composed a DTensor silu of seven DTensor operations, each traced with a fake run through DTensor's
    sharding propagation (and rounded its sigmoid to bfloat16 where no executor took the silu whole); it is one
    operation, computed and differentiated as eager does, with symbolic sizes."""
    from torch.distributed.tensor import DeviceMesh, Shard, distribute_tensor

    def g(x):
        return torch.nn.functional.silu(x) * 2

    mesh = DeviceMesh("cpu", [0])
    jg = thunder.jit(g, cache=cache)
    for n in (3, 5):
        x, cotangent = (distribute_tensor(torch.randn(n, 4, dtype=torch.bfloat16), mesh, [Shard(0)]) for _ in "xc")
        x.requires_grad_()
        expected = g(x)
        (expected_grad,) = torch.autograd.grad(expected, x, cotangent)
        actual = jg(x)
        (grad,) = torch.autograd.grad(actual, x, cotangent)
        torch.testing.assert_close(actual.full_tensor(), expected.full_tensor(), rtol=0, atol=0)
        torch.testing.assert_close(grad.full_tensor(), expected_grad.full_tensor(), rtol=0, atol=0)
    (silu,) = [b for b in thunder.last_traces(jg)[0].bound_symbols if b.sym.name == "dtensor_silu"]
    assert [b.sym.name for b in silu.subsymbols] == ["dtensor_silu_prim"]
    assert thunder.cache_misses(jg) == (1 if cache == "symbolic values" else 2)


def test_each_thread_has_its_own_fake_tensor_mode_for_dtensor_fake_runs():
    """A mode's state (the modes it was entered over) is not shared between threads; asked with arguments, the
    name still makes a new mode."""
    import threading

    from thunder.torch.experimental import dtensor_utils

    here = dtensor_utils.FakeTensorMode()
    there = []
    thread = threading.Thread(target=lambda: there.extend(dtensor_utils.FakeTensorMode() for _ in range(2)))
    thread.start()
    thread.join()
    assert dtensor_utils.FakeTensorMode() is here
    assert there[0] is there[1] and there[0] is not here
    assert dtensor_utils.FakeTensorMode(allow_non_fake_inputs=True) is not here


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_a_dtensor_fake_run_like_an_earlier_one_is_not_run_again(monkeypatch, one_rank_group, cache):
    """A DTensor operation's meta function runs the torch operation on fake DTensors made from its inputs; a
    compile made them three times per operation (thunderfx's check, the trace, the executors' pass), and again for
    each layer. A run like an earlier one (same operation, inputs of the same sizes, dtypes, devices and specs)
    reuses its result: compiling the same program again makes no fake DTensor."""
    from thunder.torch.experimental import dtensor_utils
    from torch.distributed.tensor import DeviceMesh, DTensor, Replicate, Shard, distribute_tensor

    made = []

    class Counted:
        @staticmethod
        def from_local(*args, **kwargs):
            made.append(args[0].shape)
            return DTensor.from_local(*args, **kwargs)

    monkeypatch.setattr(dtensor_utils, "DTensor", Counted)

    def g(x, w):
        return torch.nn.functional.linear(x, w) * 2

    mesh = DeviceMesh("cpu", [0])
    x = distribute_tensor(torch.randn(3, 4), mesh, [Replicate()])
    w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])
    for _ in range(2):
        made.clear()
        torch.testing.assert_close(thunder.jit(g, cache=cache)(x, w).full_tensor(), g(x, w).full_tensor())
    assert made == []


def test_dtensor_fake_runs_of_inputs_made_differently_are_not_shared(one_rank_group):
    """Inputs that differ in what their fake DTensors are made from (placements, dtype, sizes) get runs of their
    own: the traced results' placements, dtypes and shapes are those of eager PyTorch's results."""
    from thunder.core.pytree import tree_flatten
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

    def g(x, w):
        return torch.nn.functional.linear(x, w) * 2

    mesh = DeviceMesh("cpu", [0])
    cases = [(3, torch.float32, Shard(0)), (3, torch.float32, Replicate()), (3, torch.float64, Replicate())]
    for rows, dtype, placement in [*cases, (5, torch.float64, Replicate())]:
        x = distribute_tensor(torch.randn(rows, 4, dtype=dtype), mesh, [Replicate()])
        w = distribute_tensor(torch.randn(8, 4, dtype=dtype), mesh, [placement])
        jg = thunder.jit(g)
        out, expected = jg(x, w), g(x, w)
        torch.testing.assert_close(out.full_tensor(), expected.full_tensor())
        (traced,) = tree_flatten(thunder.last_traces(jg)[-1].output)[0]
        assert traced.placements == expected.placements and tuple(traced.shape) == expected.shape
        assert thunder.dtypes.to_torch_dtype(traced.dtype) == expected.dtype


def test_a_fake_runs_key_tells_apart_what_the_run_is_made_from():
    from thunder_symbolic.distributed import fake_runs

    def key(*args):
        return fake_runs.key(torch.mul, args, {})

    assert key(1) != key(True) and key(0.0) != key(-0.0) and key(torch.float32) != key(torch.float64)
    assert key(2) == key(2) and key(float("nan")) == key(float("nan"))
    made_at_each_call = [lambda x, dt: x.to(dt) for _ in range(2)]  # as a meta function's lambda
    assert fake_runs.key(made_at_each_call[0], (), {}) == fake_runs.key(made_at_each_call[1], (), {})
    n = 2
    assert fake_runs.key(lambda x: x * n, (), {}) is None  # a closure: its cells are not described
    assert key(object()) is None and key([]) is not None and key({"a": 1}) != key({"a": 2})


@dataclasses.dataclass
class _Registered:
    a: object
    b: object


@dataclasses.dataclass
class _SeenOnce:
    a: object


def test_flattening_gives_what_thunders_flattening_gives():
    """The same leaves, and specs that unflatten to the same values, for what bound symbols hold (containers of
    proxies, sizes, slices, named tuples, dataclasses: one registered before, one seen for the first time) and
    for what is not a container; an unsupported type is still refused."""
    from collections import namedtuple

    from thunder.core import pytree
    from thunder.core.proxies import TensorProxy
    from thunder.core.trace import TraceCtx, tracectx
    from torch.fx.immutable_collections import immutable_list

    flatten, with_dataclass = map(_original_of, (pytree.tree_flatten, pytree.tree_flatten_with_dataclass))
    pytree.tree_flatten_with_dataclass(_Registered(1, 2))  # registers the class
    with tracectx(TraceCtx()):
        p = TensorProxy(shape=(2, 3), device=thunder.core.devices.cpu, dtype=thunder.dtypes.float32)
    Pair = namedtuple("Pair", "x y")
    trees = [
        ((p, (1, 2)), {"alpha": None, "dim": [0, -1]}),
        [p, torch.Size([2, 3]), immutable_list([p, 1]), slice(1, None, 2), Pair(p, 2.5), torch.float32],
        {"d": _Registered(p, [p, 3])},
        (_SeenOnce((p, 1)),),
        p,
        7,
    ]
    for tree in trees:
        for ours, theirs in ((pytree.tree_flatten, flatten), (pytree.tree_flatten_with_dataclass, with_dataclass)):
            (leaves, spec), (their_leaves, their_spec) = ours(tree), theirs(tree)
            assert [type(x) for x in leaves] == [type(x) for x in their_leaves]
            assert all(x is y or x == y for x, y in zip(leaves, their_leaves, strict=True))
            assert repr(pytree.tree_unflatten(leaves, spec)) == repr(pytree.tree_unflatten(leaves, their_spec))
    for ours in (pytree.tree_flatten, pytree.tree_flatten_with_dataclass):
        with pytest.raises(TypeError, match="not supported"):
            ours(object())


def test_flattening_a_container_skips_thunders_type_check_and_rebuild(monkeypatch):
    """0.2.6 builds its set of supported types at every flatten (asking torch.distributed whether it is
    available), and rebuilds the tree with a Python callback per leaf before flattening it with dataclasses."""
    from thunder.core import pytree

    asked, mapped = [], []
    monkeypatch.setattr(torch.distributed, "is_available", lambda: asked.append(1) or True)
    tree_map = pytree.tree_map
    monkeypatch.setattr(pytree, "tree_map", lambda *a, **k: mapped.append(1) or tree_map(*a, **k))
    tree = ((1, 2.0), {"dim": [0, -1], "keepdim": None})
    assert pytree.tree_flatten(tree)[0] == pytree.tree_flatten_with_dataclass(tree)[0] == [1, 2.0, 0, -1, None]
    assert asked == [] and mapped == []


def test_thunderfx_decides_once_whether_thunder_runs_a_node(monkeypatch):
    """torch's split_module asks for each node's verdict up to three times in a graph that sets grad mode; each
    verdict runs the node's thunder symbol on fake tensors."""
    import thunder.dynamo.utils as dynamo_utils
    from thunder.dynamo import thunderfx

    asked = []
    original = dynamo_utils.try_execute_thunder_symbol

    def try_execute_thunder_symbol(symbol, node, *args, **kwargs):
        asked.append(node.name)
        return original(symbol, node, *args, **kwargs)

    monkeypatch.setattr(dynamo_utils, "try_execute_thunder_symbol", try_execute_thunder_symbol)

    def g(x):
        with torch.no_grad():
            y = x.sin() + 1
        return y * x

    x = torch.randn(3, requires_grad=True)
    torch.testing.assert_close(thunderfx(g)(x), g(x))
    assert asked and sorted(asked) == sorted(set(asked))


def test_thunderfx_decides_once_per_kind_of_node(monkeypatch):
    """Layers repeat the same operations on inputs of the same kinds: a node like one found supported (same target,
    constants, input shapes, dtypes, devices and grad requirement) shares its verdict; any difference asks again.
    (Sizes no other test uses: the verdicts a process found are kept.)"""
    import thunder.dynamo.utils as dynamo_utils
    from thunder.dynamo import thunderfx

    asked = []
    original = dynamo_utils.try_execute_thunder_symbol

    def try_execute_thunder_symbol(symbol, node, *args, **kwargs):
        asked.append(str(node.target))
        return original(symbol, node, *args, **kwargs)

    monkeypatch.setattr(dynamo_utils, "try_execute_thunder_symbol", try_execute_thunder_symbol)
    blocks = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.Linear(11, 11), torch.nn.SiLU()) for _ in range(3)))

    def g(x):
        y = blocks(x)
        return y.sin(), y.double().sin(), y[:, :5].sin()

    x = torch.randn(13, 11)
    with torch.no_grad():
        torch.testing.assert_close(thunderfx(g)(x), g(x))
    assert sum("linear" in target for target in asked) == 1
    assert sum("silu" in target for target in asked) == 1
    assert asked.count("sin") == 3  # float32 13x11, float64 13x11, float32 13x5


def _traced_with_many_subsymbols():
    """A computation trace whose bound symbols hold deep subsymbols (under symbolic values: size reads and
    broadcasting checks), with a symbol DCE must keep (a random number) among them."""

    def g(x, y):
        z = (x * y + x / 3).softmax(-1) - y.exp()
        return z + torch.rand_like(z), z.sum(0)

    jg = thunder.jit(g, cache="symbolic values")
    torch.testing.assert_close(jg(x := torch.randn(5, 4), y := torch.randn(4))[1], g(x, y)[1])
    return thunder.last_traces(jg)[0]


def _nodes(bsyms) -> int:
    return sum(1 + _nodes(b.subsymbols) for b in bsyms)


def test_dce_cleans_subsymbols_as_thunders_dce_does(monkeypatch):
    from thunder.core import transform_common

    def outline(bsyms):
        return [(b.sym.name, [p.name for p in b.flat_proxy_outs], outline(b.subsymbols)) for b in bsyms]

    ours = outline(transform_common.dce(_traced_with_many_subsymbols()).bound_symbols)
    original = _original_of(transform_common._remove_noop_subsymbols)
    monkeypatch.setattr(transform_common, "_remove_noop_subsymbols", original)
    assert ours == outline(transform_common.dce(_traced_with_many_subsymbols()).bound_symbols)


def test_dce_gathers_the_tags_of_each_subsymbol_a_bounded_number_of_times(monkeypatch):
    """0.2.6 gathered the tags of a bound symbol's whole tree for each of its subsymbols, at every depth."""
    from thunder.core import symbol, transform_common

    trace = _traced_with_many_subsymbols()
    gathered = []
    original = symbol.gather_tags

    def gather_tags(bsym):
        gathered.append(bsym)
        return original(bsym)

    monkeypatch.setattr(symbol, "gather_tags", gather_tags)
    transform_common.dce(trace)
    assert len(gathered) <= 4 * _nodes(trace.bound_symbols)


def test_dce_does_not_walk_a_trace_it_made_again(monkeypatch):
    """thunder.jit runs DCE on the computation trace, and transform_for_execution twice more on the same bound
    symbols."""
    from thunder.core import transform_common
    from thunder.core.trace import from_trace

    traced = _traced_with_many_subsymbols()
    walks = []
    original = transform_common.producers
    monkeypatch.setattr(transform_common, "producers", lambda trace: walks.append(trace) or original(trace))
    made = transform_common.dce(traced)
    again = transform_common.dce(transform_common.dce(made))
    assert len(walks) == 1
    assert [b.sym.name for b in again.bound_symbols] == [b.sym.name for b in made.bound_symbols]
    assert again.output is made.output

    # A trace DCE did not make, or whose bound symbols changed since: walked.
    copy = from_trace(made)
    copy.bound_symbols = list(made.bound_symbols)
    transform_common.dce(copy)
    assert len(walks) == 2
    *body, ret = again.bound_symbols
    again.bound_symbols = [*body, ret.from_bsym(args=(ret.args[0][1],))]  # returns z.sum(0) alone
    kept = transform_common.dce(again)
    assert len(walks) == 3
    produced = {out.name for bsym in kept.bound_symbols for out in bsym.flat_proxy_outs}
    assert ret.args[0][0].name not in produced and ret.args[0][1].name in produced


def _required_op_executor(required):
    """A torch.compile executor that fuses only around ``required`` (as torchcompile_cat and _xentropy do), on CPU."""
    from thunder.executors.torch_compile import TorchCompileExecutor
    from thunder.executors.torchex import ex as torch_ex
    from thunder.extend import ImplInfo

    ex = TorchCompileExecutor(name=f"test_compile_passes_{required}", required_ops={required})
    ex._implmap = {op: ImplInfo() for op in torch_ex.implmap}
    return ex


def test_a_fusion_executor_without_its_required_operations_leaves_the_trace_as_it_is(monkeypatch):
    from thunder.executors import data_dependent_partition

    partitions = []
    original = data_dependent_partition.fuse_bound_symbols
    monkeypatch.setattr(data_dependent_partition, "fuse_bound_symbols", lambda *a: partitions.append(a) or original(*a))
    x = torch.randn(3)
    for cache in ("constant values", "symbolic values"):
        jf = thunder.jit(f, cache=cache, executors=[_required_op_executor("torch.cos")])
        torch.testing.assert_close(jf(x), f(x))
        assert partitions == []
        assert "TorchCompile" not in str(thunder.last_traces(jf)[-1])
    jf = thunder.jit(f, executors=[_required_op_executor("torch.sin")])
    torch.testing.assert_close(jf(x), f(x))
    assert len(partitions) == 1
    assert "TorchCompile0" in str(thunder.last_traces(jf)[-1])


def test_a_meta_functions_signature_is_read_once(monkeypatch):
    """Every bound symbol binds its arguments to its meta function's signature; 0.2.6 built the signature at
    each binding."""
    import inspect

    read = []
    original = inspect.signature

    def signature(obj, *args, **kwargs):
        read.append(obj)
        return original(obj, *args, **kwargs)

    monkeypatch.setattr(inspect, "signature", signature)

    def g(x, y):
        return torch.nn.functional.softmax(x * y + x * 3, dim=-1)

    for _ in range(2):
        jg = thunder.jit(g)
        torch.testing.assert_close(jg(x := torch.randn(4, 3), y := torch.randn(4, 3)), g(x, y))
    mul = thunder.torch.mul.meta
    assert read.count(mul) <= 1


def test_a_call_passing_every_parameter_by_position_is_normalized_without_binding(monkeypatch):
    """Binding by the signature costs 15 us a call, and three calls in four pass every parameter by position:
    those are taken as they are. Every call normalizes as 0.2.6's normalize does."""
    import inspect

    from thunder.core.symbol import Symbol

    original = _original_of(Symbol.normalize)

    def meta(a, b, /, c, d=2, *, e=3):
        pass

    def varargs(a, *rest, f=1, **named):
        pass

    def positional(a, b, c=1):
        pass

    symbol, spread, plain = Symbol("mixed", meta), Symbol("varargs", varargs), Symbol("positional", positional)
    calls = [
        (plain, (1, 2, 3), {}),
        (plain, (1, 2), {}),
        (symbol, (1, 2, 3), {}),
        (symbol, (1, 2, 3, 4), {}),
        (symbol, (1, 2), {"c": 3}),
        (symbol, (1, 2, 3, 4), {"e": 5}),
        (spread, (1, 2, 3), {}),
        (spread, (1,), {"g": 4}),
    ]
    for sym, args, kwargs in calls:
        assert sym.normalize(*args, **kwargs) == original(sym, *args, **kwargs)
    bound = []
    original_bind = inspect.Signature.bind
    monkeypatch.setattr(inspect.Signature, "bind", lambda *a, **k: bound.append(1) or original_bind(*a, **k))
    assert plain.normalize(1, 2, 3) == ((1, 2, 3), {}) and bound == []


def test_the_interpreter_disassembles_a_function_once(monkeypatch):
    """The interpreter runs a frame from its code's instructions; 0.2.6 disassembled the code at every call.
    Only the interpreter's view of the dis module changes."""
    import dis

    import thunder.core.interpreter
    import thunder.core.jit_ext

    disassembled = []
    original = dis.get_instructions

    def get_instructions(x, **kwargs):
        disassembled.append(x)
        return original(x, **kwargs)

    monkeypatch.setattr(dis, "get_instructions", get_instructions)

    def add_one(x):
        return x + 1

    def g(x):
        for _ in range(5):
            x = add_one(x)
        return x

    torch.testing.assert_close(thunder.jit(g)(x := torch.randn(3)), g(x))
    assert disassembled.count(add_one.__code__) == 1
    assert thunder.core.interpreter.dis is not dis and thunder.core.jit_ext.dis is dis


def test_the_interpreter_reads_the_source_of_its_callers_frame_only(monkeypatch):
    """Each interpretation keeps its caller's frame; inspect.stack() read the source line of every frame on the
    stack (a hundred under Dynamo). The history still records the caller, and only the interpreter's view of
    the inspect module changes."""
    import inspect

    import thunder.core.interpreter
    from thunder.core.interpreter import interpret

    read = []
    original = inspect.getframeinfo
    monkeypatch.setattr(inspect, "getframeinfo", lambda frame, *rest: read.append(frame) or original(frame, *rest))

    def add_one(x):
        return x + 1

    def call_it(fn):
        return fn(2)

    interpreted = interpret(add_one, record_history=True)
    assert call_it(interpreted) == 3
    assert len(read) == 1 and read[0].f_code is call_it.__code__
    first_call = next(item for item in interpreted._last_interpreter_log if item["kind"] == "InterpreterCall")
    assert first_call["prev_frame"] == "call_it" and first_call["fn_filename"] == __file__
    view = thunder.core.interpreter.inspect
    assert view is not inspect and view.isclass is inspect.isclass


def test_printing_a_trace_outside_a_recording_pauses_nothing(monkeypatch):
    """Printing a trace pauses guard recording around each printed value (ten thousand a large trace); where
    no recording is under way there is nothing to pause, and the source is the same."""
    from thunder_symbolic.guards import recorder

    jf = thunder.jit(lambda x, y: (x + y).sum(dim=-1) * 2)
    jf(torch.randn(3, 4), torch.randn(3, 4))
    trace = thunder.last_traces(jf)[-1]
    expected = trace.python()
    pauses = []
    original = recorder.paused
    monkeypatch.setattr(recorder, "paused", lambda: pauses.append(1) or original())
    assert trace.python() == expected and pauses == []
    with recorder.recording():
        assert trace.python() == expected and pauses


def test_a_thunderfx_call_compiles_with_the_collector_paused(monkeypatch):
    """Dynamo's tracing and the split run inside the call; the collector's full collections scanned the whole
    heap there. It runs again after the call, also when the call raises."""
    import gc

    from thunder.dynamo import ThunderCompiler, thunderfx

    seen = []
    original = ThunderCompiler.__call__

    def backend(self, gm, sample_args):
        seen.append(gc.isenabled())
        return original(self, gm, sample_args)

    monkeypatch.setattr(ThunderCompiler, "__call__", backend)

    def g(x):
        if x.shape[0] > 4:
            raise ValueError("too long")
        return x.sin() * 2

    assert gc.isenabled()
    compiled = thunderfx(g)
    torch.testing.assert_close(compiled(x := torch.randn(3)), g(x))
    assert seen == [False] and gc.isenabled()
    with pytest.raises(ValueError, match="too long"):
        compiled(torch.randn(5))
    assert gc.isenabled()


def _unread_vmap_then_used_vmap(x):
    torch.vmap(torch.vmap(lambda r: r * 2))(x[None])  # transformers' mask functions nest vmaps; nothing reads this
    return x.sin() + torch.vmap(lambda r: r * 3)(x)


def test_a_vmap_region_that_nothing_reads_is_removed_before_thunderfx_splits():
    """Dynamo keeps a vmap region whose result nothing reads (entering a level is a side effect to FX), and
    thunderfx left it to Inductor as a region of its own, splitting thunder's region around it: here two
    Inductor regions and two thunder regions, now one Inductor region, for the vmap that is read."""
    from thunder.dynamo import thunderfx

    compiled = thunderfx(_unread_vmap_then_used_vmap)
    torch.testing.assert_close(compiled(x := torch.randn(3, 4)), _unread_vmap_then_used_vmap(x), rtol=0, atol=0)
    (info,) = compiled._backend.subgraph_infos
    assert [name for name, _ in info.split_graph_module.named_children()] == ["thunder_0", "inductor_1", "thunder_2"]


def _dynamo_graph(fn, *args) -> torch.fx.GraphModule:
    graphs = []

    def backend(gm, sample_args):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=backend, fullgraph=True)(*args)
    return graphs[0]


def test_removing_an_unread_vmap_region_keeps_the_others_and_what_they_read():
    """The vmap region that is read keeps its entering and leaving (FX's dead-code elimination would remove
    them: it counts the pre-dispatch vmap functions as pure), and the graph computes what the function does."""
    from thunder_symbolic.thunderfx import fx_vmap

    gm = _dynamo_graph(_unread_vmap_then_used_vmap, x := torch.randn(3, 4))
    assert len(fx_vmap.outermost_regions(gm.graph)) == 2
    assert fx_vmap.remove_unread_regions(gm) == 1
    assert len(fx_vmap.outermost_regions(gm.graph)) == 1
    assert fx_vmap.remove_unread_regions(gm) == 0
    torch.testing.assert_close(gm(x)[0], _unread_vmap_then_used_vmap(x), rtol=0, atol=0)


def test_a_vmap_region_that_writes_is_kept_though_nothing_reads_it():
    """A region whose computation writes in place outlives itself through what it wrote: it stays."""
    from thunder_symbolic.thunderfx import fx_vmap

    def writes(x, y):
        torch.vmap(lambda r, s: s.copy_(r * 2))(x, y)
        return y + 1

    gm = _dynamo_graph(writes, torch.randn(3, 4), torch.zeros(3, 4))
    assert len(fx_vmap.outermost_regions(gm.graph)) == 1
    assert fx_vmap.remove_unread_regions(gm) == 0 and len(fx_vmap.outermost_regions(gm.graph)) == 1
    x, y = torch.randn(3, 4), torch.zeros(3, 4)
    torch.testing.assert_close(gm(x, y)[0], x * 2 + 1, rtol=0, atol=0)


def test_the_dtensor_local_pass_copies_only_what_reads_a_rewritten_to_local(monkeypatch, one_rank_group):
    """The DTensor local executor's pass rewrites a to_local as the local tensor, so what reads its result is
    copied to read that instead; 0.2.6's way of copying (every bound symbol, with its subsymbols, once any
    to_local was rewritten) was most of the pass. A bound symbol that reads none stays the same object."""
    from torch.distributed.tensor import DeviceMesh, Replicate, Shard, distribute_tensor

    from thunder_symbolic.distributed import dtensor_local

    passes = []
    original = dtensor_local.executor.fusion_pass

    def fusion_pass(trace):
        passes.append((trace, original(trace)))
        return passes[-1][1]

    monkeypatch.setattr(dtensor_local.executor, "fusion_pass", fusion_pass)

    def g(x, w):
        local = torch.nn.functional.linear(x, w).to_local()
        return local.sin() * 2

    mesh = DeviceMesh("cpu", [0])
    x = distribute_tensor(torch.randn(3, 4), mesh, [Replicate()])
    w = distribute_tensor(torch.randn(8, 4), mesh, [Shard(0)])  # column-parallel: the local linear is the result
    torch.testing.assert_close(thunder.jit(g)(x, w), g(x, w))
    (before, after), *_ = passes
    names = {b.sym.name: b for b in before.bound_symbols}
    kept = [b for b in after.bound_symbols if any(b is k for k in before.bound_symbols)]
    assert {"dtensor_to_local", "sin", "mul"} <= set(names)
    assert names["mul"] in kept and names["sin"] not in kept
