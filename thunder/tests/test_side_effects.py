"""Python side effects of a jitted program are made on every call, as eager Python makes them, not once while
tracing (thunder 0.2.6) and not refused: attributes, containers, globals, closure cells, classes, new objects,
logging and warnings (see thunder_symbolic.semantics.side_effects).

Each case runs a program eagerly and jitted, call by call, and compares the outputs and the state it changed, with
the compile count, under both cache options.
"""

import logging
import types
import warnings

import pytest
import torch
from torch import nn
from transformers.utils import logging as transformers_logging

import thunder
from thunder_symbolic.testing import assert_same, check_against_eager

CACHES = pytest.mark.parametrize("cache", ["symbolic values", "constant values"])


def x(rows=3):
    return torch.randn(rows, 4)


def calls_like_eager(fn, state, reset, cache, inputs, compiles=None):
    """Call ``fn`` on each of ``inputs`` eagerly, then jitted (``reset()`` before each run), comparing each output and
    ``state()`` after each call; returns the jitted function."""
    reset()
    expected = []
    for t in inputs:
        expected.append((fn(t.clone()), _copy(state())))
    reset()
    jf = thunder.jit(fn, cache=cache)
    for i, t in enumerate(inputs):
        out = jf(t.clone())
        assert_same(out, expected[i][0], path=f"call {i} output")
        assert_same(_copy(state()), expected[i][1], path=f"call {i} state")
    if compiles is not None:
        assert thunder.cache_misses(jf) == compiles
    return jf


