"""The algebra of symbolic numbers: expressions over a trace's inputs, simplified, and what they imply.

While tracing under symbolic values, every NumberProxy derived from an input (a tensor dim or a number
argument) through number operations carries an :class:`Expr` saying how to recompute it from the
inputs. A guard is a bool-valued expression the prologue re-evaluates on every call (see
:mod:`thunder_symbolic.guards.prologue`).

Expressions are trees of :class:`Op` nodes over :class:`InputDim`, :class:`NumberInput` and
:class:`Const` leaves. Those built of integers only (tensor dims, int arguments, int constants) are
also sympy expressions, with torch's Python-semantics integer functions (``FloorDiv``, ``PythonMod``):
:func:`simplify` canonicalizes them (``x.shape[1] == ((x.shape[1] + 1) - 1) // 1`` holds for every
input) and :class:`Facts` decides a guard from the guards already kept, by value-range analysis
(``bound_sympy``) over dims, which are integers >= 0, narrowed by the kept guards (``x.shape[0] > 8``
makes ``x.shape[0] > 4`` redundant). Anything else (floats, bit operations) is left as traced.

Every expression renders to Python source, fully parenthesized, so that re-evaluation has exactly
Python's semantics, the same the trace used for the observed values.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, Max, Min, PythonMod, simple_floordiv_gcd
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

__all__ = [
    "Const",
    "Expr",
    "Facts",
    "InputDim",
    "NumberInput",
    "Op",
    "Symbols",
    "always_holds",
    "apply",
    "compare",
    "equals",
    "negate",
    "provably_equal",
    "redundant",
    "simplify",
    "truth",
]

ATTRIBUTE = "_thunder_symbolic_expr"
DATA_DEPENDENT = "_thunder_symbolic_data_dependent"


# Expressions ---------------------------------------------------------------------------------------


class Expr:
    """A number computed from the inputs of a trace."""

    def render(self, name_of: Callable[[Any], str]) -> str:
        raise NotImplementedError

    def leaves(self) -> list[Any]:
        """The input proxies (tensors or numbers) this expression reads, in first-use order."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class NumberInput(Expr):
    proxy: Any

    def render(self, name_of):
        return name_of(self.proxy)

    def leaves(self):
        return [self.proxy]


@dataclass(frozen=True, eq=False)
class InputDim(Expr):
    tensor: Any
    index: int

    def render(self, name_of):
        return f"{name_of(self.tensor)}.shape[{self.index}]"

    def leaves(self):
        return [self.tensor]


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: int | float | complex | bool

    def render(self, name_of):
        return literal(self.value)

    def leaves(self):
        return []


@dataclass(frozen=True)
class Operation:
    """A Python operation on numbers: its source form and, for integers, its sympy counterpart."""

    name: str
    source: str  # str.format template over the operands' sources
    integer: Callable[..., Any] | None = None  # the operands' sympy forms -> the result's, or None


@dataclass(frozen=True, eq=False)
class Op(Expr):
    operation: Operation
    operands: tuple[Expr, ...]

    def render(self, name_of):
        return self.operation.source.format(*(o.render(name_of) for o in self.operands))

    def leaves(self):
        return [leaf for o in self.operands for leaf in o.leaves()]


def _by_a_positive_constant(fn):
    """The algebra's floor division (torch's FloorDiv) and remainder simplify for positive divisors only, as
    torch uses them (FloorDiv made ``(n // 2) // -2`` into ``n // -4``, wrong for n = 1): a division by anything
    else is left as traced."""
    return lambda a, b: fn(a, b) if b.is_Integer and b > 0 else None


def _floor_division(a, b):
    """``FloorDiv(a, b)`` with the factor common to ``b`` and every term of ``a`` (torch's own
    ``simple_floordiv_gcd``) divided out first, which is exact: ``FloorDiv`` divides it out itself through
    ``sympy.simplify``, whose first call in a process imports ``sympy.physics`` (about 0.3 s of the inference
    benchmark's first compile) and which tries every simplification sympy has."""
    common = simple_floordiv_gcd(a, b)
    return FloorDiv(a / common, b / common)


