"""The interpreter's shortcuts (see ``patches/core_interpreter.py``) keep what it computes: the same values and
provenance, the same errors and tracebacks, with fewer interpreted frames."""

import functools
import traceback
import types

import pytest
import torch

import thunder

SCALE = 3.0
ACTIVATION = torch.relu


def x():
    return torch.randn(3, 4)


def test_globals_subscripts_and_star_args_are_read_without_interpreting_a_frame():
    """0.2.6 interpreted `lambda d, k: d[k]` (and the `__getitem__` call it makes) for each global read (twice for
    a builtin), `obj.__getitem__(i)` for each subscript and `lambda seq, i: seq[i]` for each `*args` item:
    tracing a model ran thousands of such frames."""

    def f(t):
        pair = (ACTIVATION(t), t)
        scales = {"scale": SCALE}
        return torch.add(*pair) * pair[0] * scales["scale"] + abs(-2)

    jf = thunder.jit(f, debug_options=thunder.DebugOptions(record_interpreter_history=True))
    torch.testing.assert_close(jf(t := x()), f(t))
    frames = {entry["fn"] for entry in thunder.last_interpreter_log(jf) if isinstance(entry, dict) and "fn" in entry}
    assert any(frame.endswith("<locals>.f") for frame in frames)  # the log names frames
    helpers = ("globals_lookup.", "wrap_args_from_list.", "_binary_subscr_handler.")  # their lambdas and impls
    assert not [frame for frame in frames if frame.startswith(helpers)]


def test_tensor_methods_are_bound_and_called_without_interpreting_a_frame():
    """0.2.6 reached a tensor method (`t.float`) by emulating `object.__getattribute__` and interpreting
    `TensorProxy.__getattr__`, then called the partial it returns by interpreting a helper; the shortcut
    (`tensor_methods.py`) computes the same, across sizes with one program, partials of methods included."""

    def f(t):
        view = t.view
        scaled = functools.partial(t.float().add, alpha=3)
        return t.float().view(-1, 2).transpose(0, 1).sum() + view(2, -1).sum() + scaled(1.0).sum() * t.ndim

    jf = thunder.jit(f, cache="symbolic values")
    for n in (4, 6, 8):
        t = torch.arange(2 * n, dtype=torch.int64).reshape(2, n)
        torch.testing.assert_close(jf(t), f(t))
    assert thunder.cache_misses(jf) == 1
    logged = thunder.jit(f, debug_options=thunder.DebugOptions(record_interpreter_history=True))
    torch.testing.assert_close(logged(t), f(t))
    log = thunder.last_interpreter_log(logged)
    frames = [entry["fn"] for entry in log if isinstance(entry, dict) and entry.get("kind") == "InterpreterCall"]
    assert any(frame.endswith("<locals>.f") for frame in frames)
    assert "TensorProxy.__getattr__" not in frames
    assert frames.count("partial_call_lookaside.<locals>.partial_call_impl") == 1  # the user's own partial


def interpreted_functions(fn, *args) -> set[str]:
    """The functions whose lines the interpreter ran when tracing ``fn(*args)``."""
    logged = thunder.jit(fn, debug_options=thunder.DebugOptions(record_interpreter_history=True))
    torch.testing.assert_close(logged(*args), fn(*args))
    log = thunder.last_interpreter_log(logged)
    return {entry["fn"] for entry in log if isinstance(entry, dict) and entry.get("kind") == "Line"}


def test_methods_thunder_dispatches_for_dtensors_are_called_as_their_torch_functions():
    """thunder registers a Python dispatcher (DTensor or not) as the method `add`, `mul`, `reshape`, `transpose`,
    `exp`, `neg` and `reciprocal`; 0.2.6 interpreted it at each call (its `tree_flatten` too: tens of
    milliseconds a call, most of the inference benchmark's tracing), where `torch.mul(...)` runs it natively."""

    def f(t, u):
        s = t.mul(u).add(u, alpha=2).reshape(t.shape[1], -1).transpose(0, 1).exp().neg().reciprocal()
        return s + t.add(1.5).mul(2).neg()

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5, 7):
        torch.testing.assert_close(jf(t := torch.randn(2, n), u := torch.randn(2, n)), f(t, u))
    assert thunder.cache_misses(jf) == 1
    frames = interpreted_functions(f, t, u)
    assert any(frame.endswith("<locals>.f") for frame in frames)
    assert not [frame for frame in frames if "dispatch_to_impl" in frame or frame == "tree_flatten"]


