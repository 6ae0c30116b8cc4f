"""Every input and every piece of Python state a program read is checked before the program is reused.

Each case changes a non-tensor input between calls (None or a value, containers, dtypes, callables,
floats, enums, globals, module attributes) and is held to eager PyTorch call by call, with the compile
count, under both cache options: these gaps were thunder 0.2.6's prologue's, shared by both.
"""

import collections
import contextvars
import copy
import enum
import functools
import math
import os
import random
import re
import time
import types
import weakref

import pytest
import torch
from torch import nn

import thunder
from thunder.core.interpreter import ProvenanceRecord, PseudoInst

import thunder_symbolic
from thunder_symbolic.guards.values import SideEffectError, UncheckableValueError, ValueGuards
from thunder_symbolic.testing import check_against_eager, run_python

CACHES = pytest.mark.parametrize("cache", ["symbolic values", "constant values"])


def x(rows=3):
    return torch.randn(rows, 4)


class Color(enum.Enum):
    RED = 1
    BLUE = 2


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


# --- Arguments ----------------------------------------------------------------------------------------


@CACHES
def test_optional_number(cache):
    def f(t, n):
        if n is None:
            return t * 2
        return t + n

    # Constant values pins the int too: 3 and 5 are two programs there.
    compiles = 2 if cache == "symbolic values" else 3
    jf = check_against_eager(f, [(x(), None), (x(), 3), (x(), None), (x(), 5)], cache=cache, compiles=compiles)
    if cache == "symbolic values":
        reasons = str(thunder_symbolic.recompile_reasons(jf)[0])
        assert "guard n is None failed (recorded at argument n)" in reasons


@CACHES
def test_optional_tensor_mask(cache):
    def f(t, mask=None):
        if mask is not None:
            t = t.masked_fill(mask, 0.0)
        return t.softmax(-1)

    masks = [torch.rand(3, 4) > 0.5 for _ in range(2)]
    args = [(x(), None), (x(), masks[0]), (x(), None), (x(), masks[1])]
    check_against_eager(f, args, cache=cache, compiles=2)


@CACHES
def test_tuple_of_ints_of_changing_length(cache):
    def f(t, sizes):
        return t * len(sizes) + sizes[0] * sizes[-1]

    args = [(x(), (1, 2)), (x(), (1, 2, 3)), (x(), (4, 5))]
    check_against_eager(f, args, cache=cache, compiles=2 if cache == "symbolic values" else 3)


def test_builtins_see_the_container_of_proxies():
    def f(t, sizes, cfg):
        return t * sum(sizes) + max(cfg.values())

    args = [(x(), (1, 2), {"a": 1.0}), (x(), (4, 5), {"a": 3.0}), (x(), [4, 5], {"a": 3.0})]
    check_against_eager(f, args, compiles=2)  # sum stays symbolic; a list is not a tuple


@CACHES
def test_list_of_tensors_of_changing_length(cache):
    def f(ts):
        out = ts[0]
        for t in ts[1:]:
            out = out + t
        return out

    check_against_eager(f, [([x(), x()],), ([x(), x(), x()],), ([x(), x()],)], cache=cache, compiles=2)


@CACHES
def test_dict_with_an_optional_key(cache):
    def f(t, cfg):
        if "bias" in cfg:
            return t * cfg["scale"] + cfg["bias"]
        return t * cfg["scale"]

    args = [(x(), {"scale": 2.0}), (x(), {"scale": 2.0, "bias": 1.0}), (x(), {"scale": 3.0})]
    check_against_eager(f, args, cache=cache, compiles=2 if cache == "symbolic values" else 3)


@CACHES
def test_dict_keys_with_quotes(cache):
    """The prologue's check of the keys prints them: one whose repr is in double quotes ("it's") made a prologue
    that did not compile (transformers' registry of classes, keyed by their reprs, is such a dict)."""

    def f(t, cfg):
        return t * cfg["it's"] + cfg.get('say "hi"', 0.0)

    args = [(x(), {"it's": 2.0}), (x(), {"it's": 3.0, 'say "hi"': 1.0}), (x(), {"it's": 4.0})]
    jf = check_against_eager(f, args, cache=cache, compiles=2 if cache == "symbolic values" else 3)
    if cache == "symbolic values":
        reasons = str(thunder_symbolic.recompile_reasons(jf)[0])
        assert """guard type(cfg) is dict and list(cfg) == ["it's"] failed (recorded at argument cfg)""" in reasons


@CACHES
def test_kwargs_whose_keys_change(cache):
    def f(t, **kwargs):
        if "bias" in kwargs:
            return t + kwargs["bias"]
        return t * 2

    args = [{"args": (x(),)}, {"args": (x(),), "kwargs": {"bias": 1.0}}, {"args": (x(),), "kwargs": {"scale": 1.0}}]
    check_against_eager(f, args, cache=cache, compiles=3)


@CACHES
def test_dtype_argument(cache):
    def f(t, dtype):
        return t.to(dtype) * 2

    args = [(x(), torch.float64), (x(), torch.float16), (x(), torch.float64)]
    check_against_eager(f, args, cache=cache, compiles=2)


@CACHES
def test_callable_argument(cache):
    def f(t, act):
        return act(t) + 1

    args = [(x(), torch.relu), (x(), torch.tanh), (x(), torch.relu)]
    check_against_eager(f, args, cache=cache, compiles=2)


@CACHES
def test_enum_and_int_enum_arguments(cache):
    def f(t, color, level):
        t = t * 2 if color is Color.RED else t - 1
        return t * level if level == Level.HIGH else t

    args = [(x(), Color.RED, Level.LOW), (x(), Color.BLUE, Level.LOW), (x(), Color.RED, Level.HIGH)]
    check_against_eager(f, args, cache=cache, compiles=3)


@CACHES
def test_slice_argument(cache):
    def f(t, s):
        return t[s] * 2

    check_against_eager(f, [(x(), slice(0, 2)), (x(), slice(1, 3)), (x(), slice(0, 2))], cache=cache, compiles=2)