def _remainder(a, b):
    """``PythonMod(a, b)`` for a positive int ``b``, built without PythonMod's evaluation, which asks sympy's
    assumptions whether ``a`` is even, a multiple of ``b``, smaller than ``b``: about 3 ms the first time a process
    meets a remainder (23 ms of the inference benchmark's first compile, on eight). What it decides of the sums
    that traced sizes make is kept: terms that are multiples of ``b`` drop out and the constant is reduced modulo
    ``b``; :class:`Facts` bound what is left to ``[0, b - 1]``, as any remainder."""
    if a.is_Integer:
        return a % b
    constant, rest = a.as_coeff_Add()
    kept = [t for t in sympy.Add.make_args(rest) if t.as_coeff_Mul()[0] % b != 0]  # integer factors: no truediv
    if not kept:
        return constant % b
    return PythonMod(sympy.Add(constant % b, *kept), b, evaluate=False)


def _nonnegative_power(base, exponent):
    return base**exponent if exponent.is_Integer and exponent >= 0 else None


def _relational(kind):
    return lambda a, b: _canonical_relation(kind, a, b) if not (_is_boolean(a) or _is_boolean(b)) else None


_SWAPPED = {sympy.Lt: sympy.Gt, sympy.Gt: sympy.Lt, sympy.Le: sympy.Ge, sympy.Ge: sympy.Le}


def _canonical_relation(kind, a, b):
    """``kind(a, b)`` with the terms of ``a - b`` moved to the side where they are positive and the constant
    to the right: ``start != start + x.shape[1]`` is ``x.shape[1] != 0``, and a comparison written either
    way round is one guard.

    A comparison of two numbers is decided (``True`` or ``False``); any other is left unevaluated: sympy
    would try to decide it through its assumptions, which costs more than the rest of a guard's
    simplification the first time a process meets each expression (about a twentieth of the inference
    benchmark's first compile), and :class:`Facts` decide it anyway (``x.shape[0] >= 0`` always holds),
    from the inputs' ranges and the guards kept, before a guard is kept."""
    constant, rest = (a - b).as_coeff_Add()
    terms = sympy.Add.make_args(rest) if rest != 0 else ()
    positive = sympy.Add(*(t for t in terms if not t.could_extract_minus_sign()))
    negative = sympy.Add(*(-t for t in terms if t.could_extract_minus_sign()))
    if positive != 0:
        return kind(positive, negative - constant, evaluate=False)
    if negative == 0:
        return kind(constant, 0)
    if constant != 0:
        return kind(constant, negative, evaluate=False)
    return _SWAPPED.get(kind, kind)(negative, sympy.Integer(0), evaluate=False)


def _truth(a):
    return a if _is_boolean(a) else sympy.Ne(a, 0)


def _is_boolean(e) -> bool:
    return isinstance(e, sympy.logic.boolalg.Boolean) and not isinstance(e, sympy.Expr)  # a Symbol is both


def _integer(fn):
    return lambda *operands: None if any(_is_boolean(o) for o in operands) else fn(*operands)


def _operation(name: str, source: str, integer=None) -> Operation:
    return Operation(name, source, integer)