def test_reading_numel_interprets_no_import():
    """`t.numel()` reads the attribute through thunder's `TensorProxy.__getattr__`, whose patch looks up (once,
    natively) which upstream functions compare the attribute with a number; the jit interpreted that lookup, its
    imports included, at every read (about 0.4 s)."""

    def f(t):
        return t * t.numel()

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5):
        torch.testing.assert_close(jf(t := torch.randn(2, n)), f(t))
    assert thunder.cache_misses(jf) == 1
    frames = interpreted_functions(f, t)
    assert any(frame.endswith("<locals>.f") for frame in frames)
    assert not [frame for frame in frames if frame in ("_numel_comparers", "import_module", "_gcd_import")]


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)
        self.act = torch.nn.ReLU()

    def forward(self, t):
        return self.act(self.linear(t)) * t.shape[0]


def test_a_module_call_without_hooks_is_traced_as_its_forward():
    """0.2.6 interpreted torch's `Module._wrapped_call_impl` and `_call_impl` at every module call (eight hook
    dicts read and tested with an interpreted `bool`): about a third of a small decoder's tracing."""
    model = Scaled()
    jm = thunder.jit(model, cache="symbolic values")
    with torch.no_grad():
        for n in (2, 3, 5):
            torch.testing.assert_close(jm(t := torch.randn(n, 4)), model(t))
    assert thunder.cache_misses(jm) == 1
    frames = interpreted_functions(model, t)
    assert {"Scaled.forward", "Linear.forward", "ReLU.forward"} <= frames
    assert not frames & {"Module._call_impl", "Module._wrapped_call_impl"}


@pytest.mark.parametrize("where", ["module", "global"])
def test_a_module_with_hooks_when_traced_runs_them(where):
    model = Scaled()

    def hook(module, args, output):
        return output + 100.0 if isinstance(module, torch.nn.ReLU) else output

    register = (
        model.act.register_forward_hook if where == "module" else torch.nn.modules.module.register_module_forward_hook
    )
    handle = register(hook)
    try:
        jm = thunder.jit(model, cache="symbolic values")
        with torch.no_grad():
            for n in (2, 3):
                torch.testing.assert_close(jm(t := torch.randn(n, 4)), model(t))
        assert thunder.cache_misses(jm) == 1
        assert "Module._call_impl" in interpreted_functions(model, t)
    finally:
        handle.remove()


def test_a_forward_replaced_after_jitting_is_traced_again():
    model = Scaled()
    jm = thunder.jit(model, cache="symbolic values")
    torch.testing.assert_close(jm(t := torch.randn(2, 4)), model(t))
    model.act.forward = lambda t: t - 1.0
    torch.testing.assert_close(jm(t), model(t))
    assert thunder.cache_misses(jm) == 2


class WithMembers(Scaled):
    def __init__(self):
        super().__init__()
        self.register_buffer("offset", torch.ones(4))
        self.scale = 2.0

    def forward(self, t):
        t = super().forward(t) * self.scale + self.offset
        return t + getattr(self, "extra", 0.0)


def test_a_module_member_is_read_without_interpreting_torchs_getattr():
    """0.2.6 interpreted torch's `Module.__getattr__` for every parameter, buffer and submodule read (`self.linear`),
    its membership tests included (each test of `self.__dict__` wrapping and checking every attribute of the
    module): a quarter of a small decoder's tracing. What the program reads stays checked."""
    model = WithMembers()
    jm = thunder.jit(model, cache="symbolic values")
    with torch.no_grad():
        for n in (2, 3):
            torch.testing.assert_close(jm(t := torch.randn(n, 4)), model(t))
        assert thunder.cache_misses(jm) == 1
        assert "Module.__getattr__" not in interpreted_functions(Scaled(), t)  # (a missing `extra` runs it)
        model.offset = torch.zeros(4)
        model.linear = torch.nn.Linear(4, 4)
        model.scale = 3.0
        torch.testing.assert_close(jm(t), model(t))
        model.extra = 5.0
        torch.testing.assert_close(jm(t), model(t))


