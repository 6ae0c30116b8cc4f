"""The short call path for cache hits under symbolic values: same checks, same results, thunder's stats;
a miss compiles with Python's cyclic collector paused."""

import gc
import sys

import pytest
import torch
from thunder.core.pytree import tree_flatten

import thunder
import thunder_symbolic
from thunder_symbolic.runtime import gc_pause
from thunder_symbolic.runtime.dispatch import alias_groups
from thunder_symbolic.testing import check_against_eager


def thunder_alias_groups(args, kwargs):
    """thunder 0.2.6's definition, restated: argument tensors grouped by storage, in flattening order."""
    flat, _ = tree_flatten((args, kwargs))
    groups = {}
    for i, t in enumerate(flat):
        if type(t) is torch.Tensor and t.layout is torch.strided:
            groups.setdefault(t.untyped_storage().data_ptr(), []).append(i)
    return "-".join(",".join(map(str, g)) for g in groups.values() if len(g) > 1)


@pytest.mark.parametrize(
    "make_args",
    [
        lambda a, b: ((a, b), {}),
        lambda a, b: ((a, a[1:], b, a.view(-1)), {}),
        lambda a, b: ((None, a, 3, a), {}),
        lambda a, b: (([a, b], a), {"c": b}),
        lambda a, b: ((a, 2.0, True, b[0]), {}),
        lambda a, b: ((a, torch.float32, torch.relu, {"scale": 2.0}), {}),
        lambda a, b: ((a, torch.float32, torch.relu, {"again": a[0]}), {}),
        lambda a, b: ((torch.nn.Parameter(a), a, a[1:], torch.nn.Parameter(b), b), {}),
    ],
    ids=[
        "distinct",
        "views",
        "none-shifts-indices",
        "nested-and-kwargs",
        "numbers",
        "one-tensor",
        "dict-view",
        "parameters",
    ],
)
def test_alias_groups_match_thunders_definition(make_args):
    args, kwargs = make_args(torch.randn(4, 3), torch.randn(2))
    assert alias_groups(args, kwargs) == thunder_alias_groups(args, kwargs)


def test_hits_are_counted_and_traces_reported():
    jf = thunder.jit(lambda x: x * 2, cache="symbolic values")
    for n in (3, 4, 5):
        jf(torch.randn(n))
    assert (thunder.cache_misses(jf), thunder.cache_hits(jf)) == (1, 2)
    assert thunder.compile_stats(jf).calls == 3
    assert "computation" in str(thunder.last_traces(jf)[-1])


def test_aliased_inputs_are_told_apart_from_distinct_ones():
    def f(a, b):
        a.add_(1)
        return b * 2

    x = torch.zeros(4)
    jf = thunder.jit(f, cache="symbolic values")
    distinct = jf(torch.zeros(4), torch.zeros(4))
    aliased = jf(x, x)  # b sees a's in-place update only when they alias
    torch.testing.assert_close(distinct, torch.zeros(4))
    torch.testing.assert_close(aliased, torch.full((4,), 2.0))
    assert thunder.cache_misses(jf) == 2


def test_grad_mode_is_restored_and_respected():
    jf = thunder.jit(lambda x: x * 2, cache="symbolic values")
    x = torch.randn(3, requires_grad=True)
    with torch.no_grad():
        jf(torch.randn(3))
        jf(torch.randn(4))
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled()
    y = jf(x)  # needs a backward: thunder's own path
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 2.0))


def test_autocast_takes_thunders_path():
    jf = thunder.jit(lambda x, w: x @ w, cache="symbolic values")
    w = torch.randn(4, 4)
    plain = jf(torch.randn(3, 4), w)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = jf(torch.randn(3, 4), w)
    assert plain.dtype == torch.float32 and cast.dtype == torch.bfloat16
    assert thunder.cache_misses(jf) == 2


def test_modules_take_the_short_path():
    model = torch.nn.Linear(4, 2)
    with torch.no_grad():
        check_against_eager(model, [(torch.randn(n, 4),) for n in (2, 3, 5)], compiles=1)


def _counting_prologues(jfn):
    """Wrap every cached prologue of ``jfn`` to count how many run; returns the counter."""
    calls = {"prologues": 0}
    entries = jfn._lc_cs.interpreter_cache

    def counted(prologue):
        def prologue_fn(*args, **kwargs):
            calls["prologues"] += 1
            return prologue(*args, **kwargs)

        return prologue_fn

    for i, entry in enumerate(entries):
        list.__setitem__(entries, i, entry._replace(prologue_fn=counted(entry.prologue_fn)))
    return calls


