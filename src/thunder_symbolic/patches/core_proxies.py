"""Patches of ``thunder/core/proxies.py``: how tensors become proxies under symbolic values."""

from __future__ import annotations

import functools
import importlib
import inspect
import sys

import torch
from thunder.core import compile_data
from thunder.core.proxies import CONSTRAINT, FloatProxy, IntegerProxy, NumberProxy, TensorProxy
from thunder.core.trace import get_tracectx
from torch._subclasses.fake_tensor import FakeTensor

from thunder_symbolic import controls
from thunder_symbolic.activation.registry import patch
from thunder_symbolic.distributed.dtensor_state import local_tensor_provenance, symbolic_shapes_of
from thunder_symbolic.guards import algebra
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.runtime.cache_option import constant_values
from thunder_symbolic.semantics.number_ops import apply_number_op
from thunder_symbolic.semantics.opaque import opaque


def _from_fake_run(t: torch.Tensor) -> bool:
    # A redistribute's fake result holds its fake local tensor in an AsyncCollectiveTensor wrapper.
    return isinstance(t, FakeTensor) or isinstance(getattr(t, "elem", None), FakeTensor)


@patch(
    "thunder.core.proxies:tensorproxy",
    summary="nn.Parameters keep static shapes; tensors without history get symbolic dims without provenance",
    why=(
        "Under symbolic values every dim became a proxy to unpack in the prologue: parameters failed "
        "('Parameter was not tagged with STATIC_MEMORY_LOCATION'), and a proxy built with history=None "
        "(the local tensor of DTensor.from_local) failed an assertion while building the dims' provenance."
    ),
    upstream="Lightning-AI/lightning-thunder#2749, #2755",
)
def _tensorproxy(original):
    def tensorproxy(t: torch.Tensor, /, *, name, history=None):
        if not compile_data.using_symbolic_values():
            return original(t, name=name, history=history)
        if isinstance(t, torch.nn.Parameter):
            # Parameters do not change shape between calls (torch.compile's dynamic=True agrees).
            with constant_values():
                return original(t, name=name, history=history)
        if history is None:
            shapes = symbolic_shapes_of(t)
            shape = None if shapes is None else shapes.local
            if shape is not None or _from_fake_run(t):
                # The result of a DTensor meta function's fake run: its sizes are symbolic where a shape
                # rule gave them (see patches.torch_experimental); else the run pinned every size it read,
                # so they are constants of the trace.
                with constant_values():
                    fake = original(t, name=name if shape is None else None, history=None)
                return fake if shape is None else fake.replace(shape=shape, name=name)
            # Nothing in the prologue can re-derive these dims: they are produced by the computation,
            # so they are symbolic without provenance.
            with constant_values():
                static = original(t, name=None, history=None)
            dims = tuple(IntegerProxy(None, s, constraint=CONSTRAINT.CONSTRAINABLE) for s in t.shape)
            return static.replace(shape=dims, name=name)
        pending = local_tensor_provenance.get()
        if pending is not None and pending[0] is t:
            history = pending[1]  # see patches.torch_experimental
        p = original(t, name=name, history=history)
        recorder = guard_recorder.current()
        if recorder is not None:
            argument = _argument_name(history)
            options = getattr(compile_data.get_compile_data(), "thunder_symbolic_dynamic_shapes", None) or {}
            recorder.add_tensor_input(p, controls.declared_dims(t, argument, options), argument or "")
        return p

    return tensorproxy


def _argument_name(history) -> str | None:
    """The parameter a tensor input was passed as (``x``), for the jit option ``dynamic_shapes``; else None."""
    path = None if history is None else value_guards.describe(history)
    if path is None:
        return None
    cd = compile_data.get_compile_data()
    name = value_guards.user_path(path, cd.fn if cd is not None else None)
    return name if name.isidentifier() else None


# --- Number proxies: record the guards their concrete values imply (see thunder_symbolic.guards) ---

_WHY_OBSERVE = (
    "0.2.6 hands the traced value of a symbolic number to Python (branches, range(), int(), float(), "
    "builtins such as min) without recording anything, so the cached program was reused for inputs on "
    "which Python would have decided differently: silently wrong results. A number that depends on tensor "
    "data (`.item()`) has no value while tracing: user code's `if s.item() > 0` was False under either "
    "cache option, whatever s held; it is refused."
)


