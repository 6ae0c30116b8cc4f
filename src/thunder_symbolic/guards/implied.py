"""Conditions that hold for every input, proven from their form alone.

Meta functions check invariants while thunder builds a backward (``numel == numel // 1`` after a
reshape, ``dim != -1``, ``dim + dim >= 0``). They need no guard when they hold whatever the inputs are:
tensor dims are never negative, and an expression compared with itself decides the comparison. A
condition this module cannot prove is not assumed: the caller guards it instead.
"""

from __future__ import annotations

import math

from thunder_symbolic.guards.expressions import Apply, Const, Expr, InputDim

__all__ = ["always_holds"]

_INF = math.inf
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


def _key(expr: Expr) -> str:
    return expr.render(lambda proxy: f"#{id(proxy)}")


def _binary(expr: Expr) -> tuple[str, Expr, Expr] | None:
    if isinstance(expr, Apply) and len(expr.operands) == 2 and expr.template.startswith("({} "):
        return expr.template[4:-4], *expr.operands
    return None


def _dims_only(expr: Expr) -> bool:
    """Built of tensor dims and int constants only: integers, so the algebra below is exact."""
    if isinstance(expr, Apply):
        return all(_dims_only(o) for o in expr.operands)
    return isinstance(expr, InputDim) or isinstance(expr, Const) and type(expr.value) is int


def _simplify(expr: Expr) -> Expr:
    if not isinstance(expr, Apply) or not _dims_only(expr):
        return expr
    expr = Apply(expr.template, tuple(_simplify(o) for o in expr.operands))
    parts = _binary(expr)
    if parts is None:
        return expr
    op, left, right = parts
    lv, rv = (getattr(o, "value", None) if isinstance(o, Const) else None for o in (left, right))
    if op == "*" and lv == 1 or op == "+" and lv == 0:
        return right
    if op in ("*", "//") and rv == 1 or op in ("+", "-") and rv == 0:
        return left
    if op == "-" and _key(left) == _key(right):
        return Const(0)
    return expr


def _interval(expr: Expr) -> tuple[float, float]:
    """Bounds of an integer expression: dims are >= 0, every other input is unbounded."""
    if isinstance(expr, InputDim):
        return 0, _INF
    if isinstance(expr, Const) and type(expr.value) is int:
        return expr.value, expr.value
    parts = _binary(expr)
    if parts is None:
        return -_INF, _INF
    op, left, right = parts
    (a, b), (c, d) = _interval(left), _interval(right)
    if op == "+":
        return a + c, b + d
    if op == "-":
        return a - d, b - c
    if op == "*" and a >= 0 and c >= 0:
        return a * c, b * d
    if op == "//" and isinstance(right, Const) and c > 0 and a >= 0:
        return a // c, b // c if b != _INF else _INF
    return -_INF, _INF


def _decided(op: str, left: Expr, right: Expr) -> bool:
    if _dims_only(left) and _dims_only(right) and _key(left) == _key(right):
        return op in ("==", "<=", ">=")
    (a, b), (c, d) = _interval(left), _interval(right)
    low, high = a - d, b - c  # bounds of left - right
    return {
        "==": low == high == 0,
        "!=": low > 0 or high < 0,
        "<": high < 0,
        "<=": high <= 0,
        ">": low > 0,
        ">=": low >= 0,
    }[op]


def always_holds(condition: Expr) -> bool:
    """Whether ``condition`` (a comparison, its negation or a truth test) holds for every input."""
    condition = _simplify(condition)
    negated = isinstance(condition, Apply) and condition.template == "(not {})"
    if negated or isinstance(condition, Apply) and condition.template == "bool({})":
        inner = condition.operands[0]
        parts = _binary(inner)
        if parts is not None and parts[0] in _NEGATED:
            op, left, right = parts
            return _decided(_NEGATED[op] if negated else op, left, right)
        return not negated and _decided("!=", inner, Const(0))
    parts = _binary(condition)
    return parts is not None and parts[0] in _NEGATED and _decided(*parts)