_BINARY: dict[Callable, Operation] = {
    operator.add: _operation("add", "({} + {})", _integer(operator.add)),
    operator.sub: _operation("sub", "({} - {})", _integer(operator.sub)),
    operator.mul: _operation("mul", "({} * {})", _integer(operator.mul)),
    operator.truediv: _operation("truediv", "({} / {})"),
    operator.floordiv: _operation("floordiv", "({} // {})", _integer(_by_a_positive_constant(_floor_division))),
    operator.mod: _operation("mod", "({} % {})", _integer(_by_a_positive_constant(_remainder))),
    operator.pow: _operation("pow", "({} ** {})", _integer(_nonnegative_power)),
    operator.and_: _operation("and", "({} & {})"),
    operator.or_: _operation("or", "({} | {})"),
    operator.xor: _operation("xor", "({} ^ {})"),
    operator.lshift: _operation("lshift", "({} << {})"),
    operator.rshift: _operation("rshift", "({} >> {})"),
    operator.eq: _operation("eq", "({} == {})", _relational(sympy.Eq)),
    operator.ne: _operation("ne", "({} != {})", _relational(sympy.Ne)),
    operator.lt: _operation("lt", "({} < {})", _relational(sympy.Lt)),
    operator.le: _operation("le", "({} <= {})", _relational(sympy.Le)),
    operator.gt: _operation("gt", "({} > {})", _relational(sympy.Gt)),
    operator.ge: _operation("ge", "({} >= {})", _relational(sympy.Ge)),
    builtins.divmod: _operation("divmod", "divmod({}, {})"),
    builtins.max: _operation("max", "max({}, {})", _integer(Max)),
    builtins.min: _operation("min", "min({}, {})", _integer(Min)),
    builtins.round: _operation("round", "round({}, {})"),
    torch.sym_max: _operation("sym_max", "torch.sym_max({}, {})", _integer(Max)),
    torch.sym_min: _operation("sym_min", "torch.sym_min({}, {})", _integer(Min)),
}
_UNARY: dict[Callable, Operation] = {
    operator.neg: _operation("neg", "(-{})", _integer(operator.neg)),
    operator.pos: _operation("pos", "(+{})", _integer(lambda a: a)),
    operator.inv: _operation("invert", "(~{})"),
    operator.not_: _operation("not", "(not {})", lambda a: sympy.Not(_truth(a))),
    builtins.abs: _operation("abs", "abs({})", _integer(sympy.Abs)),
    builtins.round: _operation("round", "round({})", _integer(lambda a: a)),  # of an int: the int
    math.ceil: _operation("ceil", "math.ceil({})", _integer(lambda a: a)),
    math.floor: _operation("floor", "math.floor({})", _integer(lambda a: a)),
    math.trunc: _operation("trunc", "math.trunc({})", _integer(lambda a: a)),
}
_TRUTH = _operation("bool", "bool({})", _truth)
_SAME_FLOAT = _operation("same_float", "same_float({}, {})")
COMPARISONS = frozenset({operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge})
_COMPARISON_OPERATIONS = frozenset(_BINARY[op] for op in COMPARISONS)


def apply(fn: Callable, operands: tuple[Any, ...]) -> Expr | None:
    """The expression of ``fn(*operands)``, or None when ``fn`` or an operand cannot be expressed."""
    operation = (_BINARY if len(operands) == 2 else _UNARY).get(fn)
    exprs = tuple(expr_of(o) for o in operands)
    if operation is None or any(e is None for e in exprs):
        return None
    return Op(operation, exprs)


def compare(fn: Callable, left: Expr, right: Expr) -> Expr:
    return Op(_BINARY[fn], (left, right))


def equals(expr: Expr, value: Any) -> Expr:
    """``expr == value``: for a float, equal as Python code can tell them apart (see :func:`same_float`)."""
    if isinstance(value, float):
        return Op(_SAME_FLOAT, (expr, Const(value)))
    return compare(operator.eq, expr, Const(value))


def truth(expr: Expr) -> Expr:
    """The condition ``expr`` is true: the expression itself for a comparison, else ``bool(expr)``."""
    return expr if isinstance(expr, Op) and expr.operation in _COMPARISON_OPERATIONS else Op(_TRUTH, (expr,))


def negate(expr: Expr) -> Expr:
    return Op(_UNARY[operator.not_], (expr,))


def type_is(expr: Expr, python_type: type) -> Expr:
    return Op(_operation("type_is", f"(type({{}}) is {python_type.__name__})"), (expr,))