def _observing(truth: bool):
    """A conversion that records what it returns: a truth value (predicate guard) or a value (pin)."""

    def make(original):
        @opaque
        def convert(self):
            recorder = guard_recorder.current()
            if algebra.is_data_dependent(self) and (recorder is not None or value_guards.current() is not None):
                # While tracing, under constant values too: 0.2.6 took `if s.item() > 0` as False, whatever s held.
                guard_recorder.refuse_data_dependent(self, "the truth value" if truth else "the value")
            value = original(self)
            if recorder is not None:
                (recorder.observe_truth if truth else recorder.observe_value)(self, value)
            return value

        convert.__name__ = original.__name__
        return convert

    return make


for _target, _what in (
    ("NumberProxy.__bool__", "records a predicate guard for the truth value it returns"),
    ("NumberProxy.__int__", "records a guard pinning the value int() returns"),
    ("NumberProxy.__float__", "records a guard pinning the value float() returns"),
    ("NumberProxy.__complex__", "records a guard pinning the value complex() returns"),
    ("IntegerProxy.__index__", "records a guard pinning the value used as an index (range, slicing, len)"),
):
    patch(
        f"thunder.core.proxies:{_target}",
        summary=f"{_target} {_what}",
        why=_WHY_OBSERVE,
        upstream="Lightning-AI/lightning-thunder#463",
    )(_observing(truth=_target.endswith("__bool__")))
del _target, _what


