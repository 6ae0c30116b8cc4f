"""The prologue guard check: generated code, failure reports, and guard expressions."""

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