def literal(value: Any) -> str:
    """Python source for a number constant (``repr`` is not valid source for inf and nan)."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, complex) and not (math.isfinite(value.real) and math.isfinite(value.imag)):
        return f"complex({str(value)!r})"
    return repr(value)


def same_float(a: float, b: float) -> bool:
    """Equality of floats as Python code can tell them apart: ``-0.0`` is not ``0.0`` (``math.copysign``
    differs), and a NaN is the same as a NaN (a program traced for NaN stays valid for NaN)."""
    if math.isnan(a):
        return math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


# What guard expressions may call, besides the builtins.
NAMESPACE = {"math": math, "torch": torch, "same_float": same_float}


# Numbers and proxies -------------------------------------------------------------------------------


def python_type(x: Any) -> type:
    """The Python type of a number or of the number a proxy stands for."""
    return getattr(x, "python_type", None) or type(x)


def expr_of(x: Any) -> Expr | None:
    """The expression of a number: a constant for a Python number, the attached one for a proxy."""
    if isinstance(x, (bool, int, float, complex)):
        return Const(x)
    return getattr(x, ATTRIBUTE, None)


def attach(proxy: Any, expr: Expr) -> None:
    object.__setattr__(proxy, ATTRIBUTE, expr)


def carry(source: Any, copy: Any) -> None:
    """Give ``copy`` (a renamed ``source``: the same number) the expression and data dependence of ``source``."""
    for attribute in (ATTRIBUTE, DATA_DEPENDENT):
        if hasattr(source, attribute):
            object.__setattr__(copy, attribute, getattr(source, attribute))


def is_symbolic(x: Any) -> bool:
    return getattr(x, ATTRIBUTE, None) is not None


def is_data_dependent(x: Any) -> bool:
    """Whether ``x`` is a number whose value depends on tensor data (``.item()``): unknown while tracing."""
    return getattr(x, DATA_DEPENDENT, False) or (hasattr(x, "python_type") and getattr(x, "value", 0) is None)


def mark_data_dependent(proxy: Any) -> None:
    object.__setattr__(proxy, DATA_DEPENDENT, True)


# Integer expressions as sympy ----------------------------------------------------------------------


class Symbols:
    """The sympy symbol of each integer input of one trace: dims are integers >= 0, int arguments integers."""

    def __init__(self):
        self._by_key: dict[tuple, sympy.Symbol] = {}
        self.leaf: dict[sympy.Symbol, Expr] = {}

    def of(self, leaf: Expr) -> sympy.Symbol | None:
        if isinstance(leaf, InputDim):
            key, assumptions = (id(leaf.tensor), leaf.index), {"integer": True, "nonnegative": True}
        elif isinstance(leaf, NumberInput) and getattr(leaf.proxy, "python_type", None) is int:
            key, assumptions = (id(leaf.proxy),), {"integer": True}
        else:
            return None
        symbol = self._by_key.get(key)
        if symbol is None:
            symbol = self._by_key[key] = sympy.Symbol(f"s{len(self._by_key)}", **assumptions)
            self.leaf[symbol] = leaf
        return symbol

    @staticmethod
    def kind_range(symbol: sympy.Symbol) -> tuple[Any, Any]:
        """The bounds every input of the symbol's kind has: a dim is >= 0."""
        return (0 if symbol.is_nonnegative else -int_oo, int_oo)


def to_sympy(expr: Expr, symbols: Symbols) -> sympy.Basic | None:
    """``expr`` as a sympy expression over integer symbols, or None when it is not integer algebra."""
    if isinstance(expr, Const):
        return sympy.Integer(expr.value) if type(expr.value) is int else None
    if isinstance(expr, (InputDim, NumberInput)):
        return symbols.of(expr)
    if not isinstance(expr, Op) or expr.operation.integer is None:
        return None
    operands = [to_sympy(o, symbols) for o in expr.operands]
    if any(o is None for o in operands):
        return None
    try:
        return expr.operation.integer(*operands)
    except (ZeroDivisionError, TypeError, ValueError):  # x // 0 and the like: left as traced
        return None


def provably_equal(a: Any, b: Any) -> bool:
    """Whether two numbers are the same integer whatever the inputs: the same proxy, equal ints, or two
    proxies of integer expressions with one canonical form (two proxies of ``2 * x.shape[0]``, computed
    twice). Deciding it records no guard; False means "not proven", not "different"."""
    if a is b or (type(a) is int and type(b) is int and a == b):
        return True
    ea, eb = expr_of(a), expr_of(b)
    if ea is None or eb is None or isinstance(ea, Const) or isinstance(eb, Const):
        return False
    symbols = Symbols()
    sa, sb = to_sympy(ea, symbols), to_sympy(eb, symbols)
    return sa is not None and sb is not None and sympy.expand(sa - sb) == 0


