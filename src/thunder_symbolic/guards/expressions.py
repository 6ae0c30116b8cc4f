"""Symbolic expressions of the numbers a trace computes from its inputs.

While tracing under symbolic values, every NumberProxy derived from an input (a tensor dim or a number
argument) through number operations carries an :class:`Expr` saying how to recompute it from the
inputs. A guard is such an expression plus the value the trace observed; the prologue re-evaluates it
on every call (see :mod:`thunder_symbolic.guards.prologue`).

Expressions render to Python source, fully parenthesized, so that re-evaluation has exactly Python's
semantics, the same the trace used for the observed values.
"""

from __future__ import annotations

import builtins
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

ATTRIBUTE = "_thunder_symbolic_expr"
DATA_DEPENDENT = "_thunder_symbolic_data_dependent"


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


@dataclass(frozen=True, eq=False)
class Apply(Expr):
    template: str  # str.format template over the operands' sources
    operands: tuple[Expr, ...]

    def render(self, name_of):
        return self.template.format(*(o.render(name_of) for o in self.operands))

    def leaves(self):
        return [leaf for o in self.operands for leaf in o.leaves()]


# Python operations that number proxies forward to (NumberProxy._elementwise_*_helper's ``fn``).
BINARY_TEMPLATES: dict[Callable, str] = {
    operator.add: "({} + {})",
    operator.sub: "({} - {})",
    operator.mul: "({} * {})",
    operator.truediv: "({} / {})",
    operator.floordiv: "({} // {})",
    operator.mod: "({} % {})",
    operator.pow: "({} ** {})",
    operator.and_: "({} & {})",
    operator.or_: "({} | {})",
    operator.xor: "({} ^ {})",
    operator.lshift: "({} << {})",
    operator.rshift: "({} >> {})",
    operator.eq: "({} == {})",
    operator.ne: "({} != {})",
    operator.lt: "({} < {})",
    operator.le: "({} <= {})",
    operator.gt: "({} > {})",
    operator.ge: "({} >= {})",
    builtins.divmod: "divmod({}, {})",
    builtins.max: "max({}, {})",
    builtins.min: "min({}, {})",
    builtins.round: "round({}, {})",
    torch.sym_max: "torch.sym_max({}, {})",
    torch.sym_min: "torch.sym_min({}, {})",
}
UNARY_TEMPLATES: dict[Callable, str] = {
    operator.neg: "(-{})",
    operator.pos: "(+{})",
    operator.inv: "(~{})",
    operator.not_: "(not {})",
    builtins.abs: "abs({})",
    builtins.round: "round({})",
    math.ceil: "math.ceil({})",
    math.floor: "math.floor({})",
    math.trunc: "math.trunc({})",
}
COMPARISONS = frozenset({operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge})


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


def apply(fn: Callable, operands: tuple[Any, ...]) -> Expr | None:
    """The expression of ``fn(*operands)``, or None when ``fn`` or an operand cannot be expressed."""
    templates = BINARY_TEMPLATES if len(operands) == 2 else UNARY_TEMPLATES
    template = templates.get(fn)
    exprs = tuple(expr_of(o) for o in operands)
    if template is None or any(e is None for e in exprs):
        return None
    return Apply(template, exprs)


def is_data_dependent(x: Any) -> bool:
    """Whether ``x`` is a number whose value depends on tensor data (``.item()``): unknown while tracing."""
    return getattr(x, DATA_DEPENDENT, False) or (hasattr(x, "python_type") and getattr(x, "value", 0) is None)


def mark_data_dependent(proxy: Any) -> None:
    object.__setattr__(proxy, DATA_DEPENDENT, True)
