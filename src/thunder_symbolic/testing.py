"""Helpers for tests that hold thunder's results to eager PyTorch's.

* :func:`check_against_eager` runs a function eagerly and jitted over a sequence of argument sets,
  asserts every output equal (tensors within dtype tolerance, numbers and bools exactly, types too)
  and the number of compiles (``thunder.cache_misses``).
* :func:`run_python` runs a snippet in a fresh interpreter (activation happens at start-up, so
  activation tests need fresh processes); :func:`run_torchrun` runs one on several ranks.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

__all__ = ["assert_same", "check_against_eager", "run_python", "run_torchrun"]

SYMBOLIC = "symbolic values"


def assert_same(
    actual: Any,
    expected: Any,
    *,
    path: str = "output",
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
):
    """Assert ``actual`` equals ``expected``: same structure, tensors close, numbers/bools/strings exact."""
    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise AssertionError(f"{path}: expected a tensor, got {type(actual).__name__} {actual!r}")
        torch.testing.assert_close(
            actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, msg=lambda m: f"{path}: {m}"
        )
    elif isinstance(expected, (tuple, list)):
        if type(actual) is not type(expected) or len(actual) != len(expected):
            raise AssertionError(f"{path}: expected {type(expected).__name__} of {len(expected)}, got {actual!r}")
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, path=f"{path}[{i}]", rtol=rtol, atol=atol, equal_nan=equal_nan)
    elif isinstance(expected, Mapping):
        if not isinstance(actual, Mapping) or actual.keys() != expected.keys():
            raise AssertionError(f"{path}: expected keys {list(expected)}, got {actual!r}")
        for k in expected:
            assert_same(actual[k], expected[k], path=f"{path}[{k!r}]", rtol=rtol, atol=atol, equal_nan=equal_nan)
    elif _plain_object(expected):
        if type(actual) is not type(expected):
            raise AssertionError(f"{path}: expected a {type(expected).__name__}, got {actual!r}")
        assert_same(vars(actual), vars(expected), path=f"{path}.__dict__", rtol=rtol, atol=atol, equal_nan=equal_nan)
    else:
        # torch.Size is a tuple subclass: compare shapes as tuples of ints. A NaN argument stays NaN.
        both_nan = (
            isinstance(expected, float) and isinstance(actual, float) and math.isnan(expected) and math.isnan(actual)
        )
        if type(actual) is not type(expected) or actual != expected and not both_nan:
            raise AssertionError(
                f"{path}: expected {expected!r} ({type(expected).__name__}), got {actual!r} ({type(actual).__name__})"
            )


def _plain_object(value: Any) -> bool:
    """An instance of a class defined in Python whose state is its ``__dict__`` (a config, a cache layer): compared
    by its attributes (a module, compared by identity, is not)."""
    return (
        bool(type(value).__flags__ & (1 << 9))  # Py_TPFLAGS_HEAPTYPE
        and isinstance(getattr(value, "__dict__", None), dict)
        and not isinstance(value, (torch.Tensor, torch.nn.Module, type))
    )


def _call(fn: Callable, args: Sequence | Mapping | Any):
    """Call ``fn`` with an argument set: a tuple of positional args, or a dict with "args"/"kwargs"."""
    if isinstance(args, Mapping):
        return fn(*args.get("args", ()), **args.get("kwargs", {}))
    if not isinstance(args, tuple):
        args = (args,)
    return fn(*args)


def check_against_eager(
    fn: Callable,
    arg_sets: Iterable,
    *,
    compiles: int | None = None,
    cache: str = SYMBOLIC,
    rtol: float | None = None,
    atol: float | None = None,
    **jit_kwargs,
):
    """Run ``fn`` eagerly and under ``thunder.jit(fn, cache=cache)`` for each argument set and compare.

    Each argument set is deep-copied for each run (views of one tensor stay views of one copy), so
    in-place functions see fresh inputs; the arguments after the call are compared too. When
    ``compiles`` is given, ``thunder.cache_misses`` must equal it at the end. After every call the traces
    that ran are validated (:func:`thunder_symbolic.validate.validate_traces_of`). Returns the jitted function.
    """
    import thunder

    from thunder_symbolic.validate import validate_traces_of

    jfn = thunder.jit(fn, cache=cache, **jit_kwargs)
    for i, args in enumerate(arg_sets):
        eager_args, jit_args = copy.deepcopy(args), copy.deepcopy(args)
        expected = _call(fn, eager_args)
        actual = _call(jfn, jit_args)
        assert_same(actual, expected, path=f"call {i} output", rtol=rtol, atol=atol)
        assert_same(jit_args, eager_args, path=f"call {i} arguments after the call", rtol=rtol, atol=atol)
        validate_traces_of(jfn)
    if compiles is not None:
        misses = thunder.cache_misses(jfn)
        if misses != compiles:
            raise AssertionError(
                f"expected {compiles} compile(s), got {misses} (cache hits: {thunder.cache_hits(jfn)})"
            )
    return jfn


def _python_env(env: Mapping[str, str] | None) -> dict[str, str]:
    full = dict(os.environ)
    full.pop("PYTHONPATH", None)  # the child sees the installed environment, as a user would
    full.update(env or {})
    return full


def run_python(code: str, *, env: Mapping[str, str] | None = None, timeout: float = 300, cwd: str | None = None):
    """Run ``code`` in a fresh interpreter of this environment; returns the CompletedProcess (never raises on exit status)."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_python_env(env),
        cwd=cwd,
        check=False,
    )


def run_torchrun(
    code: str, *, nproc: int = 2, env: Mapping[str, str] | None = None, timeout: float = 300, cwd: str | None = None
):
    """Run ``code`` under ``torchrun --nproc-per-node nproc`` (CPU, gloo); returns the CompletedProcess.

    The timeout kills the whole launch, so a hanging rank cannot hang the test run.
    """
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(textwrap.dedent(code))
    try:
        env = {"OMP_NUM_THREADS": "1", **(env or {})}
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                str(nproc),
                script.name,
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_python_env(env),
            cwd=cwd,
            check=False,
        )
    finally:
        os.unlink(script.name)