@dataclass(frozen=True, eq=False)
class Simplified(Expr):
    """An integer expression in sympy's canonical form, rendered back to Python over the same inputs."""

    form: sympy.Basic
    symbols: Symbols

    def render(self, name_of):
        return _render(self.form, lambda s: self.symbols.leaf[s].render(name_of))

    def leaves(self):
        ordered = sorted(self.form.free_symbols, key=lambda s: int(s.name[1:]))
        return [leaf for s in ordered for leaf in self.symbols.leaf[s].leaves()]


def simplify(expr: Expr, symbols: Symbols) -> tuple[Expr, sympy.Basic | None]:
    """``expr`` simplified (or as it was, when not integer algebra or not renderable) and its sympy form."""
    form = to_sympy(expr, symbols)
    if form is None:
        return expr, None
    try:
        _render(form, lambda s: s.name)
    except _NotPython:
        return expr, form
    return Simplified(form, symbols), form


class _NotPython(Exception):
    """A sympy form this module does not render as Python source (the traced expression is used)."""


def _render(e: sympy.Basic, name_of: Callable[[sympy.Symbol], str]) -> str:
    r = functools.partial(_render, name_of=name_of)
    if e is sympy.true or e is sympy.false:
        return str(bool(e))
    if isinstance(e, sympy.Integer):
        return str(int(e))
    if isinstance(e, sympy.Symbol):
        return name_of(e)
    if isinstance(e, sympy.Add):
        terms = sorted(e.as_ordered_terms(), key=lambda t: t.as_coeff_Mul()[0].is_negative)  # x - n, not -n + x
        out = r(terms[0])
        for term in terms[1:]:
            coefficient, _ = term.as_coeff_Mul()
            out += f" - {r(-term)}" if coefficient.is_negative else f" + {r(term)}"
        return f"({out})"
    if isinstance(e, sympy.Mul):
        coefficient, rest = e.as_coeff_Mul()
        if not coefficient.is_Integer:
            raise _NotPython(e)
        if coefficient == -1:
            return f"(-{r(rest)})"
        factors = ([] if coefficient == 1 else [str(int(coefficient))]) + [r(f) for f in rest.as_ordered_factors()]
        return f"({' * '.join(factors)})"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0:
        return f"({r(e.base)} ** {int(e.exp)})"
    if isinstance(e, FloorDiv):
        return f"({r(e.args[0])} // {r(e.args[1])})"
    if isinstance(e, (PythonMod, sympy.Mod)):  # both take the sign of the divisor, as Python's %
        return f"({r(e.args[0])} % {r(e.args[1])})"
    if isinstance(e, (Max, Min, sympy.Max, sympy.Min)):
        name = "max" if isinstance(e, (Max, sympy.Max)) else "min"
        return f"{name}({', '.join(r(a) for a in e.args)})"
    if isinstance(e, sympy.Abs):
        return f"abs({r(e.args[0])})"
    if isinstance(e, sympy.core.relational.Relational):
        return f"({r(e.lhs)} {e.rel_op} {r(e.rhs)})"
    if isinstance(e, sympy.Not):
        return f"(not {r(e.args[0])})"
    if isinstance(e, (sympy.And, sympy.Or)):
        return "(" + f" {type(e).__name__.lower()} ".join(r(a) for a in e.args) + ")"
    raise _NotPython(e)


# What guards imply ---------------------------------------------------------------------------------


def always_holds(condition: Expr) -> bool:
    """Whether ``condition`` holds for every input, from its form alone (dims are >= 0, nothing else known)."""
    symbols = Symbols()
    form = to_sympy(condition, symbols)
    return form is not None and Facts(symbols).decide(form) is True


