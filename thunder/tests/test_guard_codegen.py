"""The prologue guard check: generated code, failure reports, and guard expressions."""

import re

import pytest
import torch

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


# Guards as traced through a chain of views (GPT-2's, abridged): each term is repeated many times.
VIEW_CHAIN = (
    "(x.shape[1] != 0)",
    "((((1 * x.shape[0]) * x.shape[1]) % (1 * x.shape[1])) == 0)",
    "(((1 * (((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1]))) * x.shape[1]) == ((1 * x.shape[0]) * x.shape[1]))",
    "(((1 * (((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1]))) * x.shape[1]) >= 0)",
    "((((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1])) == (((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1])))",
    "(not ((((1 * x.shape[0]) * x.shape[1]) // (1 * x.shape[1])) == 1))",
    "(x.shape[1] != 1)",
    "(x.shape[1] != 1)",
    "((x.shape[0] == 0) or ((8 // x.shape[0]) > 1))",
    "((x.shape[0] == 0) or ((8 // x.shape[0]) > 1))",
    "((n == n) and (n > 0))",
)


def _rewritten(conditions):
    from thunder_symbolic.guards.prologue import _shapes_read_once
    from thunder_symbolic.guards.shared_terms import shared_terms

    rewritten, shapes = _shapes_read_once(("x", "n"), list(conditions))
    return shared_terms(rewritten, frozenset(shapes)), shapes


def test_repeated_terms_are_computed_once_and_conditions_that_always_hold_are_dropped():
    out, _ = _rewritten(VIEW_CHAIN)
    assignments = [a for assigned, _ in out for a in assigned]
    values = [a.split(" = ", 1)[1] for a in assignments]
    assert len(values) == len(set(values)), f"a term computed twice: {assignments}"
    assert not any(re.search(r"(?<!\w)1 \*", a) for a in assignments), assignments
    kept = [condition for _, condition in out]
    assert kept[4] is None, "t == t over integers holds whatever the sizes"
    assert kept[7] is None and kept[9] is None, "a repeated condition is checked once"
    assert kept[10] is not None, "n == n over a number that may be a NaN float is kept"
    assert sum(c is not None for c in kept) == 8


def test_terms_a_condition_may_skip_are_not_computed_ahead_of_it():
    out, _ = _rewritten(VIEW_CHAIN)
    assert not any("8 //" in a for assigned, _ in out for a in assigned), (
        "8 // x.shape[0] is guarded by x.shape[0] == 0"
    )


@pytest.mark.parametrize("rows", range(0, 5))
@pytest.mark.parametrize("cols", range(0, 4))
@pytest.mark.parametrize("n", [1, 0, float("nan")])
def test_the_rewritten_conditions_accept_only_what_the_recorded_ones_accept(rows, cols, n):
    out, shapes = _rewritten(VIEW_CHAIN)
    body = [f"    {local} = {read}" for local, read in shapes.items()]
    for assigned, condition in out:
        body += [f"    {a}" for a in assigned]
        if condition is not None:
            body.append(f"    if not ({condition}):\n        return False")
    namespace = {}
    exec("def fast(x, n):\n" + "\n".join(body) + "\n    return True", namespace)
    exact = compile_guards(("x", "n"), tuple((c, "here") for c in VIEW_CHAIN)).exact
    x = torch.empty(rows, cols)
    try:
        exact(x, n)
        accepted = True
    except (GuardFailed, ZeroDivisionError):
        accepted = False
    try:
        fast = namespace["fast"](x, n)
    except ZeroDivisionError:
        fast = False
    assert fast == accepted
    check = compile_guards(("x", "n"), tuple((c, "here") for c in VIEW_CHAIN))
    if accepted:
        assert check(x, n) is None
    else:
        with pytest.raises((GuardFailed, ZeroDivisionError)):
            check(x, n)
