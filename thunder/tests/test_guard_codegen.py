"""The prologue guard check: generated code, failure reports, and guard expressions."""

import math

import pytest
import torch

from thunder_symbolic.guards.expressions import Apply, Const, literal
from thunder_symbolic.guards.prologue import GuardFailed, compile_guards


def test_first_failing_guard_is_reported_with_its_source():
    check = compile_guards(
        ("x", "xx", "n"),
        (("(x.shape[0] > 2)", "a.py:1 in f"), ("(xx.shape[1] == 3)", "a.py:2 in f"), ("(type(n) is int)", "input")),
    )
    assert check(torch.ones(3, 1), torch.ones(1, 3), 4) is None
    with pytest.raises(GuardFailed, match=r"guard \(xx.shape\[1\] == 3\) failed \(recorded at a.py:2 in f\)"):
        check(torch.ones(3, 1), torch.ones(1, 4), 4)
    with pytest.raises(GuardFailed, match="type"):
        check(torch.ones(3, 1), torch.ones(1, 3), 4.0)


def test_literals_are_valid_python_for_every_float():
    for value in (1, True, 2.5, math.inf, -math.inf, 1e300, complex(1, 2)):
        assert eval(literal(value), {"math": math}) == value
    assert math.isnan(eval(literal(math.nan)))


def test_expressions_render_fully_parenthesized():
    expr = Apply("({} - {})", (Const(1), Apply("({} * {})", (Const(2), Const(3)))))
    assert expr.render(str) == "(1 - (2 * 3))" and eval(expr.render(str)) == 1 - 2 * 3
