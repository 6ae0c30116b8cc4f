"""A cached entry's prologue compiled into one function accepts exactly the calls thunder's prologue accepts.

Each program is compiled once; then every probe (same kind of call, and calls that must be rejected:
another dtype, rank, grad mode, default dtype, aliasing, Python value...) is put to both the compiled
check and thunder's own prologue, run as thunder's path runs it. They must agree, and agree on what the
computation receives. The compiled check's tensor part is learned from the first accepted tensors
(torch's C++ tensor guard); the probes run after it learned, so both of its paths are compared.
"""

import contextlib

import pytest
import torch
from thunder.core import compile_data as compile_data_module

import thunder
from thunder_symbolic.guards.compiled_prologue import compile_prologue
from thunder_symbolic.runtime import dispatch


def _functions(jf, entry):
    token = compile_data_module._compile_data.set((thunder.compile_data(jf), thunder.compile_stats(jf)))
    try:
        return dispatch._hit_functions(entry)
    finally:
        compile_data_module._compile_data.reset(token)


def thunders_verdict(jf, prologue, args, kwargs):
    """What thunder's prologue returns for this call (None when a check fails), with the cache information
    and compile data thunder's path publishes."""
    cache_info = dispatch._cache_info(torch.is_grad_enabled(), True, args, kwargs)
    token = thunder._cache_info_ctx.set(cache_info)
    data_token = compile_data_module._compile_data.set((thunder.compile_data(jf), thunder.compile_stats(jf)))
    try:
        return prologue(*args, **kwargs)
    except Exception:  # noqa: BLE001  (any failing check: "not this entry", as thunder's path reads it)
        return None
    finally:
        compile_data_module._compile_data.reset(data_token)
        thunder._cache_info_ctx.reset(token)


def compiled_verdict(accept, args, kwargs):
    try:
        return accept(args, kwargs)
    except Exception:  # noqa: BLE001  (as the short path reads it)
        return None


def same_result(a, b) -> bool:
    if a is None or b is None:
        return a is b
    flat_a, flat_b = thunder.core.pytree.tree_flatten(a)[0], thunder.core.pytree.tree_flatten(b)[0]
    return len(flat_a) == len(flat_b) and all(x is y for x, y in zip(flat_a, flat_b))


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 3)
        self.norm = torch.nn.LayerNorm(3)
        self.scale, self.act = 0.5, torch.relu

    def forward(self, x):
        return self.act(self.norm(self.lin(x))) * self.scale


