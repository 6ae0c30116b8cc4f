"""The guard algebra: simplification with Python's integer semantics, conditions that always hold, and
guards that other guards imply. Expressions are written as Python source over ``x.shape[i]`` (dims, >= 0),
``n`` (an int argument) and ``f`` (a float argument), and checked against Python on a grid of values."""

import ast
import itertools
import math
import operator
import types

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._sympy.functions import PythonMod
from torch.utils._sympy.value_ranges import bound_sympy

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


# source -> its simplified rendering (a comparison of numbers decided; others, even ones that always hold, left
# to Facts: see ALWAYS)
SIMPLIFIED = {
    "x.shape[1] == ((((x.shape[1] - 0) + 1) - 1) // 1)": "True",
    "x.shape[1] >= 0": "(x.shape[1] >= 0)",
    "x.shape[1] != -1": "(x.shape[1] != -1)",
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
    # a negative divisor: left as traced (torch's FloorDiv/PythonMod rules assume positive ones)
    "n % -3 < 1": "((n % (-3)) < 1)",
    "n % -3 == -1": "((n % (-3)) == (-1))",
    "n // -2 == 3": "((n // (-2)) == 3)",
    "(n // 2) // -2 == 0": "(((n // 2) // (-2)) == 0)",  # not n // -4
    "(n // 2) // 2 == 0": "((n // 4) == 0)",
    "(-n) // 2 == -3": "(((-n) // 2) == -3)",
    # a factor common to the divisor and every term divided out (exact), negative terms included
    "(4 * x.shape[0] + 2) // 6 == n": "((((2 * x.shape[0]) + 1) // 3) == n)",
    "(2 * n + 4) // 2 == x.shape[1]": "(n == (x.shape[1] - 2))",
    "(6 * x.shape[0] + 8) // 4 > n": "(((3 * x.shape[0]) // 2) > (n - 2))",
    "(6 * n - 9) // 3 < x.shape[0]": "((2 * n) < (x.shape[0] + 3))",
    "(-n) % 4 == 1": "(((-n) % 4) == 1)",
    # a remainder's multiples of the divisor dropped and its constant reduced, the rest left as traced
    "(4 * x.shape[0] + 6) % 4 == n": "(2 == n)",
    "(x.shape[0] * x.shape[1] + 32 * n + 17) % 16 == 1": "((((x.shape[0] * x.shape[1]) + 1) % 16) == 1)",
    "max(x.shape[0], x.shape[1]) >= x.shape[1]": "(max(x.shape[0], x.shape[1]) >= x.shape[1])",
    "bool(x.shape[0] + 1)": "True",
    "bool(x.shape[0])": "(x.shape[0] != 0)",
    "x.shape[0] ** 2 >= 0": "((x.shape[0] ** 2) >= 0)",
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


def test_floor_division_divides_out_common_factors_without_sympy_simplify(monkeypatch):
    """torch's FloorDiv would divide them out through ``sympy.simplify``, slow, and whose first call imports
    ``sympy.physics``."""

    def refuse(*args, **kwargs):
        raise AssertionError("sympy.simplify called")

    sympy.core.cache.clear_cache()  # FloorDiv's results are cached
    monkeypatch.setattr(sympy, "simplify", refuse)
    simplified, _ = algebra.simplify(parse("(4 * x.shape[0] + 2) // 6 == n"), Symbols())
    assert render(simplified) == "((((2 * x.shape[0]) + 1) // 3) == n)"


def test_comparisons_are_not_decided_by_sympys_assumptions(monkeypatch):
    """sympy decides a comparison it builds through its assumptions, slow the first time a process meets an
    expression; Facts decide guards from ranges instead."""

    def refuse(*args, **kwargs):
        raise AssertionError("sympy evaluated a comparison")

    monkeypatch.setattr(sympy.core.relational, "is_ge", refuse)
    monkeypatch.setattr(sympy.core.relational, "is_eq", refuse)
    rendered = {"x.shape[1] >= n + 2": "(x.shape[1] >= (n + 2))", "n == x.shape[0] - n": "((2 * n) == x.shape[0])"}
    for source, expected in rendered.items():
        assert render(algebra.simplify(parse(source), Symbols())[0]) == expected


def test_remainders_are_not_evaluated_by_sympys_assumptions(monkeypatch):
    """PythonMod's evaluation asks sympy's assumptions (slow the first time a process meets a remainder); the
    algebra reduces remainders of sums itself, and Facts bound what is left."""

    def refuse(*args, **kwargs):
        raise AssertionError("PythonMod evaluated a remainder")

    monkeypatch.setattr(PythonMod, "eval", classmethod(refuse))
    assert render(algebra.simplify(parse("(6 * x.shape[0] + 7) % 3 == 1"), Symbols())[0]) == "True"
    assert algebra.always_holds(parse("(x.shape[0] * x.shape[1] + 2 * n) % 2 < 2"))


def test_value_range_analysis_is_remembered_for_the_same_expression_and_bounds(monkeypatch):
    """A compile decides conditions on the same sizes under the same bounds many times (each guard, the
    redundancy of the guards kept, the next trace's guards); value-range analysis runs once for each."""
    analysed = []
    monkeypatch.setattr(algebra, "bound_sympy", lambda e, ranges: analysed.append(e) or bound_sympy(e, ranges))
    algebra._analysed_range.cache_clear()
    symbols = Symbols()
    below, above = (algebra.simplify(parse(c), symbols)[1] for c in ("x.shape[0] // 3 < 5", "x.shape[0] // 3 >= 5"))
    for _ in range(2):
        facts = Facts(symbols)
        assert facts.decide(below) is None and facts.decide(above) is None
    assert len(analysed) == 1
    facts.learn(algebra.simplify(parse("x.shape[0] < 9"), symbols)[1])
    assert facts.decide(below) is True and analysed.count(analysed[0]) == 2  # other bounds: analysed again


# condition -> whether it holds for every input (dims >= 0, n any int, f any float)
ALWAYS = {
    "x.shape[0] * x.shape[1] == (x.shape[0] * x.shape[1]) // 1": True,
    "x.shape[0] != -1": True,
    "not (x.shape[0] == -1)": True,
    "x.shape[0] + x.shape[0] >= 0": True,
    "x.shape[0] - x.shape[0] == 0": True,
    "n - n == 0": True,
    "bool(x.shape[0] + 1)": True,
    "x.shape[1] >= 0": True,
    "x.shape[0] ** 2 >= 0": True,
    # conditions that depend on the input: never assumed
    "x.shape[0] * x.shape[1] != 0": False,
    "x.shape[0] - 1 == 5": False,
    "x.shape[0] > 8": False,
    "not (x.shape[0] == 1)": False,
    "n != -1": False,
    "n % 3 < 3": True,
    "n % -3 <= 0": False,  # true, but a negative divisor is left as traced
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
        ("n // 2 == -3", False),
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


# --- Soundness: a dropped guard holds wherever the kept ones hold ----------------------------------------

_ATOMS = ["x.shape[0]", "x.shape[1]", "n", "2", "3", "-1"]
_GRID = list(itertools.product(range(6), range(4), range(-6, 7)))


@st.composite
def _integer_expressions(draw, depth=2):
    if depth == 0 or draw(st.booleans()):
        return draw(st.sampled_from(_ATOMS))
    left = draw(_integer_expressions(depth=depth - 1))
    kind = draw(st.sampled_from(["+", "-", "*", "//", "%", "max", "min", "abs", "**", "neg"]))
    if kind == "abs":
        return f"abs({left})"
    if kind == "neg":
        return f"(-{left})"
    if kind == "**":
        return f"({left} ** 2)"
    if kind in ("//", "%"):
        return f"({left} {kind} {draw(st.sampled_from(['2', '3', '-2', '-3']))})"
    right = draw(_integer_expressions(depth=depth - 1))
    return f"{kind}({left}, {right})" if kind in ("max", "min") else f"({left} {kind} {right})"


@st.composite
def _recorded_guards(draw):
    """Conditions as a trace records them: each true for the traced values (``point``)."""
    point = draw(st.sampled_from(_GRID))
    guards = []
    for _ in range(draw(st.integers(1, 6))):
        left, right = draw(_integer_expressions()), draw(_integer_expressions())
        comparison = draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "truth"]))
        source = f"bool({left})" if comparison == "truth" else f"{left} {comparison} {right}"
        guards.append(source if evaluate(source, point[:2], point[2]) else f"not ({source})")
    return point, guards


