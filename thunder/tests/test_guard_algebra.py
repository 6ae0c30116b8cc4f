"""The guard algebra: simplification with Python's integer semantics, conditions that always hold, and
guards that other guards imply. Expressions are written as Python source over ``x.shape[i]`` (dims, >= 0),
``n`` (an int argument) and ``f`` (a float argument), and checked against Python on a grid of values."""

import ast
import itertools
import math
import operator
import types

import pytest

from thunder_symbolic.guards import algebra
from thunder_symbolic.guards.algebra import Const, Facts, InputDim, NumberInput, Symbols


class _Proxy:
    def __init__(self, name, python_type=None):
        self.name, self.python_type = name, python_type


X, N, F = _Proxy("x"), _Proxy("n", int), _Proxy("f", float)
_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.Div: operator.truediv,
    ast.BitAnd: operator.and_,
}
_COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le}
_COMPARE |= {ast.Gt: operator.gt, ast.GtE: operator.ge}


def parse(source: str) -> algebra.Expr:
    """The expression a trace would record for ``source``."""

    def build(node):
        if isinstance(node, ast.Constant):
            return Const(node.value)
        if isinstance(node, ast.Subscript):
            return InputDim(X, node.slice.value)
        if isinstance(node, ast.Name):
            return NumberInput({"n": N, "f": F}[node.id])
        if isinstance(node, ast.BinOp):
            return algebra.Op(algebra._BINARY[_BINARY[type(node.op)]], (build(node.left), build(node.right)))
        if isinstance(node, ast.Compare):
            return algebra.compare(_COMPARE[type(node.ops[0])], build(node.left), build(node.comparators[0]))
        if isinstance(node, ast.UnaryOp):
            return (
                algebra.negate(build(node.operand))
                if isinstance(node.op, ast.Not)
                else algebra.Op(algebra._UNARY[operator.neg], (build(node.operand),))
            )
        if isinstance(node, ast.Call):
            operands = [build(a) for a in node.args]
            if node.func.id == "bool":
                return algebra.truth(operands[0])
            fn = {"max": max, "min": min, "abs": abs}[node.func.id]
            return algebra.Op((algebra._BINARY if len(operands) == 2 else algebra._UNARY)[fn], tuple(operands))
        raise ValueError(ast.dump(node))

    return build(ast.parse(source, mode="eval").body)


def render(expr) -> str:
    return expr.render(lambda proxy: proxy.name)


def evaluate(source: str, dims, n, f=1.5):
    try:
        return eval(source, dict(algebra.NAMESPACE), {"x": types.SimpleNamespace(shape=dims), "n": n, "f": f})
    except ZeroDivisionError:
        return ZeroDivisionError


# source -> its simplified rendering
SIMPLIFIED = {
    "x.shape[1] == ((((x.shape[1] - 0) + 1) - 1) // 1)": "True",
    "x.shape[1] >= 0": "True",
    "x.shape[1] != -1": "True",
    "not (n < 0)": "(n >= 0)",
    "not (x.shape[0] <= 2)": "(x.shape[0] > 2)",
    "(x.shape[0] - (x.shape[0] - 3)) == 3": "True",
    "n == x.shape[0] - n": "((2 * n) == x.shape[0])",
    "n != n + x.shape[1]": "(x.shape[1] != 0)",
    "x.shape[1] < x.shape[0] + 3": "(x.shape[1] < (x.shape[0] + 3))",
    "3 - x.shape[0] >= n": "(3 >= (x.shape[0] + n))",
    "0 < x.shape[0] - n": "(n < x.shape[0])",
    "0 < n - n": "False",
    "((x.shape[0] + 2) - 1) // 2 == 4": "(((x.shape[0] + 1) // 2) == 4)",
    "x.shape[0] * 1 + 0 > n": "(x.shape[0] > n)",
    "x.shape[0] % 1 == 0": "True",
    "(2 * x.shape[0]) % 2 == 0": "True",
    "n % 3 < 3": "((n % 3) < 3)",  # decided by value ranges (ALWAYS), not by the canonical form
    "n % -3 < 1": "True",  # a remainder takes the divisor's sign: <= 0 here
    "n % -3 == -1": "((n % -3) == -1)",
    "n // -2 == 3": "((n // -2) == 3)",
    "(-n) // 2 == -3": "(((-n) // 2) == -3)",
    "(-n) % 4 == 1": "(((-n) % 4) == 1)",
    "max(x.shape[0], x.shape[1]) >= x.shape[1]": "(max(x.shape[0], x.shape[1]) >= x.shape[1])",
    "bool(x.shape[0] + 1)": "True",
    "bool(x.shape[0])": "(x.shape[0] != 0)",
    "x.shape[0] ** 2 >= 0": "True",
    # not integer algebra: left as traced
    "n - n == 0 + f": "((n - n) == (0 + f))",
    "f - f == 0": "((f - f) == 0)",
    "(n & 1) == 0": "((n & 1) == 0)",
    "x.shape[0] / 2 == 3": "((x.shape[0] / 2) == 3)",
}