def test_a_function_with_several_programs_runs_the_prologue_that_accepted_the_same_sizes():
    def repeat_by_size(x):
        for _ in range(x.shape[0]):
            x = x * 2
        return x

    inputs = [(torch.randn(n, 4),) for n in (1, 2, 3)]
    jfn = check_against_eager(repeat_by_size, inputs, compiles=3)
    calls = _counting_prologues(jfn)
    for turn in range(3):
        for (x,) in inputs:
            torch.testing.assert_close(jfn(x), repeat_by_size(x))
        if turn == 0:  # newest first: 3 + 2 + 1 prologues; the accepting ones are remembered
            assert calls["prologues"] == 6
            calls["prologues"] = 0
    assert calls["prologues"] == 6  # then one per call


def test_a_hint_is_only_a_hint_the_prologue_decides():
    """The same key (the dict's identity) with other contents: the hinted program rejects the call."""

    def scaled(x, cfg):
        return x + cfg["bias"] if "bias" in cfg else x * 2

    jfn = thunder.jit(scaled, cache="symbolic values")
    cfg, x = {}, torch.randn(3, 4)
    torch.testing.assert_close(jfn(x, cfg), x * 2)
    cfg["bias"] = 1.0
    torch.testing.assert_close(jfn(x, cfg), x + 1.0)
    for _ in range(2):
        del cfg["bias"]
        torch.testing.assert_close(jfn(x, cfg), x * 2)
        cfg["bias"] = 1.0
        torch.testing.assert_close(jfn(x, cfg), x + 1.0)
    assert thunder.cache_misses(jfn) == 2


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_failing_tensor_and_number_checks_keep_thunders_verdict_and_message(cache):
    def scaled(x, n):
        return x * n

    jfn = thunder.jit(scaled, cache=cache)
    x = torch.randn(3, 2)
    for args in [(x, 2), (x.double(), 2), (x, 2.0), (x.requires_grad_(False)[:, :1], 2)]:
        torch.testing.assert_close(jfn(*args), scaled(*args))
    reasons = " ".join(str(m) for m in thunder_symbolic.recompile_reasons(jfn))
    assert "expected tensor with" in reasons and "torch.float64" in reasons  # thunder's own message
    assert thunder.cache_misses(jfn) == (4 if cache == "constant values" else 3)


def test_sigmoid_runs_as_one_torch_call_and_matches_eager():
    def f(x):
        return torch.sigmoid(x) * x

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5):
        x = torch.randn(n, 4, requires_grad=True)
        out = jf(x)
        out.sum().backward()
        grad, x.grad = x.grad, None
        f(x).sum().backward()
        torch.testing.assert_close(out, f(x))
        torch.testing.assert_close(grad, x.grad)
    with torch.no_grad():
        torch.testing.assert_close(jf(torch.arange(4)), f(torch.arange(4)))  # an int tensor: a float result
        computation = str(thunder.last_traces(jf)[-1])
    assert "torch.sigmoid(" in computation and "torch.exp(" not in computation
    assert thunder.cache_misses(jf) == 2  # the backward program, and the no-grad one for an int tensor


def _compiling() -> bool:
    frame = sys._getframe()
    while frame is not None:
        if frame.f_code.co_name in ("acquire_initial_trace", "apply_transforms_and_build_cache_entry"):
            return True
        frame = frame.f_back
    return False


@pytest.fixture
def collections():
    """For each collection of Python's cyclic collector, whether thunder was compiling; with a threshold low
    enough that a compile would trigger many."""
    seen = []
    threshold = gc.get_threshold()

    def record(phase, info):
        if phase == "start":
            seen.append(_compiling())

    gc.set_threshold(50)
    gc.callbacks.append(record)
    try:
        yield seen
    finally:
        gc.callbacks.remove(record)
        gc.set_threshold(*threshold)


def test_a_compile_runs_without_cyclic_collections_and_the_collector_resumes(collections):
    jfn = thunder.jit(lambda x: (x * 2).sin().sum(0) + x.shape[0], cache="symbolic values")
    jfn(torch.randn(3, 4))  # a miss: compiles
    assert thunder.cache_misses(jfn) == 1 and True not in collections and gc.isenabled()
    count = len(collections)
    [torch.randn(2) for _ in range(200)]  # the collector runs again
    assert len(collections) > count


def test_pausing_collections_is_reentrant_and_keeps_a_disabled_collector_disabled():
    with gc_pause.paused():
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_pause.paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