def test_a_missing_module_member_raises_torchs_error():
    class Missing(Scaled):
        def forward(self, t):
            return self.linear(t) * self.not_a_member

    with pytest.raises(AttributeError, match="'Missing' object has no attribute 'not_a_member'"):
        thunder.jit(Missing())(torch.randn(2, 4))


class Scaler:
    def __init__(self, factor):
        self.factor = factor

    def scale(self, t, *, bias=0.0):
        return t * self.factor + bias


def test_a_bound_method_is_called_without_interpreting_a_helper():
    """0.2.6 called a bound method object (`method = obj.method; method(...)`, a module's `self.forward`) by
    interpreting `lambda fn, *a, **k: fn.__func__(fn.__self__, *a, **k)` (its argument list and keyword dict
    rebuilt by interpreted opcodes): about a sixth of a small decoder's tracing. The method's function and
    instance are read as that helper read them: replacing the method is seen."""
    scaler = Scaler(2.0)

    def f(t):
        method = scaler.scale
        return method(t, bias=1.0) + t.shape[0]

    jf = thunder.jit(f, cache="symbolic values")
    for n in (2, 3):
        torch.testing.assert_close(jf(t := torch.randn(n, 4)), f(t))
    assert thunder.cache_misses(jf) == 1
    assert "_call_dispatch.<locals>._impl" not in interpreted_functions(f, t)
    scaler.scale = types.MethodType(lambda self, t, bias: t - bias, scaler)
    torch.testing.assert_close(jf(t), f(t))
    scaler = Scaler(5.0)  # (f reads the global again)
    torch.testing.assert_close(jf(t), f(t))


def test_what_a_tensor_defines_or_thunder_special_cases_is_read_as_before():
    def f(t):
        return t.float() * t.numel() + t.shape[0] + t.mT.sum() + getattr(t, "not_an_attribute", 2)

    jf = thunder.jit(f, cache="symbolic values")
    for n in (3, 5):
        torch.testing.assert_close(jf(t := torch.randn(2, n)), f(t))
    with pytest.raises(AttributeError, match="not_a_method"):
        thunder.jit(lambda t: t.not_a_method())(x())


def test_a_failed_subscript_raises_what_python_raises():
    def f(t, i):
        try:
            t = t * (1.0, 2.0)[i]
        except IndexError:
            t = t - 1
        return t * {"a": 2.0}["a"] + {"a": 1.0}["b"]

    with pytest.raises(KeyError, match="'b'"):
        thunder.jit(f)(x(), 5)
    with pytest.raises(KeyError, match="'b'"):
        f(x(), 5)

    def g(t, i):
        try:
            return t * (1.0, 2.0)[i]
        except IndexError:
            return t - 1

    jg = thunder.jit(g)
    for i in (1, 5, -2):
        torch.testing.assert_close(jg(t := x(), i), g(t, i))


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_a_global_rebound_between_calls_is_read_again(cache):
    global SCALE

    def f(t):
        return t * SCALE

    jf = thunder.jit(f, cache=cache)
    try:
        for scale in (3.0, 5.0, 3.0):
            SCALE = scale
            torch.testing.assert_close(jf(t := x()), f(t))
    finally:
        SCALE = 3.0


def test_a_missing_global_is_still_a_name_error():
    def f(t):
        return t + NOT_DEFINED_ANYWHERE  # noqa: F821

    with pytest.raises(NameError, match="NOT_DEFINED_ANYWHERE"):
        thunder.jit(f)(x())


def raises_after_a_loop(t, which):
    for _ in range(2):  # the loop ends with a StopIteration raised in interpreted code
        t = t + 1
    if which == "key":
        raise KeyError("from the first raise")
    raise LookupError("from the second raise")


def test_tracebacks_of_interpreted_code_point_at_the_raising_line():
    """Stand-in frames are shared per position; each traceback still ends at its own line."""
    lines = {}
    for which, error in (("key", KeyError), ("lookup", LookupError), ("key", KeyError)):
        with pytest.raises(error) as info:
            thunder.jit(raises_after_a_loop)(x(), which)
        user = [fr for fr in traceback.extract_tb(info.value.__traceback__) if fr.name == "raises_after_a_loop"]
        assert user, "the traceback lost the user's frame"
        lines.setdefault(which, set()).add(user[-1].line)
    assert lines == {
        "key": {'raise KeyError("from the first raise")'},
        "lookup": {'raise LookupError("from the second raise")'},
    }