@patch(
    "thunder.core.proxies:NumberProxy.__hash__",
    summary="records a guard pinning the value that is hashed (dict keys, sets)",
    why=(
        "A hash is a function of the value: pinning the value keeps the guard expressible (0.2.6 recorded "
        "nothing; pinning the hash of a float could not be expressed and pinned every input)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _hash(original):
    @opaque
    def __hash__(self):
        guard_recorder.python_value(self)
        return original(self)

    return __hash__


@patch(
    "thunder.core.proxies:TensorProxy.type_string",
    summary="a tensor's type in a trace's comments shows its symbolic dims as the sizes traced (`cpu f32[2, 3]`)",
    why=(
        "Under symbolic values each dim printed as its proxy's description (`cpu f32[[IntegerProxy name=i0, value=2, "
        "static=CONSTRAINT.CONSTRAINABLE], ...]`): unreadable traces, and thunder's own tests of printing failed with "
        "symbolic values as the default cache option. The comment shows the trace's example sizes; the prologue's "
        "checks say what they may be."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _type_string(original):
    @functools.wraps(original)
    def type_string(self):
        if not any(isinstance(d, NumberProxy) for d in self._shape):
            return original(self)
        sizes = [d.value if isinstance(d, NumberProxy) and d.value is not None else d for d in self._shape]
        return f"{self.device.device_str()} {self.dtype.shortname()}{sizes}"

    return type_string


@patch(
    "thunder.core.proxies:NumberProxy.__format__",
    summary="format() and f-strings of a number give its digits, pinning its value (as str() of one in user code)",
    why=(
        "thunder's error messages format the sizes they compare: under symbolic values they read `but got "
        "[IntegerProxy name=i2, value=3, static=CONSTRAINT.CONSTRAINABLE]` where eager's read `but got 3` (thunder's "
        "unflatten and einsum errors, with symbolic values as the default cache option). A value read so is pinned: "
        "code that formats a number to compute something is checked like any other read."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _format(original):
    @opaque
    def __format__(self, spec):
        if self.value is None:
            return original(self, spec)
        return format(guard_recorder.python_value(self), spec)

    return __format__


@patch(
    "thunder.core.proxies:NumberProxy.__divmod__",
    summary="divmod(a, b) of numbers is (a // b, a % b), each symbolic",
    why="0.2.6 resolves no method for divmod: `divmod(x.shape[0], n)` failed with 'NoneType' object is not callable.",
    upstream="Lightning-AI/lightning-thunder#2779",
    replaces=True,
)
def _divmod(original):
    def __divmod__(self, other):
        """Replaces NumberProxy.__divmod__ (which fails in 0.2.6): Python's divmod is (a // b, a % b)."""
        return self // other, self % other

    return __divmod__


@patch(
    "thunder.core.proxies:NumberProxy.__rdivmod__",
    summary="divmod(a, b) with a Python number first is (a // b, a % b), each symbolic",
    why="0.2.6 resolves no method for divmod.",
    upstream="Lightning-AI/lightning-thunder#2779",
    replaces=True,
)
def _rdivmod(original):
    def __rdivmod__(self, other):
        """Replaces NumberProxy.__rdivmod__ (which fails in 0.2.6): Python's divmod is (a // b, a % b)."""
        return other // self, other % self

    return __rdivmod__


def _renamed_keeps_its_expression(original):
    def replace(self, **changes):
        copy = original(self, **changes)
        algebra.carry(self, copy)
        return copy

    return replace


for _class in ("NumberProxy", "IntegerProxy", "FloatProxy", "ComplexProxy"):
    patch(
        f"thunder.core.proxies:{_class}.replace",
        summary=f"{_class}.replace (and replace_name) copies keep the number's expression over the inputs",
        why=(
            "thunder renames numbers after the variables that hold them (`batch, length, _ = x.shape`); the "
            "renamed copies had no expression, so a backward comparing them could not be guarded and "
            "fell back to exact shapes."
        ),
        upstream="Lightning-AI/lightning-thunder#463",
    )(_renamed_keeps_its_expression)
del _class


def _derive(original):
    arity = 2 if original.__name__ == "_elementwise_binary_helper" else 1

    @opaque
    def helper(*operands_and_op):
        # (a, b, name, fn[, type_promotion_kind]) or (a, name, fn[, type_promotion_kind])
        recorder = guard_recorder.current()
        operands, fn = operands_and_op[:arity], operands_and_op[arity + 1]
        if recorder is not None and fn in algebra.COMPARISONS:
            decided = _decided_in_a_meta(recorder, operands, fn)
            if decided is not None:
                return decided
        result = original(*operands_and_op)
        if recorder is not None:
            if isinstance(result, NumberProxy) and any(algebra.is_data_dependent(o) for o in operands):
                algebra.mark_data_dependent(result)
            elif any(algebra.is_symbolic(o) for o in operands):
                expr = algebra.apply(fn, operands)
                if isinstance(result, NumberProxy):
                    if expr is not None:
                        algebra.attach(result, expr)
                elif isinstance(result, (bool, int, float, complex)):
                    # Computed in Python outside a language context: the value escapes the trace here.
                    recorder.observe_value(_Transient(expr), result)
        return result

    return staticmethod(helper)


def _decided_in_a_meta(recorder, operands: tuple, fn) -> bool | None:
    """The truth of a comparison of symbolic numbers made inside a symbol's meta function, recorded as the
    guard it implies; None to leave the comparison to thunder.

    thunder records each comparison as a bound symbol whose boolean proxy a meta function's branch or check
    then converts with ``bool()`` (which records the guard), and DCE later drops the bound symbol: in the
    inference benchmark's prefill, 800 comparisons (broadcasting, reshape, indexing checks) cost a tenth of
    thunder's compile that way. A bool with its guard is what such a branch sees; a meta that uses the result as
    a number gets a constant that the guard pins (a program no less valid, possibly more specialized). Code
    the interpreter runs at the trace's top level (the user's) keeps its proxies, as does building a backward
    (its stand-in recorder turns guards it cannot check into exact shapes)."""
    trace = get_tracectx()
    if trace is None or trace.peek_scope() is trace.bound_symbols or recorder.ignoring or recorder.stands_in:
        return None
    if not all(algebra.python_type(o) in (bool, int, float) for o in operands) or not any(
        algebra.is_symbolic(o) for o in operands
    ):
        return None  # a tensor, a complex, or numbers without expressions: thunder's own path
    if any(algebra.is_data_dependent(o) for o in operands) or (expr := algebra.apply(fn, operands)) is None:
        return None
    truth = fn(*(o.value if isinstance(o, NumberProxy) else o for o in operands))
    recorder.observe_condition(expr, truth)
    return truth


class _Transient:
    """Stands for a number that exists only as an expression (no proxy was created for it)."""

    def __init__(self, expr):
        if expr is not None:
            algebra.attach(self, expr)
        self.name = "a Python number"


for _helper in ("_elementwise_binary_helper", "_elementwise_unary_helper"):
    patch(
        f"thunder.core.proxies:NumberProxy.{_helper}",
        summary="attaches to each number it computes the expression of that number over the trace's inputs; "
        "a comparison a symbol's meta function makes is a bool with its guard, not a bound symbol",
        why="Guards must be re-evaluated in the prologue from the inputs; the expression says how. A meta "
        "function's comparison was recorded only for DCE to drop it (see _decided_in_a_meta).",
        upstream="Lightning-AI/lightning-thunder#463",
    )(lambda original: _derive(original.__func__))
del _helper


# --- Number operations 0.2.6 lacks or gets wrong: computed with Python's own semantics ---------------


def _number_method(op: str, *, reflected: bool = False, floats_only: bool = False):
    def make(original):
        @opaque
        def method(self, *other):
            operands = (*other, self) if reflected else (self, *other)
            if floats_only and not any(isinstance(o, (float, FloatProxy)) for o in operands):
                return original(self, *other)
            if any(isinstance(o, TensorProxy) for o in operands):
                return original(self, *other)
            if op == "pow" and all(algebra.python_type(o) in (int, bool) for o in operands):
                bool(operands[1] >= 0)  # int ** int is an int, or a float for a negative exponent: guarded
            return apply_number_op(op, *operands)

        method.__name__ = original.__name__
        method.__doc__ = (
            f"Replaces NumberProxy.{original.__name__}: computes Python's {op} through python_number_op, "
            "because 0.2.6 raises, returns the wrong type, or cannot decompose it for these operands."
        )
        return method

    return make


for _method, _op, _options in (
    ("__lshift__", "lshift", {}),
    ("__rlshift__", "lshift", {"reflected": True}),
    ("__rshift__", "rshift", {}),
    ("__rrshift__", "rshift", {"reflected": True}),
    ("__pos__", "pos", {}),
    ("__invert__", "invert", {}),
    ("__round__", "round", {}),
    ("__ceil__", "ceil", {}),
    ("__floor__", "floor", {}),
    ("__trunc__", "trunc", {}),
    ("__floordiv__", "floordiv", {"floats_only": True}),
    ("__rfloordiv__", "floordiv", {"reflected": True, "floats_only": True}),
    ("__mod__", "mod", {"floats_only": True}),
    ("__rmod__", "mod", {"reflected": True, "floats_only": True}),
    ("__pow__", "pow", {}),
    ("__rpow__", "pow", {"reflected": True}),
):
    patch(
        f"thunder.core.proxies:NumberProxy.{_method}",
        summary=f"NumberProxy.{_method} computes Python's {_op}"
        + (" (for float operands)" if _options.get("floats_only") else ""),
        why=(
            "0.2.6 raises NotImplementedError for shifts, has no method for unary +, returns floats from "
            "round/ceil/floor/trunc, cannot decompose // and % of floats (Number x Number where), and types "
            "int ** int by its first value (then casts a float result back to int: 2 ** -1 gave 0)."
        ),
        upstream="Lightning-AI/lightning-thunder#2779",
        replaces=True,
    )(_number_method(_op, **_options))
del _method, _op, _options


# Upstream functions that compare a tensor proxy's ``numel`` attribute with a number.
_NUMEL_COMPARERS = (
    ("thunder.torch", "_softmax"),
    ("thunder.torch", "full"),
    ("thunder.torch", "local_response_norm"),
    ("thunder.core.prims", "_argmin_argmax_meta"),
    ("thunder.core.prims", "item_meta"),
    ("thunder.core.prims", "_multinomial_meta"),
    ("thunder.core.prims", "take_meta"),
    ("thunder.core.prims", "index_add_meta"),
)


@opaque
@functools.cache
def _numel_comparers() -> frozenset:
    """The code objects of ``_NUMEL_COMPARERS`` (a symbol's: its meta's, unwrapped). Opaque: traced code that reads
    ``x.numel`` interprets the ``__getattr__`` below, and the jit runs a cached function's body uncached, which
    interpreted the imports here at every read (about 0.4 s each)."""
    codes = set()
    for module_name, name in _NUMEL_COMPARERS:
        fn = getattr(importlib.import_module(module_name), name)
        codes.add(inspect.unwrap(getattr(fn, "meta", fn)).__code__)
    return frozenset(codes)


@patch(
    "thunder.core.proxies:TensorProxy.__getattr__",
    summary="read by the upstream functions that compare it with a number (softmax's and full's, argmax's, "
    "take's and index_add's checks...), a tensor's numel attribute is its element count under symbolic values",
    why=(
        "Under symbolic values thunder defers the count: the attribute is a function (`a.numel()` computes "
        "it), so `a.numel == 0` was always False and `fill_value.numel != 1` always True: softmax over an "
        "empty dim took the amax path and failed, full() refused a 0-d tensor as its fill value, and the "
        "checks of argmax, take and index_add passed without looking. Code that calls it (`a.numel()`) "
        "still gets a function. Either counts from `shape`: 0.2.6 multiplies the sizes the proxy was made with, "
        "which the operator computing the count does not name (nanoGPT's nll_loss under symbolic values failed "
        "thunder's own trace checker)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _getattr(original):
    @functools.wraps(original)
    def __getattr__(self, attr: str, /):
        value = original(self, attr)
        if attr == "numel" and callable(value) and not isinstance(self._numel, int):  # (the sizes are symbolic)
            if sys._getframe(1).f_code in _numel_comparers():
                return _element_count(self)
            return lambda: _element_count(self)  # (not a partial: the jit runs a partial natively)
        return value

    return __getattr__


def _element_count(t: TensorProxy):
    """The product of ``t.shape``, which under symbolic values records where the sizes come from (thunder's
    deferred count multiplies them without: its products used numbers that no enclosing operator names)."""
    count = 1
    for size in t.shape:
        count = count * size
    return count
