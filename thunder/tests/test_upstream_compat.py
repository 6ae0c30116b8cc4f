"""What lightning-thunder 0.2.6 runs correctly, the patch set runs too, identically.

Each case is one kind of program thunder's own test suite exercises that the patch set once broke (found by
``make upstream-test``, which runs that suite with the patch set off and on); each test says what broke and why,
and holds the program to eager PyTorch and to thunder's own traces.
"""

import io
import textwrap

import pytest
import torch

import thunder

from thunder_symbolic.testing import check_against_eager, run_python

CACHES = pytest.mark.parametrize("cache", ["symbolic values", "constant values"])


def test_a_builtin_method_that_needs_its_class_does_not_crash_the_interpreter():
    """thunder finds a builtin method's descriptor by binding each base class's method to the object; binding
    `_io._BufferedIOBase.seek` without the type crashed CPython 3.12.1 (segmentation fault), which transformers'
    generation reached through torch.vmap, torch.library, traceback and linecache's `buffer.seek(0)`. In a
    subprocess: a crash must fail the test, not the suite."""
    code = textwrap.dedent(
        """
        import io, torch, thunder

        def f(x):
            buffer = io.BufferedReader(io.BytesIO(b"abc"))
            buffer.seek(0)
            return x * len(buffer.read())

        print(thunder.jit(f)(torch.ones(2)).tolist())
        """
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"


@CACHES
def test_a_buffered_reader_made_in_the_program(cache):
    def f(x):
        buffer = io.BufferedReader(io.BytesIO(b"abcd"))
        buffer.seek(1)
        return x + len(buffer.read())

    check_against_eager(f, [(torch.ones(2),)], cache=cache)
