"""Diagnostics: a cache miss can be traced to the guard that failed and the line that created it."""

import torch

import thunder
import thunder_symbolic
from thunder_symbolic.testing import run_python


def branchy(x):
    if x.shape[0] > 8:  # the guard's source line
        return x * 2
    return x - 1


def test_recompile_reasons_name_the_failed_guard_and_its_line():
    jf = thunder.jit(branchy, cache="symbolic values")
    for n in (4, 5, 10):
        jf(torch.ones(n, 3))
    misses = thunder_symbolic.recompile_reasons(jf)
    assert thunder.cache_misses(jf) == 2 and len(misses) == 1
    (reason,) = misses[0].reasons
    assert "guard (x.shape[0] <= 8) failed" in reason and "if x.shape[0] > 8:" in reason  # simplified, with its line
    assert f"test_recompile_diagnostics.py:{branchy.__code__.co_firstlineno + 1} in branchy" in reason


def test_no_reasons_without_recompilation():
    jf = thunder.jit(branchy, cache="symbolic values")
    for n in (10, 11, 12):
        jf(torch.ones(n, 3))
    assert thunder.cache_misses(jf) == 1 and thunder_symbolic.recompile_reasons(jf) == []


def test_recompile_reasons_work_for_modules_and_constant_values():
    jm = thunder.jit(torch.nn.Linear(4, 2))
    jm(torch.randn(3, 4))
    jm(torch.randn(5, 4))
    (miss,) = thunder_symbolic.recompile_reasons(jm)
    assert miss.call == 2 and miss.reasons


def test_recompiles_log_switch():
    code = """
    import torch, thunder
    def f(x, n):
        if n > 5:
            return x * n
        return x
    jf = thunder.jit(f, cache="symbolic values")
    for n in (7, 2, 9):
        jf(torch.ones(2), n)
    """
    quiet = run_python(code)
    logged = run_python(code, env={"THUNDER_SYMBOLIC_LOG": "recompiles"})
    assert quiet.returncode == logged.returncode == 0, logged.stderr
    assert "recompiling" not in quiet.stderr
    lines = [line for line in logged.stderr.splitlines() if "recompiling f" in line]
    assert len(lines) == 1 and "n > 5" in lines[0]