@CACHES
def test_str_argument_is_a_str_to_the_program(cache):
    """Under symbolic values 0.2.6 handed traced code a str proxy: `int(s)`, `s + "!"` and `s < "b"` failed, and
    `repr(s)` was "<StringProxy '2'>" (a silently wrong length)."""

    def f(t, s):
        return t * int(s) + len(s + "!") + (s < "3") + len(repr(s)) + (s != "2")

    check_against_eager(f, [(x(), "2"), (x(), "2"), (x(), "10")], cache=cache, compiles=2)


@CACHES
def test_sets_ranges_and_bytes_read_whole(cache):
    """Python reads them natively, all at once: a set's items, a range and bytes went unchecked (a set's length
    only), so the program traced for ``{1, 3}`` was reused for ``{2, 3}``, ``range(2)``'s for ``range(3)``."""

    def f(t, items):
        return t * len(items) - sum(items) + max(items)

    calls = [{1, 3}, {2, 3}, frozenset({2, 3}), range(2), range(3), b"\x01\x02", bytearray(b"\x01\x03"), {2, 3}]
    check_against_eager(f, [(x(), items) for items in calls], cache=cache, compiles=7)


@CACHES
def test_values_python_reads_natively(cache):
    """Their contents are read by C code (len, sum, float(), int()), never by the trace: a deque, a dict view or
    subclass, a memoryview, numpy values, a fraction or a decimal of the first call was reused for any other
    (either cache). Each is checked against a snapshot: plain items by value, others by identity."""
    import collections
    import decimal
    import fractions

    import numpy as np

    def f(t, items):
        if isinstance(items, dict):
            items = items.values()
        numbers = [float(i) for i in (items.tolist() if isinstance(items, np.ndarray) else items)]
        return t * len(numbers) + sum(numbers)

    half = fractions.Fraction(1, 2)  # an object in a container: checked by identity
    calls = [
        collections.deque([1, 2]), collections.deque([1, 3]), collections.deque([1, 3]),
        collections.OrderedDict(a=1), collections.OrderedDict(a=2), collections.defaultdict(int, a=2),
        collections.Counter(a=2), collections.OrderedDict(a=half), collections.OrderedDict(a=half), [np.int64(2)],
        [np.int64(3)],
        [fractions.Fraction(1, 2)], [fractions.Fraction(1, 3)], [decimal.Decimal("0.5")], [decimal.Decimal("0.25")],
        collections.deque([half]), collections.deque([half]),
    ]  # fmt: skip
    check_against_eager(f, [(x(), items) for items in calls], cache=cache, compiles=14, recompile_limit=20)

    # (not deep-copied and compared after the call, as check_against_eager's arguments are)
    jf = thunder.jit(f, cache=cache)
    views = [{"a": 1, "b": 2}.values(), {"a": 1, "b": 3}.values(), memoryview(b"\x01\x02"), memoryview(b"\x01\x03")]
    for items in [*views, np.arange(3), np.arange(4), np.arange(4)]:
        t = x()
        torch.testing.assert_close(jf(t, items), f(t, items))
    assert thunder.cache_misses(jf) == 6


Pair = collections.namedtuple("Pair", "a b")
Triple = collections.namedtuple("Triple", "a b c")


@CACHES
def test_named_tuple_arguments(cache):
    """A named tuple was checked neither by type nor by length (0.2.6 and this package until 2026-12-05): `len(p)`
    and, under symbolic values, `sum(p)` (read natively) of the first call were reused. One of plain values is
    checked as a snapshot; one holding tensors by type and length, its items where they are read."""

    def f(t, p):
        return t * len(p) + sum(p)

    calls = [Pair(1, 2), Pair(1, 2), Pair(1, 5), Triple(1, 2, 0), (1, 2)]
    check_against_eager(f, [(x(), p) for p in calls], cache=cache, compiles=4)

    def g(t, p):
        return t * len(p) + (p.a if p.b is None else p.a * p.b)

    tensors = [Pair(x(), None), Pair(x(), None), Pair(x(), x()), Triple(x(), None, 1), Pair(x(), x())]
    check_against_eager(g, [(x(), p) for p in tensors], cache=cache, compiles=3)


@CACHES
def test_iterator_argument_is_refused(cache):
    """An iterator's items are consumed as they are read: no check can prove the next one the same, so the
    program is not compiled (it was reused for any other iterator)."""

    def f(t, numbers):
        return t * sum(numbers)

    with pytest.raises(UncheckableValueError, match="reads numbers .a generator: an iterator"):
        thunder.jit(f, cache=cache)(x(), (n for n in (1, 2)))


@CACHES
def test_identity_of_a_bool_argument(cache):
    def f(t, flag):
        if flag is True:
            return t * 2
        return t - 1

    check_against_eager(f, [(x(), True), (x(), False), (x(), True)], cache=cache, compiles=2)


@CACHES
@pytest.mark.parametrize("value", [-0.0, float("nan"), float("inf")])
def test_floats_pinned_bitwise(cache, value):
    def f(t, s):
        if s == s:  # noqa: PLR0124  (False for NaN only)
            return t * math.copysign(1.0, s)
        return t - 1

    # A program pinned on 0.0 is not reused for -0.0 (copysign differs), nor for NaN.
    check_against_eager(f, [(x(), 0.0), (x(), value), (x(), 0.0), (x(), value)], cache=cache, compiles=2)


# --- Python state: globals, closures, module attributes -----------------------------------------------

SCALES = [1.0]
ACTIVATION = torch.relu


@CACHES
def test_global_list_mutated_between_calls(cache):
    def f(t):
        return t * SCALES[0] * len(SCALES)

    jf = thunder.jit(f, cache=cache)
    try:
        for scales in ([2.0], [5.0], [5.0, 1.0], [2.0]):
            SCALES[:] = scales
            torch.testing.assert_close(jf(t := x()), f(t))
    finally:
        SCALES[:] = [1.0]