@pytest.mark.parametrize("source", SIMPLIFIED)
def test_simplified_rendering(source):
    simplified, _ = algebra.simplify(parse(source), Symbols())
    assert render(simplified) == SIMPLIFIED[source]


@pytest.mark.parametrize("source", SIMPLIFIED)
def test_simplified_expressions_equal_python_on_every_value(source):
    """Simplification keeps Python's semantics, negative operands included."""
    simplified = render(algebra.simplify(parse(source), Symbols())[0])
    for d0, d1, n in itertools.product(range(7), range(4), range(-7, 8)):
        assert evaluate(simplified, (d0, d1), n) == evaluate(source, (d0, d1), n), (d0, d1, n)


# condition -> whether it holds for every input (dims >= 0, n any int, f any float)
ALWAYS = {
    "x.shape[0] * x.shape[1] == (x.shape[0] * x.shape[1]) // 1": True,
    "x.shape[0] != -1": True,
    "not (x.shape[0] == -1)": True,
    "x.shape[0] + x.shape[0] >= 0": True,
    "x.shape[0] - x.shape[0] == 0": True,
    "n - n == 0": True,
    "bool(x.shape[0] + 1)": True,
    # conditions that depend on the input: never assumed
    "x.shape[0] * x.shape[1] != 0": False,
    "x.shape[0] - 1 == 5": False,
    "x.shape[0] > 8": False,
    "not (x.shape[0] == 1)": False,
    "n != -1": False,
    "n % 3 < 3": True,
    "n % -3 <= 0": True,
    "(-n) % 3 <= 0": False,  # torch's value ranges would say so for n >= 0 (C's remainder sign)
    "f - f == 0": False,  # nan and inf
    "f == f": False,
}


@pytest.mark.parametrize("source", ALWAYS)
def test_conditions_that_always_hold(source):
    assert algebra.always_holds(parse(source)) is ALWAYS[source]


def test_guards_implied_by_kept_guards_are_dropped():
    """Each condition is decided from those kept before it; only undecided ones are kept (and learned)."""
    facts, symbols, kept = None, Symbols(), []
    facts = Facts(symbols)
    conditions = [
        ("x.shape[0] > 8", None),
        ("x.shape[0] > 4", True),
        ("x.shape[0] != 1", True),
        ("x.shape[0] <= 8", False),
        ("not (x.shape[1] == 0)", None),
        ("not (x.shape[1] == 1)", None),
        ("x.shape[1] >= 2", True),  # from != 0 and != 1 on a dim
        ("n >= 0", None),
        ("(-n) % 3 <= 0", None),  # not decided by n >= 0: Python's remainder is in [0, 2]
        ("n // -2 == 3", False),
        ("x.shape[1] + 3 > n", None),
        ("x.shape[1] + 3 > n", True),  # kept already
    ]
    for source, decided in conditions:
        form = algebra.simplify(parse(source), symbols)[1]
        assert facts.decide(form) is decided, source
        if decided is None:
            facts.learn(form)
            kept.append(source)
    assert len(kept) == 6


def test_expressions_render_fully_parenthesized():
    expr = algebra.apply(operator.sub, (1, 1))
    expr = algebra.Op(expr.operation, (Const(1), algebra.apply(operator.mul, (2, 3))))
    assert render(expr) == "(1 - (2 * 3))" and eval(render(expr)) == 1 - 2 * 3


def test_literals_are_valid_python_for_every_float():
    for value in (1, True, 2.5, math.inf, -math.inf, 1e300, complex(1, 2)):
        assert eval(algebra.literal(value), {"math": math}) == value
    assert math.isnan(eval(algebra.literal(math.nan)))