@settings(max_examples=150, deadline=None, derandomize=True)
@given(_recorded_guards())
def test_guards_dropped_as_implied_hold_wherever_the_kept_ones_hold(recorded):
    """What the recorder does, with Python as the judge on a grid of dims (>= 0) and ints (any sign)."""
    point, sources = recorded
    symbols = Symbols()
    facts, kept = Facts(symbols), []
    for source in sources:
        simplified, form = algebra.simplify(parse(source), symbols)
        assert evaluate(render(simplified), point[:2], point[2]) is True, source  # it models the traced values
        if form is not None and facts.decide(form) is True:
            continue
        kept.append((render(simplified), form))
        if form is not None:
            facts.learn(form)
    dropped = algebra.redundant([form for _, form in kept], symbols)
    checked = [source for i, (source, _) in enumerate(kept) if i not in dropped]
    for d0, d1, n in _GRID:
        if all(evaluate(source, (d0, d1), n) is True for source in checked):
            for source in sources:
                assert evaluate(source, (d0, d1), n) is True, (source, checked, (d0, d1, n))


def test_inputs_kept_equal_are_one():
    """``x.shape[0] == x.shape[1]`` kept: what is known of one holds for the other, before and after."""
    symbols = Symbols()
    facts = Facts(symbols)
    for source, decided in [
        ("x.shape[0] >= 2", None),
        ("x.shape[0] == x.shape[1]", None),
        ("x.shape[1] != 1", True),
        ("x.shape[1] + 1 > 2", True),
        ("n == x.shape[1]", None),
        ("n > 0", True),
        ("n - x.shape[0] == 0", True),
    ]:
        form = algebra.simplify(parse(source), symbols)[1]
        assert facts.decide(form) is decided, source
        if decided is None:
            facts.learn(form)


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("x.shape[0] * 2", "x.shape[0] * 2", True),  # one number computed twice (a DTensor's global size)
        ("x.shape[0] * 2", "2 * x.shape[0]", True),
        ("(x.shape[0] + 1) * 2", "x.shape[0] * 2 + 2", True),
        ("x.shape[0] * 2", "x.shape[0] * 3", False),
        ("x.shape[0] * 2", "x.shape[1] * 2", False),
        ("x.shape[0] // 2 * 2", "x.shape[0]", False),  # equal for even sizes only: not proven
        ("n * 2", "n + n", True),
        ("f * 2", "f * 2", False),  # not integer algebra
    ],
)
def test_numbers_provably_equal(a, b, equal):
    """Two proxies of one size expression are the same size, decided without recording a guard."""

    def proxy(source):
        p = _Proxy(source)
        algebra.attach(p, parse(source))
        return p

    assert algebra.provably_equal(proxy(a), proxy(b)) is equal
    assert algebra.provably_equal(proxy(a), 6) is False  # a constant: proving it needs a guard
    assert algebra.provably_equal(3, 3) and not algebra.provably_equal(3, 4)