@CACHES
def test_global_callable_rebound_between_calls(cache):
    global ACTIVATION

    def f(t):
        return ACTIVATION(t)

    jf = thunder.jit(f, cache=cache)
    try:
        for activation in (torch.relu, torch.tanh, torch.relu):
            ACTIVATION = activation
            torch.testing.assert_close(jf(t := x()), f(t))
        assert thunder.cache_misses(jf) == 2
    finally:
        ACTIVATION = torch.relu


def test_a_freed_record_of_a_module_read_never_hides_a_later_read():
    """Reads through a Python module (``torch.relu``) are not checked; ValueGuards knows them by their provenance
    records' ids. A freed record's id is soon another record's: a global read through that one went unchecked,
    now and then (a tensor-parallel model's compiles dropped 0 to 4 of their 180 checks of global functions)."""

    def const(value):
        return ProvenanceRecord(PseudoInst.CONSTANT, inputs=[], value=value)

    def activation(t):
        return t

    guards = ValueGuards(fn=activation)
    module_read = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[const(None), const("torch")])
    kept = weakref.ref(module_read)
    assert guards.guard(torch, module_read, lambda: "here") is None
    del module_read
    assert kept() is not None  # so no later record takes its id
    reads = []
    for i in range(200):  # records enough that one would have taken it (2 runs in 10 without the record kept)
        fn = ProvenanceRecord(PseudoInst.INPUT_FN, inputs=[])
        namespace = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[fn, const("__globals__")])
        reads.append(ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[namespace, const(f"G{i}")]))
    checks = [guards.guard(activation, read, lambda: "here") for read in reads]
    assert all(check is not None and check[0] == "function" for check in checks)


@CACHES
def test_closure_cell_changed_between_calls(cache):
    mode = None

    def f(t):
        return t * 2 if mode is None else t - 1

    jf = thunder.jit(f, cache=cache)
    for mode in (None, "sub", None):  # f reads the cell
        torch.testing.assert_close(jf(t := x()), f(t))


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 5)
        self.scale = None
        self.register_buffer("offset", torch.zeros(5))

    def forward(self, t):
        y = self.lin(t) + self.offset
        if self.scale is not None:
            y = y * self.scale
        return y


@CACHES
@torch.no_grad()
def test_module_attribute_none_then_float(cache):
    m = Scaled()
    jm = thunder.jit(m, cache=cache)
    for scale in (None, 3.0, None, 2.0):
        m.scale = scale
        torch.testing.assert_close(jm(t := x()), m(t))


@CACHES
@torch.no_grad()
def test_buffer_reassigned_and_parameter_replaced(cache):
    m = Scaled()
    jm = thunder.jit(m, cache=cache)
    torch.testing.assert_close(jm(t := x()), m(t))
    m.offset = torch.full((5,), 2.0)
    torch.testing.assert_close(jm(t := x()), m(t))
    m.lin.weight = nn.Parameter(torch.randn(5, 4))
    torch.testing.assert_close(jm(t := x()), m(t))
    m.lin = nn.Linear(4, 5)  # a submodule swapped
    torch.testing.assert_close(jm(t := x()), m(t))
    assert thunder.cache_misses(jm) == 1  # same shapes: the program is the same, its inputs are new


# --- Side effects on Python state ---------------------------------------------------------------------


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, t):
        self.step += 1
        return t * 2