_DECIDE = {
    "==": lambda lo, hi: True if lo == hi == 0 else False if lo > 0 or hi < 0 else None,
    "!=": lambda lo, hi: True if lo > 0 or hi < 0 else False if lo == hi == 0 else None,
    "<": lambda lo, hi: True if hi < 0 else False if lo >= 0 else None,
    "<=": lambda lo, hi: True if hi <= 0 else False if lo > 0 else None,
    ">": lambda lo, hi: True if lo > 0 else False if hi <= 0 else None,
    ">=": lambda lo, hi: True if lo >= 0 else False if hi < 0 else None,
}


class Facts:
    """What the guards kept so far prove: the conditions themselves, and bounds on what they compare.

    A kept ``lhs op rhs`` bounds the expression ``lhs - rhs`` (up to a constant and its sign): ``k < n``
    bounds ``k - n`` above by -1, ``x.shape[0] > 8`` bounds the dim below by 9. A condition is decided
    (always true, or never) when its canonical form is a constant, when it was kept already, or when the
    range of its ``lhs - rhs`` settles it: the bound kept for that expression, or value-range analysis
    over the inputs' ranges (dims are >= 0, narrowed by the bounds kept on them). Two inputs kept equal
    (``x.shape[0] == y.shape[0]``) are one: the later one is replaced by the earlier everywhere.
    """

    def __init__(self, symbols: Symbols):
        self.symbols = symbols
        self.known: set[sympy.Basic] = set()
        self.bounds: dict[sympy.Basic, tuple[Any, Any]] = {}
        self.same: dict[sympy.Symbol, sympy.Symbol] = {}  # an input -> the earlier one it is kept equal to

    def _one_for_equal_inputs(self, e: sympy.Basic) -> sympy.Basic:
        return e.xreplace(self.same) if self.same and e.free_symbols & self.same.keys() else e

    def decide(self, condition: sympy.Basic) -> bool | None:
        condition = self._one_for_equal_inputs(condition)
        if condition is sympy.true or condition is sympy.false:
            return bool(condition)
        if condition in self.known:
            return True
        if isinstance(condition, sympy.Not):
            inner = self.decide(condition.args[0])
            return None if inner is None else not inner
        if not isinstance(condition, sympy.core.relational.Relational):
            return None
        low, high = self._range(condition.lhs - condition.rhs)
        return _DECIDE[condition.rel_op](low, high)

    def learn(self, condition: sympy.Basic) -> None:
        """Keep ``condition`` (one the caller knows to hold) and the bound it puts on what it compares."""
        condition = self._one_for_equal_inputs(condition)
        self.known.add(condition)
        if not isinstance(condition, sympy.core.relational.Relational):
            return
        if condition.rel_op == "==" and all(isinstance(side, sympy.Symbol) for side in condition.args):
            return self._equal(*condition.args)
        constant, sign, term = _split(condition.lhs - condition.rhs)
        if term is None:
            return
        op = condition.rel_op if sign > 0 else _MIRRORED[condition.rel_op]  # sign * term + c op 0
        value = -constant * sign  # term op value
        low, high = self._range(term)
        if op == "==":
            low, high = max(low, value), min(high, value)
        elif op in (">", ">="):
            low = max(low, value + 1 if op == ">" else value)
        elif op in ("<", "<="):
            high = min(high, value - 1 if op == "<" else value)
        elif op == "!=":  # excludes an end of the range only
            low, high = low + 1 if low == value else low, high - 1 if high == value else high
        if low <= high:
            self.bounds[term] = (low, high)

    def _equal(self, a: sympy.Symbol, b: sympy.Symbol) -> None:
        """Replace the later of two inputs kept equal by the earlier, in what is known and from now on."""
        earlier, later = sorted((a, b), key=lambda s: int(s.name[1:]))
        low, high = self._range(earlier)
        later_low, later_high = self._range(later)
        self.same = {s: (earlier if root == later else root) for s, root in self.same.items()}
        self.same[later] = earlier
        bounds, self.bounds = self.bounds, {}
        for term, (term_low, term_high) in bounds.items():
            term = term.xreplace(self.same)
            if term in self.bounds:
                term_low, term_high = max(term_low, self.bounds[term][0]), min(term_high, self.bounds[term][1])
            self.bounds[term] = (term_low, term_high)
        self.bounds[earlier] = (max(low, later_low), min(high, later_high))
        self.known = {self._one_for_equal_inputs(c) for c in self.known}

    def _range(self, e: sympy.Basic) -> tuple[Any, Any]:
        """Bounds of the integer expression ``e``: the kept bound of ``e`` (up to sign and a constant),
        intersected with value-range analysis over the inputs' ranges."""
        low, high = -int_oo, int_oo
        constant, sign, term = _split(e)
        if term is None:
            return constant, constant
        if term in self.bounds:
            known_low, known_high = self.bounds[term]
            if sign < 0:
                known_low, known_high = -known_high, -known_low
            low, high = known_low + constant, known_high + constant
        inputs = frozenset((s, self.bounds.get(s) or self.symbols.kind_range(s)) for s in e.free_symbols)
        analysed = _analysed_range(e, inputs)
        if analysed is None:
            return low, high
        return max(low, analysed[0]), min(high, analysed[1])