def _copy(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(map(_copy, value))
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    return value


# --- Attributes ---------------------------------------------------------------------------------------------------


class Counting(nn.Module):
    def __init__(self):
        super().__init__()
        self.step = 0

    def forward(self, t):
        self.step += 1
        return t * self.step


@CACHES
def test_an_attribute_of_the_jitted_module_is_set_on_every_call(cache):
    """0.2.6 dropped the store to the jitted module itself (`step` stayed 0; either cache)."""
    m = Counting()
    jm = thunder.jit(m, cache=cache)
    for step in range(1, 4):
        torch.testing.assert_close(jm(t := x()), t * step)
        assert m.step == step
    assert thunder.cache_misses(jm) == 3  # (a number attribute of a module is pinned: one program per value)


class Obj:
    pass


@CACHES
def test_attributes_of_an_object_argument_hold_the_calls_values(cache):
    """0.2.6 (either cache) set none of them: only a submodule's attributes were replayed."""

    def f(t, o):
        o.total = t.sum(0)
        o.rows = t.shape[0]
        o.kind = "seen"
        o.dtype = t.dtype
        return t + 1

    check_against_eager(f, [(x(3), Obj()), (x(5), Obj()), (x(5), Obj())], cache=cache)


@CACHES
def test_an_attribute_deleted_from_an_argument(cache):
    """0.2.6 deleted it from the object itself, while tracing only (and read the deleted value afterwards)."""

    def f(t, o):
        del o.stale
        o.fresh = t.shape[0]
        return t * 2 if hasattr(o, "stale") else t

    def arguments(rows):
        o = Obj()
        o.stale = 1
        return x(rows), o

    check_against_eager(f, [arguments(3), arguments(3), arguments(5)], cache=cache)


SEEN = types.SimpleNamespace(rows=None)
LAST_ROWS = None


def _sets_an_attribute_of_a_global(t):
    SEEN.rows = t.shape[0]
    return t * 2


def _assigns_a_global(t):
    global LAST_ROWS
    LAST_ROWS = t.shape[0]
    return t * 2


@CACHES
@pytest.mark.parametrize("fn", [_sets_an_attribute_of_a_global, _assigns_a_global], ids=["attribute", "global"])
def test_state_read_from_globals_is_assigned_on_every_call(cache, fn):
    """0.2.6 assigned once, while tracing: under symbolic values `LAST_ROWS` and `SEEN.rows` held a proxy."""

    def reset():
        global LAST_ROWS
        LAST_ROWS = SEEN.rows = None

    calls_like_eager(fn, lambda: (LAST_ROWS, SEEN.rows), reset, cache, [x(3), x(5), x(3)])


def _counting_closure():
    calls = 0

    def f(t):
        nonlocal calls
        calls += 1
        return t * calls

    return f, lambda: calls


@CACHES
def test_a_nonlocal_counter_counts_every_call(cache):
    """0.2.6 failed the second call: "Expected 1 to be equal to and have the type of 0" (either cache)."""
    f, calls = _counting_closure()
    jf = thunder.jit(f, cache=cache)
    for n in range(1, 4):
        torch.testing.assert_close(jf(t := x()), t * n)
        assert calls() == n


class Config:
    scale = 1.0

    @classmethod
    def enable(cls):
        cls.scale = 2.0


@CACHES
def test_a_class_attribute_set_by_a_classmethod_is_set_on_every_call(cache):
    def f(t):
        Config.enable()
        return t * 3

    jf = thunder.jit(f, cache=cache)
    for _ in range(2):
        Config.scale = 1.0
        torch.testing.assert_close(jf(t := x()), t * 3)
        assert Config.scale == 2.0  # (0.2.6 set it while tracing only: the second call left 1.0)


# --- Containers -----------------------------------------------------------------------------------------------------

LOG = []
MEMO = {}


@CACHES
def test_appending_to_a_global_list_appends_the_calls_values(cache):
    """0.2.6 appended one TensorProxy, while tracing."""

    def f(t):
        LOG.append(t * 2)
        LOG.append(t.shape[0])
        return t + 1

    calls_like_eager(f, lambda: list(LOG), LOG.clear, cache, [x(3), x(3), x(5)])
    LOG.clear()


@CACHES
def test_memoizing_in_a_global_dict(cache):
    """0.2.6 left proxies in the dict. The program reads the memo's keys (checked): a call that adds a key makes the
    next one a cache miss (it finds the key), then the memo's program is reused."""

    def f(t):
        if t.shape[0] not in MEMO:
            MEMO[t.shape[0]] = torch.ones(t.shape[0])
        return t + MEMO[t.shape[0]][:, None]

    calls_like_eager(f, lambda: dict(MEMO), MEMO.clear, cache, [x(3), x(3), x(3), x(5), x(5)], compiles=4)
    MEMO.clear()


@CACHES
def test_changes_to_container_arguments(cache):
    def f(t, items, table, tags):
        items.append(t.sum())
        items.insert(0, "first")
        table["k"] = t * 2
        table.pop("old", None)
        tags.add("seen")
        tags.discard("stale")
        return t + len(items)

    def arguments(rows):
        return x(rows), [torch.zeros(1)], {"old": 1, "keep": 2}, {"stale", "other"}

    check_against_eager(f, [arguments(3), arguments(5), arguments(5)], cache=cache)


@CACHES
def test_a_list_reordered_and_shortened(cache):
    """The replay writes the whole new contents, the items kept taken from the list by their old index."""

    def f(t, items):
        first = items.pop(0)
        items.reverse()
        items.append(first * 2)
        return t

    check_against_eager(
        f, [(x(), [1, 2, 3]), (x(), [4, 5, 6])], cache=cache, compiles=1 if cache == "symbolic values" else 2
    )


@CACHES
def test_a_default_list_grows_on_every_call(cache):
    def f(t, seen=[]):  # noqa: B006
        seen.append(1)
        return t * len(seen)

    jf = thunder.jit(f, cache=cache)
    for n in range(1, 4):
        torch.testing.assert_close(jf(t := x()), t * n)
        assert f.__defaults__ == ([1] * n,)


@CACHES
def test_reads_after_writes_see_the_writes(cache):
    def f(t, items, o):
        items.append(t * 2)
        o.scale = 3
        return items[-1] * o.scale + len(items)

    check_against_eager(f, [(x(), [], Obj()), (x(), [1], Obj())], cache=cache)


# --- New objects ----------------------------------------------------------------------------------------------------


class Layer:
    def __init__(self):
        self.keys = None

    def update(self, t):
        self.keys = t if self.keys is None else torch.cat([self.keys, t])


@CACHES
def test_a_new_object_kept_in_a_list_is_made_anew_on_every_call(cache):
    """As transformers' DynamicCache appends a layer: 0.2.6 appended the object made while tracing (holding
    proxies), once; the replay builds a new one, with the call's tensors, on every call."""

    def f(t, layers):
        layer = Layer()
        layer.update(t * 2)
        layers.append(layer)
        return t

    check_against_eager(f, [(x(3), []), (x(5), [])], cache=cache)
    jf = thunder.jit(f, cache=cache)
    jf(x(), first := [])
    jf(x(), second := [])
    assert first[0] is not second[0]  # a new object on every call, not the one made while tracing


@CACHES
def test_a_cache_grows_across_calls(cache):
    """Prefill on an empty cache (appends a layer), then decode steps that extend the layer's tensor."""

    class Cache:
        def __init__(self):
            self.layers = []

        def update(self, t):
            if not self.layers:
                self.layers.append(Layer())
            self.layers[0].update(t)
            return self.layers[0].keys

    def step(t, cache):
        return cache.update(t * 2).sum(0)

    eager, jitted = Cache(), Cache()
    jf = thunder.jit(step, cache=cache)
    for rows in (4, 1, 1, 1):
        t = x(rows)
        assert_same(jf(t, jitted), step(t, eager))
        assert_same(jitted, eager, path="cache")
    if cache == "symbolic values":
        assert thunder.cache_misses(jf) == 2  # prefill, then every decode step


@CACHES
def test_an_object_the_program_makes_and_returns_is_made_on_every_call(cache):
    """0.2.6 failed ("unhandled value of type Layer")."""

    def f(t):
        layer = Layer()
        layer.update(t * 2)
        layer.rows = t.shape[0]
        return layer

    check_against_eager(f, [(x(3),), (x(5),)], cache=cache)
    jf = thunder.jit(f, cache=cache)
    assert jf(x()) is not jf(x())


# --- Logging, warnings, print ---------------------------------------------------------------------------------------

logger = transformers_logging.get_logger("thunder_symbolic.tests.side_effects")


@CACHES
def test_logging_happens_on_every_call_and_reads_the_clock_then(cache, caplog):
    """The patch set refused the clock a LogRecord reads (UncheckableValueError); 0.2.6 logged once, while tracing.
    transformers' `warning_once` (an lru_cache it installs on Logger) keeps its once."""

    def f(t):
        logger.warning("rows: %d", t.shape[0])
        logger.warning_once(f"once only ({cache})")  # (once per process: one message per test)
        return t * 2

    jf = thunder.jit(f, cache=cache)
    with caplog.at_level(logging.WARNING, logger=logger.name):
        for rows in (3, 3, 5):
            jf(x(rows))
    messages = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert messages == ["rows: 3", f"once only ({cache})", "rows: 3", "rows: 5"]
    assert len({r.created for r in caplog.records}) > 1  # each call's own time


@CACHES
def test_warnings_are_issued_from_the_users_line_on_every_call(cache):
    def f(t):
        warnings.warn("watch out", UserWarning)
        return t * 2

    jf = thunder.jit(f, cache=cache)
    for _ in range(2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            jf(x())
        ours = [w for w in caught if w.filename == __file__]
        assert [str(w.message) for w in ours] == ["watch out"]
        assert ours[0].lineno == f.__code__.co_firstlineno + 1 and ours[0].category is UserWarning


@CACHES
def test_print_prints_the_calls_values(cache, capsys):
    def f(t):
        print("sum", t.sum() > -1000, t.shape[0])
        return t

    jf = thunder.jit(f, cache=cache)
    jf(x(3))
    jf(x(3))
    assert capsys.readouterr().out == "sum tensor(True) 3\nsum tensor(True) 3\n"


# --- What the replay assumes, and failures --------------------------------------------------------------------------


@CACHES
def test_a_failed_trace_leaves_the_state_as_it_was(cache):
    G = {"n": 0}

    def f(t, items, o):
        items.append(1)
        o.seen = True
        G["n"] += 1
        Config.scale = 5.0
        raise ValueError("stop")

    items, o = [0], Obj()
    Config.scale = 1.0
    with pytest.raises(ValueError, match="stop"):
        thunder.jit(f, cache=cache)(x(), items, o)
    assert items == [0] and vars(o) == {} and G == {"n": 0} and Config.scale == 1.0


@CACHES
def test_the_epilogue_shows_the_replay(cache):
    def f(t, items):
        items.append(t * 2)
        return t

    jf = thunder.jit(f, cache=cache)
    jf(x(), [])
    epilogue = str(thunder.compile_stats(jf).last_epilogue_traces[-1])
    assert "replay_side_effects" in epilogue and ".extend([" in epilogue


@CACHES
def test_a_weak_registry_that_loses_an_entry_while_the_interpreter_reads_it(monkeypatch, cache):
    """A store into a dict makes the interpreter wrap its items; code run meanwhile can free an object whose
    weakref callback removes its entry (Dynamo's GenerationTracker tags every module made after torch.compile
    ran). The interpreter read the dict in one pass and raised 'dictionary changed size during iteration'."""
    import weakref

    from thunder.core import interpreter

    class Thing:
        pass

    kept = [Thing() for _ in range(6)]
    values, refs = {}, {}
    for thing in kept:
        refs[id(thing)] = weakref.ref(thing, lambda _, key=id(thing): values.pop(key, None))
        values[id(thing)] = "a thing"

    wrap = interpreter.wrap_binary_subscr

    def wrap_and_free_one(*args, **kwargs):
        if kept:
            kept.pop()  # the last reference to a registered object: its entry leaves the dict now
        return wrap(*args, **kwargs)

    monkeypatch.setattr(interpreter, "wrap_binary_subscr", wrap_and_free_one)

    def f(x):
        values["made by the program"] = 1
        return x * 2

    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(f, cache=cache)(x), x * 2)
    assert values["made by the program"] == 1