class Tied(torch.nn.Module):
    """An embedding and a head sharing one weight, as GPT-2's ``lm_head.weight`` is ``wte.weight``."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(self.embed(ids))


def masked(x, mask, dtype, act):
    if mask is not None:
        x = x.masked_fill(mask, 0.0)
    return act(x.to(dtype))


def branchy(x, n):
    if x.shape[0] > 4:
        return x[:n] * 2
    return x - n


def scaled_by(x, s: float):
    return x * s


def two(a, b):
    return a + b


def _rand(*shape, **kwargs):
    return torch.randn(*shape, **kwargs)


_SHARED = _rand(4)

# (name, program factory, the call that compiles, probes: (label, args, kwargs, context))
CASES = [
    (
        "elementwise",
        lambda: lambda x: x * 2 + 1,
        ((_rand(3, 4),), {}),
        [
            ("another size", (_rand(5, 4),), {}, None),
            ("a view", (_rand(6, 8)[::2, :4],), {}, None),
            ("float64", (_rand(3, 4, dtype=torch.float64),), {}, None),
            ("rank 3", (_rand(3, 4, 1),), {}, None),
            ("requires grad", (_rand(3, 4, requires_grad=True),), {}, None),
            ("a Parameter", (torch.nn.Parameter(_rand(3, 4)),), {}, None),
            ("an int", (3,), {}, None),
            ("two arguments", (_rand(3, 4), _rand(3, 4)), {}, None),
            ("a keyword", (), {"x": _rand(3, 4)}, None),
            ("inference tensor", (torch.inference_mode()(_rand)(3, 4),), {}, torch.inference_mode),
            ("grad mode", (_rand(3, 4),), {}, torch.enable_grad),
            ("default dtype", (_rand(3, 4),), {}, lambda: _default_dtype(torch.float64)),
            ("device mode", (_rand(3, 4),), {}, lambda: torch.device("meta")),
        ],
    ),
    (
        "size branch and int",
        lambda: branchy,
        ((_rand(8, 2), 3), {}),
        [
            ("other sizes", (_rand(6, 2), 5), {}, None),
            ("other side of the branch", (_rand(3, 2), 1), {}, None),
            ("a float for the int", (_rand(8, 2), 3.0), {}, None),
            ("a bool for the int", (_rand(8, 2), True), {}, None),
            ("static dim changed", (_rand(8, 3), 3), {}, None),
        ],
    ),
    (
        "python values",
        lambda: masked,
        ((_rand(3, 4), None, torch.float32, torch.relu), {}),
        [
            ("same kinds", (_rand(5, 4), None, torch.float32, torch.relu), {}, None),
            ("a mask", (_rand(3, 4), _rand(3, 4) > 0, torch.float32, torch.relu), {}, None),
            ("another dtype", (_rand(3, 4), None, torch.float64, torch.relu), {}, None),
            ("another callable", (_rand(3, 4), None, torch.float32, torch.tanh), {}, None),
        ],
    ),
    (
        "float pinned by value",
        lambda: scaled_by,
        ((_rand(3), 0.5), {}),
        [
            ("same float", (_rand(4), 0.5), {}, None),
            ("another float", (_rand(4), 0.25), {}, None),
            ("negative zero", (_rand(4), -0.0), {}, None),
            ("an int", (_rand(4), 1), {}, None),
        ],
    ),
    (
        "aliasing",
        lambda: two,
        ((_rand(4), _rand(4)), {}),
        [
            ("distinct", (_rand(4), _rand(4)), {}, None),
            ("the same tensor twice", (_SHARED, _SHARED), {}, None),
            ("another rank", (_rand(4), _rand(2, 4)), {}, None),
        ],
    ),
    (
        "module",
        lambda: Scaled().eval(),
        ((_rand(2, 4),), {}),
        [
            ("another batch", (_rand(7, 4),), {}, None),
            ("another width", (_rand(2, 5),), {}, None),
            ("attribute changed", (_rand(2, 4),), {}, "scale"),
            ("training", (_rand(2, 4),), {}, "train"),
            ("parameter frozen", (_rand(2, 4),), {}, "freeze"),
        ],
    ),
    (
        "tied weights",
        lambda: Tied().eval(),
        ((torch.tensor([[1, 2, 3]]),), {}),
        [
            ("another length", (torch.tensor([[4, 5]]),), {}, None),
            ("untied", (torch.tensor([[4, 5]]),), {}, "untie"),
            ("untied, same sizes", (torch.tensor([[1, 2, 3]]),), {}, "untie"),
            ("int32 ids", (torch.tensor([[1, 2]], dtype=torch.int32),), {}, None),
        ],
    ),
]


@contextlib.contextmanager
def _default_dtype(dtype):
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


@contextlib.contextmanager
def _module_change(program, change):
    if change == "scale":
        program.scale = 0.25
    elif change == "train":
        program.train()
    elif change == "freeze":
        program.lin.weight.requires_grad_(False)
    elif change == "untie":
        program.head.weight = torch.nn.Parameter(program.embed.weight.detach().clone())
    try:
        yield
    finally:
        if change == "untie":
            program.head.weight = program.embed.weight
        else:
            program.scale = 0.5
            program.eval()
            program.lin.weight.requires_grad_(True)


@pytest.mark.parametrize("name, make, first, probes", CASES, ids=[case[0] for case in CASES])
def test_compiled_prologue_agrees_with_thunders(name, make, first, probes):
    program = make()
    jf = thunder.jit(program, cache="symbolic values")
    with torch.no_grad():
        jf(*first[0], **first[1])
        (entry,) = thunder.compile_stats(jf).interpreter_cache
        accept, prologue, _, _ = _functions(jf, entry)
        assert accept is not None, f"{name}: the prologue was not compiled"
        assert same_result(compiled_verdict(accept, *first), thunders_verdict(jf, prologue, *first))
        verdicts = []
        for label, args, kwargs, context in probes:
            if isinstance(context, str):
                manager = _module_change(program, context)
            else:
                manager = context() if context is not None else contextlib.nullcontext()
            with manager:
                expected = thunders_verdict(jf, prologue, args, kwargs)
                got = compiled_verdict(accept, args, kwargs)
            assert same_result(got, expected), (
                f"{name}, {label}: thunder {expected is not None}, compiled {got is not None}"
            )
            verdicts.append(expected is not None)
        assert any(verdicts) and not all(verdicts), "the probes must include accepted and rejected calls"


def test_a_prologue_with_cache_information_it_does_not_know_is_not_compiled():
    jf = thunder.jit(lambda x: x @ x, cache="symbolic values")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        jf(torch.randn(3, 3))  # the prologue checks autocast's dtypes, which the short path never sees
    (entry,) = thunder.compile_stats(jf).interpreter_cache
    prologue = dispatch.thunder_prologue(entry.prologue_fn)
    assert "autocast" in str(entry.prologue_traces[-1])
    assert compile_prologue(entry.prologue_traces[-1], prologue, default_device=None, alias_groups=None) is None


def test_calls_through_the_compiled_prologue_match_eager_and_reuse_the_program():
    module = Scaled().eval()
    jm = thunder.jit(module, cache="symbolic values")
    with torch.no_grad():
        for n in (2, 3, 5, 3):
            x = torch.randn(n, 4)
            torch.testing.assert_close(jm(x), module(x))
        module.scale = 2.0  # a Python attribute read by forward: the compiled check rejects, thunder recompiles
        x = torch.randn(4, 4)
        torch.testing.assert_close(jm(x), module(x))
        with torch.inference_mode():  # inference tensors: the learned tensor guard rejects, the trace's checks accept
            x = torch.randn(6, 4)
            torch.testing.assert_close(jm(x), module(x))
    assert thunder.cache_misses(jm) == 2
    assert thunder.cache_hits(jm) == 4


def test_a_tied_weight_keeps_the_tensor_check_in_cpp():
    """torch's tensor guard rejects a tensor passed twice; the compiled check passes it once and checks the
    repeat is the same tensor, so a model with tied weights does not run the Python checks on every call."""
    module = Tied().eval()
    jm = thunder.jit(module, cache="symbolic values")
    with torch.no_grad():
        for n in (3, 4, 5, 4, 3):
            ids = torch.arange(n).reshape(1, n)
            torch.testing.assert_close(jm(ids), module(ids))
        (entry,) = thunder.compile_stats(jm).interpreter_cache
        accept = _functions(jm, entry)[0]
        for n in (3, 4, 5):
            assert compiled_verdict(accept, (torch.arange(n).reshape(1, n),), {}) is not None
        checks = accept.__globals__["_learn"].__self__
        assert checks.learned == 1, "the tensor check was relearned: it rejected the tied weight"
        module.head.weight = torch.nn.Parameter(torch.randn(10, 4))  # untied: the program takes both
        ids = torch.tensor([[1, 2]])
        torch.testing.assert_close(jm(ids), module(ids))
    assert thunder.cache_misses(jm) == 1