class CountingOuter(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Counting()

    def forward(self, t):
        return self.inner(t)


@CACHES
def test_attribute_set_on_a_submodule_is_applied(cache):
    m = CountingOuter()
    jm = thunder.jit(m, cache=cache)
    for _ in range(3):
        torch.testing.assert_close(jm(t := x()), t * 2)
    assert m.inner.step == 3  # as eager: each call increments it (the pinned value recompiles)


class Accumulating(nn.Module):
    """A state tensor allocated on the first call and updated on every call: two stores of one name in a trace."""

    def __init__(self):
        super().__init__()
        self.total = None

    def forward(self, t):
        if self.total is None:
            self.total = torch.zeros_like(t)
        self.total = self.total + t
        return self.total * 2


@CACHES
def test_an_attribute_assigned_twice_in_one_call_keeps_the_last_value(cache):
    """0.2.6 (either cache) applied the first store after the call (`total` stayed zeros): every later call was off."""
    jitted, eager = nn.Sequential(Accumulating()), nn.Sequential(Accumulating())
    jm = thunder.jit(jitted, cache=cache)
    for _ in range(3):
        torch.testing.assert_close(jm(t := x()), eager(t))
        torch.testing.assert_close(jitted[0].total, eager[0].total)
    assert thunder.cache_misses(jm) == 2  # total None, then a tensor


@CACHES
def test_state_the_program_creates_may_change(cache):
    """Objects and closure cells made while tracing are the program's own: assigning them is traced as usual."""

    def f(t):
        box = types.SimpleNamespace(rows=0)
        box.rows = t.shape[0]
        count = 0

        def bump():
            nonlocal count
            count += 1

        bump()
        bump()
        return t * box.rows * count

    check_against_eager(f, [(x(2),), (x(3),), (x(4),)], cache=cache, compiles=1 if cache == "symbolic values" else 3)


# --- Attributes found missing, submodules' attributes, default arguments ---------------------------------


class Config:
    pass


ATTRIBUTE_READS = {
    "getattr with a default": lambda cfg: getattr(cfg, "bias", 0.0),
    "hasattr": lambda cfg: 2.0 if hasattr(cfg, "bias") else 0.0,
    "AttributeError caught": lambda cfg: _attribute_or_zero(cfg),
}
# The object's __dict__ read as a dict (0.2.6 called `vars` natively): its names are checked.
DICT_READS = {
    "vars(cfg).get": lambda cfg: vars(cfg).get("bias", 0.0),
    "cfg.__dict__.get": lambda cfg: cfg.__dict__.get("bias", 0.0),
    "in vars(cfg)": lambda cfg: 2.0 if "bias" in vars(cfg) else 0.0,
    "KeyError caught": lambda cfg: _key_or_zero(vars(cfg)),
}
MISSING_READS = {**ATTRIBUTE_READS, **DICT_READS}


def _attribute_or_zero(cfg):
    try:
        return cfg.bias
    except AttributeError:
        return 0.0


def _key_or_zero(namespace):
    try:
        return namespace["bias"]
    except KeyError:
        return 0.0


@CACHES
@pytest.mark.parametrize("read", list(MISSING_READS))
def test_attribute_found_missing_then_set_and_deleted(cache, read):
    """A program traced when ``cfg`` had no ``bias`` was reused once it had one (0.2.6, both caches), whether the
    code asked the object or its ``__dict__`` read as a dict."""
    cfg, offset = Config(), MISSING_READS[read]

    def f(t):
        return t + offset(cfg)

    jf = thunder.jit(f, cache=cache)
    for bias in (None, 2.0, None, 2.0):
        if bias is None:
            vars(cfg).pop("bias", None)
        else:
            cfg.bias = bias
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 2
    reasons = [str(reason) for reason in thunder_symbolic.recompile_reasons(jf)]
    names_checked = "type(cfg.__dict__) is dict and list(cfg.__dict__) == []"
    guard = names_checked if read in DICT_READS else "not hasattr(cfg, 'bias')"
    assert f"guard {guard} failed" in reasons[0]


class WithOptionalParts(nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(4, 4))
        self.mlp[0].act = None
        self.blocks = nn.ModuleList([nn.Identity()])

    def forward(self, t):
        y = self.mlp(t)
        if self.mlp[0].act is not None:
            y = self.mlp[0].act(y)
        if hasattr(self.blocks[0], "scale"):
            y = y * self.blocks[0].scale
        return y * getattr(self, "gain", 1.0)


@CACHES
@torch.no_grad()
def test_submodule_attributes_and_missing_ones(cache):
    """Values read from a submodule (``self.mlp[0].act``) went unchecked in both caches, as did attributes
    found missing on the module and its submodules."""
    m = WithOptionalParts()
    jm = thunder.jit(m, cache=cache)
    changes = [
        lambda: None,
        lambda: setattr(m.mlp[0], "act", torch.tanh),
        lambda: setattr(m.blocks[0], "scale", 3.0),
        lambda: setattr(m, "gain", 0.5),
        lambda: None,
    ]
    for change in changes:
        change()
        torch.testing.assert_close(jm(t := x()), m(t))
    assert thunder.cache_misses(jm) == 4
    reasons = " ".join(str(reason) for reason in thunder_symbolic.recompile_reasons(jm))
    for guard in ("self.mlp[0].act is None", "not hasattr(self.blocks[0], 'scale')", "not hasattr(self, 'gain')"):
        assert f"guard {guard} failed" in reasons


def _scaled(t, scale=2.0, *, shift=None):
    return t * scale if shift is None else t * scale + shift


@CACHES
def test_default_arguments_changed(cache):
    """0.2.6 bound defaults as constants: a new ``__defaults__`` or ``__kwdefaults__`` (of the jitted function
    or of one it calls), or a default dict changed in place, reused the old program."""

    def f(t, table={"k": 1.0}):  # noqa: B006  (the point: a default changed in place)
        return _scaled(t) * table["k"]

    jf = thunder.jit(f, cache=cache)
    originals = _scaled.__defaults__, _scaled.__kwdefaults__
    changes = [
        lambda: None,
        lambda: setattr(_scaled, "__defaults__", (3.0,)),
        lambda: setattr(_scaled, "__kwdefaults__", {"shift": 1.0}),
        lambda: f.__defaults__[0].update(k=4.0),
        lambda: setattr(f, "__defaults__", ({"k": 5.0},)),
        lambda: None,
    ]
    try:
        for change in changes:
            change()
            torch.testing.assert_close(jf(t := x()), f(t))
    finally:
        _scaled.__defaults__, _scaled.__kwdefaults__ = originals
    assert thunder.cache_misses(jf) == 5  # a compile per change (floats read from a function are pinned)


def test_thunders_interpreter_alone_calls_functions_with_defaults():
    """thunder's interpreter without thunder.jit's provenance tracking passes functions unwrapped; reading
    their defaults as values (only with the tracking) raised AttributeError at every Python call."""
    from thunder.core.interpreter import interpret

    assert interpret(_scaled)(2.0) == _scaled(2.0) and interpret(_scaled)(2.0, shift=1.0) == 5.0


# --- An object's __dict__ read as a dict, Python modules' state, environment variables -----------------


@CACHES
def test_values_read_from_an_objects_dict(cache):
    """What is read out of ``vars(cfg)`` is checked like the attribute itself (0.2.6 called ``vars`` natively:
    its items had no provenance)."""
    cfg = Config()
    cfg.act = None

    def f(t):
        act = vars(cfg)["act"]
        return t if act is None else act(t)

    jf = thunder.jit(f, cache=cache)
    for act in (None, torch.tanh, torch.relu, None):
        cfg.act = act
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 3


@CACHES
def test_vars_behaves_as_eager(cache):
    def f(t):
        names = sorted(vars())  # locals
        return t * len(names)

    torch.testing.assert_close(thunder.jit(f, cache=cache)(t := x()), f(t))
    with pytest.raises(TypeError, match=r"vars\(\) argument must have __dict__ attribute"):
        thunder.jit(lambda t: t * len(vars(3)), cache=cache)(x())


@CACHES
def test_python_module_attributes(cache):
    """Values read from a Python module that is not a library's API (a config module) went unchecked (0.2.6
    checks only numbers and tensors; thunder_symbolic skipped every module's attributes, as torch.relu's)."""
    config = types.ModuleType("run_config")
    config.act, config.names, config.table = None, ["a"], {"k": 1.0}
    holder = types.SimpleNamespace(config=config)

    def f(t):
        y = t * len(holder.config.names) * holder.config.table["k"]
        return y if holder.config.act is None else holder.config.act(y)

    changes = [
        lambda: None,
        lambda: setattr(config, "act", torch.tanh),
        lambda: config.names.append("b"),
        lambda: config.table.update(k=3.0),
        lambda: setattr(config, "names", ["c"]),
        lambda: None,
    ]
    jf = thunder.jit(f, cache=cache)
    for change in changes:
        change()
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 5


ENVIRONMENT_READS = {
    "os.environ.get": lambda: os.environ.get("THUNDER_SYMBOLIC_TEST_FLAG", "0"),
    "os.environ[name]": lambda: os.environ["THUNDER_SYMBOLIC_TEST_FLAG"] if _flag_set() else "0",
    "os.getenv": lambda: os.getenv("THUNDER_SYMBOLIC_TEST_FLAG") or "0",
}


def _flag_set():
    return "THUNDER_SYMBOLIC_TEST_FLAG" in os.environ


@CACHES
@pytest.mark.parametrize("read", list(ENVIRONMENT_READS))
def test_environment_variables(cache, read, monkeypatch):
    """A program that read an environment variable was reused after it changed (0.2.6, both caches)."""
    flag = ENVIRONMENT_READS[read]

    def f(t):
        return t * 2 if flag() == "1" else t + 1

    jf = thunder.jit(f, cache=cache)
    for value in (None, "1", "1", "0", None):
        if value is None:
            monkeypatch.delenv("THUNDER_SYMBOLIC_TEST_FLAG", raising=False)
        else:
            monkeypatch.setenv("THUNDER_SYMBOLIC_TEST_FLAG", value)
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 3  # unset (again: the first program), "1", "0"
    reasons = [str(reason) for reason in thunder_symbolic.recompile_reasons(jf)]
    # (os.getenv reads `environ` as a global of the os module: os.__dict__['environ'])
    assert re.search(r"guard os\.(environ|__dict__\['environ'\]) is still the same environment variables", reasons[0])


# --- Types of objects, class attributes, Python random draws -------------------------------------------


class Plain:
    post = None


class Other:
    post = None


TYPE_READS = {
    "isinstance": lambda o: isinstance(o, Plain),
    "type(o) is": lambda o: type(o) is Plain,
    "type(o).__name__": lambda o: type(o).__name__ == "Plain",
}


@CACHES
@pytest.mark.parametrize("read", list(TYPE_READS))
def test_object_type_checked(cache, read):
    """The type of an object argument went unchecked (0.2.6, both caches): the program traced for a ``Plain`` was
    reused for an ``Other`` (``isinstance(cache, StaticCache)``-style dispatch)."""
    is_plain = TYPE_READS[read]

    def f(t, o):
        return t * 2 if is_plain(o) else t + 1

    jf = thunder.jit(f, cache=cache)
    for o in (Plain(), Other(), Plain(), Other()):
        torch.testing.assert_close(jf(t := x(), o), f(t, o))
    assert thunder.cache_misses(jf) == 2
    reason = str(thunder_symbolic.recompile_reasons(jf)[0])
    if read == "type(o).__name__":  # (the name, a str, is checked first: where it is read)
        assert "Expected 'Other' to be equal to 'Plain'" in reason
    else:
        assert "guard type(o) is test_python_state.Plain failed (recorded at argument o)" in reason


@CACHES
def test_class_attribute_read_through_type(cache):
    """``type(o).post`` read the class outside the checked paths (0.2.6 called ``type`` natively)."""

    def f(t, o):
        return t + 1 if type(o).post is None else type(o).post(t)

    jf = thunder.jit(f, cache=cache)
    o = Plain()
    try:
        for post in (None, torch.tanh, None):
            Plain.post = post
            torch.testing.assert_close(jf(t := x(), o), f(t, o))
    finally:
        Plain.post = None
    assert thunder.cache_misses(jf) == 2


@CACHES
@torch.no_grad()
def test_gradient_present_or_missing(cache):
    """An input tensor without a ``.grad`` was None to the trace, unchecked (0.2.6, both caches): a step traced
    before any backward skipped the parameter forever (``if p.grad is None: continue``)."""

    def sgd_step(params, lr):
        for p in params:
            if p.grad is None:
                continue
            p.sub_(p.grad * lr)
        return params[0] * 1

    def parameters(grads):
        made = [torch.ones(3, requires_grad=True) for _ in grads]
        for p, g in zip(made, grads):
            p.grad = g
        return made

    jf = thunder.jit(sgd_step, cache=cache)
    for grads in ([None, None], [torch.full((3,), 2.0), None], [None, torch.ones(3)], [None, None]):
        eager, jitted = parameters(grads), parameters(grads)
        torch.testing.assert_close(jf(jitted, 0.5), sgd_step(eager, 0.5))
        for a, b in zip(jitted, eager):
            torch.testing.assert_close(a, b)
    assert thunder.cache_misses(jf) == 3
    reasons = [str(reason) for reason in thunder_symbolic.recompile_reasons(jf)]
    assert "guard params[0].grad is None failed" in reasons[0]


@CACHES
def test_gradient_of_a_tensor_that_does_not_require_grad(cache):
    """thunder drops the ``.grad`` of a tensor that does not require grad: the program read None and computed
    ``x * 2`` where eager computed ``x + x.grad`` (0.2.6 and before this fix, either cache). It is refused, naming
    the read, also when the first call had no gradient to read."""

    def f(t):
        return t * 2 if t.grad is None else t + t.grad

    jf = thunder.jit(f, cache=cache)
    bare = x()
    torch.testing.assert_close(jf(bare), f(bare))
    with_grad = x()
    with_grad.grad = torch.ones_like(with_grad)
    with pytest.raises(NotImplementedError, match=r"args\[0\]\.grad at .*does not require grad"):
        jf(with_grad)
    with pytest.raises(NotImplementedError, match="does not require grad"):
        thunder.jit(f, cache=cache)(with_grad)


TENSOR_CLASS_READS = {
    "isinstance(w, nn.Parameter)": lambda w: isinstance(w, nn.Parameter),
    "type(w) is torch.Tensor": lambda w: type(w) is not torch.Tensor,
    "type(w).__name__": lambda w: type(w).__name__ == "Parameter",
}


@CACHES
@pytest.mark.parametrize("read", list(TENSOR_CLASS_READS))
@torch.no_grad()
def test_tensor_class_checked(cache, read):
    """A tensor argument's class went unchecked (0.2.6, both caches): the program traced for a Parameter was
    reused for a plain tensor. A tensor the program computes is a plain ``torch.Tensor``, as in eager."""
    is_parameter = TENSOR_CLASS_READS[read]

    def f(t, w):
        y = t * 2 if is_parameter(w) else t + 1
        return y * (type(y) is torch.Tensor) * (not isinstance(y, nn.Parameter))

    jf = thunder.jit(f, cache=cache)
    parameter = nn.Parameter(torch.ones(4), requires_grad=False)  # (else requires_grad tells them apart)
    for w in (parameter, torch.ones(4), parameter):
        torch.testing.assert_close(jf(t := x(), w), f(t, w))
    assert thunder.cache_misses(jf) == 2
    reasons = [str(reason) for reason in thunder_symbolic.recompile_reasons(jf)]
    assert "guard type(w) is torch.nn.parameter.Parameter failed" in reasons[0]


@functools.lru_cache(maxsize=4)
def _causal(n):
    return torch.ones(n, n).tril()


@functools.cache
def _banded(n):
    return torch.ones(n, n).triu().tril(1)


_MASKS = {"mask": _causal}


@CACHES
def test_cached_function_of_a_size(cache):
    """An lru_cache'd helper called with a size (a causal mask per length) failed in 0.2.6's prologue ('Exception
    occured unpacking object', either cache): its tensor came out of a native call. It runs traced now, as under
    torch.compile: one program across lengths under symbolic values; swapping the helper recompiles."""

    def f(t):
        return _MASKS["mask"](t.shape[0]) @ t

    jf = thunder.jit(f, cache=cache)
    try:
        for rows, mask in ((3, _causal), (4, _causal), (3, _banded), (5, _banded)):
            _MASKS["mask"] = mask
            torch.testing.assert_close(jf(t := x(rows)), f(t))
    finally:
        _MASKS["mask"] = _causal
    assert thunder.cache_misses(jf) == (2 if cache == "symbolic values" else 4)


class Derived:
    def __init__(self, n):
        self.n = n

    @functools.cached_property
    def scale(self):
        return self.n * 2.0

    @functools.cached_property
    def act(self):
        return None if self.n < 4 else torch.tanh


@CACHES
def test_cached_property(cache):
    """A cached_property read in traced code stored the traced value in the object (0.2.6: a proxy under symbolic
    values, which eager code then read back); a value the object has cached is the one eager reads."""

    def f(t, cfg):
        y = t * cfg.scale
        return y if cfg.act is None else cfg.act(y)

    jf = thunder.jit(f, cache=cache)
    cached = Derived(4)
    cached.__dict__["scale"] = 100.0  # (what eager reads, not 8.0)
    for cfg in (Derived(3), Derived(3), Derived(5), cached):
        expected = f(t := x(), copy.copy(cfg))
        torch.testing.assert_close(jf(t, cfg), expected)
        assert not any(isinstance(v, thunder.core.proxies.Proxy) for v in vars(cfg).values()), vars(cfg)


RANDOM_DRAWS = {
    "random.random()": lambda: random.random(),
    "random.randint": lambda: random.randint(0, 3),
    "random.choice": lambda: random.choice([0.5, 2.0]),
    "a Random's uniform": lambda: random.Random(0).uniform(0, 1),
}


@CACHES
@pytest.mark.parametrize("draw", list(RANDOM_DRAWS))
def test_python_random_draws_are_refused(cache, draw):
    """A draw from Python's random module was made once, while tracing, and returned on every call (0.2.6, both
    caches): stochastic depth (`if random.random() < p: skip the layer`) skipped the same layers forever."""
    drawn = RANDOM_DRAWS[draw]

    def f(t):
        return t * drawn()

    with pytest.raises(SideEffectError, match=r"draws from a Python random number generator"):
        thunder.jit(f, cache=cache)(x())


@CACHES
def test_numpy_random_draws_are_refused(cache):
    numpy = pytest.importorskip("numpy")

    def f(t):
        return t * float(numpy.random.rand())

    with pytest.raises(SideEffectError, match=r"RandomState.rand\(\) at .* draws from a Python random number"):
        thunder.jit(f, cache=cache)(x())


# --- A module's structure, process state, caught errors -----------------------------------------------


class Stack(nn.Module):
    """Submodules in a ModuleList, a ModuleDict and plain attributes, read every way torch reads them."""

    def __init__(self, read):
        super().__init__()
        self.read = read
        self.layers = nn.ModuleList([nn.Linear(4, 4)])
        self.named = nn.ModuleDict({"a": nn.Tanh()})

    def forward(self, t):
        if self.read == "iterated":
            for layer in self.layers:
                t = layer(t)
            return t
        if self.read == "reversed":  # (0.2.6 also raised "object is not reversible")
            for layer in reversed(self.layers):
                t = layer(t)
            return t
        if self.read == "len":
            return t * len(self.layers)
        if self.read == "last":
            return self.layers[-1](t)
        if self.read == "items":
            for _, layer in self.named.items():
                t = layer(t)
            return t
        if self.read == "in":
            return self.named["b"](t) if "b" in self.named else t
        for child in self.children():  # "children"
            t = child(t) if isinstance(child, nn.Tanh) else t
        return t


STRUCTURE_CHANGES = {
    "iterated": lambda m: m.layers.append(nn.Linear(4, 4)),
    "reversed": lambda m: m.layers.append(nn.Tanh()),
    "len": lambda m: m.layers.append(nn.ReLU()),
    "last": lambda m: m.layers.append(nn.ReLU()),
    "items": lambda m: m.named.update({"b": nn.Sigmoid()}),
    "in": lambda m: m.named.update({"b": nn.Sigmoid()}),
    "children": lambda m: setattr(m, "act", nn.Tanh()),
}


@CACHES
@torch.no_grad()
@pytest.mark.parametrize("read", list(STRUCTURE_CHANGES))
def test_submodules_added_after_jitting(cache, read):
    """A ModuleList appended to, a ModuleDict or a module given a new submodule reused the program traced without it
    (0.2.6, either cache): a ModuleList, Sequential, ModuleDict or ``children()`` reads the submodules as a dict."""
    m = Stack(read)
    jm = thunder.jit(m, cache=cache)
    torch.testing.assert_close(jm(t := x()), m(t))
    STRUCTURE_CHANGES[read](m)
    torch.testing.assert_close(jm(t := x()), m(t))
    torch.testing.assert_close(jm(t := x()), m(t))
    assert thunder.cache_misses(jm) == 2


@CACHES
@torch.no_grad()
def test_the_jitted_sequential_appended_to(cache):
    m = nn.Sequential(nn.Linear(4, 4))
    jm = thunder.jit(m, cache=cache)
    for step in range(3):
        torch.testing.assert_close(jm(t := x()), m(t))
        m.append(nn.ReLU() if step == 0 else nn.Linear(4, 4))
    assert thunder.cache_misses(jm) == 3
    reasons = str(thunder_symbolic.recompile_reasons(jm)[0])
    assert "guard type(self._modules) is dict and list(self._modules) == ['0'] failed" in reasons


@CACHES
@torch.no_grad()
def test_a_module_list_cut_and_grown(cache):
    """Cutting a ModuleList (``del layers[1:]``) replaces its submodules' dict with an OrderedDict: checked too."""
    layers = nn.ModuleList([nn.Linear(4, 4), nn.Tanh()])

    def f(t):
        for layer in layers:
            t = layer(t)
        return t

    jf = thunder.jit(f, cache=cache)
    for change in (lambda: None, lambda: layers.__delitem__(slice(1, None)), lambda: layers.append(nn.Sigmoid())):
        change()
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 3
    assert "type(layers._modules) is OrderedDict and list(layers._modules) == ['0']" in str(
        thunder_symbolic.recompile_reasons(jf)[-1]
    )


class WithOptionalMembers(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)
        self.register_buffer("shift", None)
        self.act = None

    def forward(self, t):
        t = self.lin(t)
        if self.shift is not None:
            t = t + self.shift
        return t if self.act is None else self.act(t)


MEMBER_CHANGES = {
    "a bias set": lambda m: setattr(m.lin, "bias", nn.Parameter(torch.ones(4))),
    "a buffer set": lambda m: setattr(m, "shift", torch.full((4,), 2.0)),
    "a submodule set": lambda m: setattr(m, "act", nn.Tanh()),
}


@CACHES
@torch.no_grad()
@pytest.mark.parametrize("change", list(MEMBER_CHANGES))
def test_members_registered_as_none_then_set_and_back(cache, change):
    """A parameter, buffer or submodule registered as None and set later (a Linear without bias, a cache buffer
    allocated later) was read as None forever; one set back to None was read as the old one (0.2.6, either
    cache)."""
    m = WithOptionalMembers()
    jm = thunder.jit(m, cache=cache)
    torch.testing.assert_close(jm(t := x()), m(t))
    MEMBER_CHANGES[change](m)
    torch.testing.assert_close(jm(t := x()), m(t))
    owner, name = {"a bias set": (m.lin, "bias"), "a buffer set": (m, "shift"), "a submodule set": (m, "act")}[change]
    setattr(owner, name, None)  # (torch calls no registration hook for a parameter set to None)
    torch.testing.assert_close(jm(t := x()), m(t))
    assert thunder.cache_misses(jm) == 2


@CACHES
@torch.no_grad()
def test_parameters_and_buffers_listed_in_forward(cache):
    """``named_parameters()``, ``parameters()`` and ``buffers()`` are listed natively by thunder: a parameter or
    buffer registered later was left out of the program's loop over them (0.2.6, either cache)."""

    class Summing(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4, bias=False)
            self.register_buffer("one", torch.ones(4))

        def forward(self, t):
            for _, p in self.lin.named_parameters():
                t = t + p.sum()
            for p in self.lin.parameters():
                t = t * p.mean()
            return t + sum(b.sum() for b in self.buffers())

    m = Summing()
    jm = thunder.jit(m, cache=cache)
    torch.testing.assert_close(jm(t := x()), m(t))
    m.lin.bias = nn.Parameter(torch.ones(4))
    torch.testing.assert_close(jm(t := x()), m(t))
    m.register_buffer("two", torch.full((3,), 2.0))
    torch.testing.assert_close(jm(t := x()), m(t))
    torch.testing.assert_close(jm(t := x()), m(t))
    assert thunder.cache_misses(jm) == 3
    reasons = str(thunder_symbolic.recompile_reasons(jm)[0])
    assert "guard [name for name, _ in self.lin.named_parameters()] == ['weight'] failed" in reasons


@CACHES
def test_inference_tensors_told_apart(cache):
    """``x.is_inference()`` was answered for the first call under constant values and failed under symbolic values
    (0.2.6). An input's answer is checked; a computed tensor's is whether inference mode is on, as in eager."""

    def f(t):
        y = t * 2
        return y + 1 if t.is_inference() else (y - 1 if y.is_inference() else y)

    jf = thunder.jit(f, cache=cache)
    for mode in (False, True, False):
        with torch.inference_mode(mode):
            t = x()
        torch.testing.assert_close(jf(t), f(t))
    with torch.inference_mode():
        torch.testing.assert_close(jf(t := x()), f(t))
    assert thunder.cache_misses(jf) == 3  # (inference mode also turns grad mode off: thunder's cache information)
    assert "guard t.is_inference() is False failed" in str(thunder_symbolic.recompile_reasons(jf)[0])


@CACHES
def test_inference_mode_changed_inside_is_refused(cache):
    """thunder entered ``torch.inference_mode()`` while tracing only: what the block computed required grad and was
    no inference tensor (0.2.6, either cache). Changing the mode inside is refused, naming the line; entering the
    mode already on runs, and its prologue checks the mode."""

    def changes(t):
        with torch.inference_mode():
            y = t * 2
        return y + 1

    @torch.inference_mode()
    def inner(t):
        return t * 3

    with pytest.raises(NotImplementedError, match=r"torch.inference_mode\(True\) at .* turns inference mode on"):
        thunder.jit(changes, cache=cache)(x().requires_grad_())
    with pytest.raises(NotImplementedError, match="turns inference mode on"):
        thunder.jit(lambda t: inner(t) + 1, cache=cache)(x())

    def keeps(t):
        with torch.inference_mode(False):
            return t * 2

    jf = thunder.jit(keeps, cache=cache)
    torch.testing.assert_close(jf(t := x()), keeps(t))
    with torch.inference_mode(), pytest.raises(NotImplementedError, match=r"inference_mode\(False\) .* off"):
        jf(x())


SCALE = contextvars.ContextVar("scale", default=1.0)

STATE_READS = {  # the check the first call's program fails: (the program's factor, set the state, states)
    "torch.are_deterministic_algorithms_enabled() == False": (
        lambda: 2.0 if torch.are_deterministic_algorithms_enabled() else 1.0,
        lambda value: torch.use_deterministic_algorithms(value),
        (False, True),
    ),
    "torch.get_num_threads() == 1": (
        lambda: float(torch.get_num_threads()),
        torch.set_num_threads,
        (1, 2),
    ),
    "ContextVar('scale').get() == 1.0": (lambda: SCALE.get(), SCALE.set, (1.0, 3.0)),
    "ContextVar('scale').get(0.5) == 1.0": (lambda: SCALE.get(0.5), SCALE.set, (1.0, 3.0)),
}


@CACHES
@pytest.mark.parametrize("read", list(STATE_READS))
def test_process_state_read_by_the_program(cache, read):
    """A call reading process state was made once, while tracing, and its answer reused (0.2.6, either cache)."""
    value_of, set_state, states = STATE_READS[read]
    threads = torch.get_num_threads()

    def f(t):
        return t * value_of()

    jf = thunder.jit(f, cache=cache)
    try:
        for state in (*states, states[0]):
            set_state(state)
            torch.testing.assert_close(jf(t := x()), f(t))
    finally:
        torch.use_deterministic_algorithms(False)
        torch.set_num_threads(threads)
        SCALE.set(1.0)
    assert thunder.cache_misses(jf) == 2
    assert f"guard {read} failed" in str(thunder_symbolic.recompile_reasons(jf)[0])


def test_a_context_variable_holding_an_object_is_refused():
    config = contextvars.ContextVar("config")
    config.set(types.SimpleNamespace(scale=2.0))

    def f(t):
        return t * config.get().scale

    with pytest.raises(UncheckableValueError, match=r"ContextVar\('config'\)\.get\(\) at .* returns a SimpleNamespace"):
        thunder.jit(f)(x())


SEEDINGS = {
    "manual_seed": lambda: torch.manual_seed(0),
    "a Generator's manual_seed": lambda: torch.Generator().manual_seed(0),
    "set_rng_state": lambda: torch.set_rng_state(torch.get_rng_state()),
}


@CACHES
@pytest.mark.parametrize("seeding", list(SEEDINGS))
def test_seeding_a_torch_generator_is_refused(cache, seeding):
    """``torch.manual_seed(0)`` in a jitted function failed in 0.2.6's epilogue (either cache) and, through the
    interpreter's handling of the files traceback formatting reads, could crash the process."""
    seed = SEEDINGS[seeding]

    def f(t):
        seed()
        return t + torch.rand(t.shape)

    with pytest.raises(SideEffectError, match=r"at .* sets the state of a torch random number generator"):
        thunder.jit(f, cache=cache)(x())


@CACHES
@pytest.mark.parametrize("clock", [time.time, time.perf_counter, time.monotonic_ns])
def test_a_clock_read_is_refused(cache, clock):
    """A clock was read once, while tracing, and its reading returned by every later call (0.2.6, either cache)."""

    def f(t):
        return t * (clock() % 7)

    with pytest.raises(UncheckableValueError, match=rf"time\.{clock.__name__}\(\) at .* reads a clock"):
        thunder.jit(f, cache=cache)(x())


@CACHES
def test_an_error_of_an_operation_caught_by_the_program(cache):
    """An operation that raised inside a caught ``try`` left its scope open: every later operation went into it and
    thunder failed at the return (0.2.6, either cache: IndexError: pop from empty list). Under symbolic values
    whether the operation raises is a guard on the sizes."""

    def f(t):
        try:
            return t.view(4, -1).sum(0)
        except RuntimeError:
            return t[:4] * 2

    args = [(torch.randn(n),) for n in (6, 8, 10, 12, 6)]
    check_against_eager(f, args, cache=cache, compiles=2 if cache == "symbolic values" else 4)


# --- 0.2.6 without the patch set ----------------------------------------------------------------------


def test_unpatched_thunder_reuses_programs_it_should_not():
    """Each case above is wrong in 0.2.6 (THUNDER_SYMBOLIC=0): the tests above can fail."""
    result = run_python(
        """
        import math, torch, thunder
        wrong = []
        def check(name, f, *calls, cache="symbolic values"):
            jf = thunder.jit(f, cache=cache)
            for args in calls:
                try:
                    same = torch.allclose(jf(*args), f(*args), equal_nan=True)
                except RuntimeError:  # 0.2.6 reuses the program and fails in it
                    same = False
                if not same:
                    wrong.append(name)
                    return
        x = torch.randn(3, 4)
        check("none", lambda t, n: t * 2 if n is None else t + n, (x, None), (x, 3))
        check("dtype", lambda t, d: t.to(d) * 2, (x, torch.float64), (x, torch.float16))
        check("callable", lambda t, a: a(t), (x, torch.relu), (x, torch.tanh))
        check("tuple", lambda t, s: t * len(s), (x, (1, 2)), (x, (1, 2, 3)))
        check("dict", lambda t, c: t + c["b"] if "b" in c else t, (x, {}), (x, {"b": 1.0}))
        check("-0.0", lambda t, s: t * math.copysign(1.0, s), (x, 0.0), (x, -0.0), cache="constant values")
        check("is True", lambda t, f: t * 2 if f is True else t, (x, True))
        print(sorted(wrong))
        """,
        env={"THUNDER_SYMBOLIC": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == str(
        sorted(["none", "dtype", "callable", "tuple", "dict", "-0.0", "is True"])
    )