_MIRRORED = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}


def _split(e: sympy.Basic) -> tuple[int, int, sympy.Basic | None]:
    """``e`` as ``constant + sign * term`` with ``term`` in a canonical sign (None for a constant ``e``)."""
    constant, rest = e.as_coeff_Add()
    if not constant.is_Integer:
        return 0, 1, e
    if rest == 0:
        return int(constant), 1, None
    if rest.could_extract_minus_sign():
        return int(constant), -1, -rest
    return int(constant), 1, rest


def redundant(forms: list[sympy.Basic | None], symbols: Symbols) -> set[int]:
    """The positions of conditions the others imply, latest first: those can be dropped together (each
    one dropped is implied by what remains, which implies every one dropped before it)."""
    dropped: set[int] = set()
    equalities = [f.args for f in forms if isinstance(f, sympy.Eq) and all(isinstance(a, sympy.Symbol) for a in f.args)]
    for i in reversed(range(len(forms))):
        if forms[i] is None:
            continue
        related = set(forms[i].free_symbols)  # and the inputs kept equal to them
        grown = True
        while grown:
            grown = False
            for pair in equalities:
                if not related.isdisjoint(pair) and not related.issuperset(pair):
                    related.update(pair)
                    grown = True
        facts = Facts(symbols)
        for j, other in enumerate(forms):
            if j != i and j not in dropped and other is not None and not related.isdisjoint(other.free_symbols):
                facts.learn(other)
        if facts.decide(forms[i]) is True:
            dropped.add(i)
    return dropped


@functools.lru_cache(maxsize=4096)
def _analysed_range(e: sympy.Basic, inputs: frozenset) -> tuple[Any, Any] | None:
    """Value-range analysis of ``e`` over its inputs' ``(symbol, (low, high))``, or None where it does not
    cover ``e``. Remembered: a compile asks about the same sizes under the same bounds many times (a trace's
    guards, their redundancy, the next trace's), and one analysis costs about 0.4 ms."""
    ranges = {symbol: ValueRanges(low, high) for symbol, (low, high) in inputs}
    e = _bounded_remainders(e, ranges)
    if e is None:
        return None
    try:
        bound = bound_sympy(e, ranges)
    except Exception:  # noqa: BLE001  (an expression value-range analysis does not cover: its own bounds)
        return None
    return bound.lower, bound.upper


def _bounded_remainders(e: sympy.Basic, ranges: dict) -> sympy.Basic | None:
    """``e`` with each ``a % c`` (``c`` a positive int, the only remainders in the algebra) replaced by a
    fresh symbol over ``[0, c - 1]``; None when ``e`` has another remainder. torch's value ranges give a
    remainder the sign of its dividend (``-n % 3`` in ``[-2, 0]``), as in C; Python's is in ``[0, c - 1]``."""
    for index, remainder in enumerate(e.atoms(PythonMod, sympy.Mod)):
        divisor = remainder.args[1]
        if not (divisor.is_Integer and divisor > 0):
            return None
        stand_in = sympy.Symbol(f"_remainder{index}", integer=True)
        ranges[stand_in] = ValueRanges(0, int(divisor) - 1)
        e = e.xreplace({remainder: stand_in})
    return e
