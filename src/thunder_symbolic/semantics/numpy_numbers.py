"""numpy numbers given to thunder's operators, as the Python numbers torch takes them for.

torch accepts a numpy number wherever it accepts a Python number (``x * np.float32(0.5)``,
``torch.full(shape, np.int64(3))``, ``x.clamp(max=scale)`` with ``scale = np.sqrt(d)``); thunder 0.2.6's
operators failed on one ("Trying to convert unknown type <class 'numpy.float32'> to a numbertype"), and
the interpreter on ``np.float32(2) * x``. Such a number reaches an operator as its Python value, a constant
of the trace: the numpy value itself is checked where the program read it (by value:
:class:`thunder_symbolic.guards.values.Snapshot`). The other way round, a numpy function of a symbolic
number (``np.sqrt(d)`` of a float argument) reads the number's value, pinned, as ``math.sqrt`` does (0.2.6
failed: "loop of ufunc does not support argument 0 of type FloatProxy").
"""

from __future__ import annotations

from typing import Any

import numpy  # (thunder's dependency)
from thunder.core.interpreter import interpreter_needs_wrap, unwrap, wrap_const
from thunder.core.proxies import NumberProxy

from thunder_symbolic.guards import recorder as guard_recorder

__all__ = ["as_python", "is_numpy_function", "is_numpy_number", "of_pinned_numbers", "taking_python_numbers"]


_NUMBERS = (numpy.bool_, numpy.number)


def is_numpy_number(wrapped: Any) -> bool:
    """Whether ``wrapped`` (a wrapped value, or a value) holds a numpy bool, int, float or complex."""
    return isinstance(unwrap(wrapped), _NUMBERS)


def as_python(wrapped: Any) -> Any:
    """``wrapped`` with a numpy number replaced by its Python number (a constant); anything else as it is."""
    return wrap_const(unwrap(wrapped).item()) if is_numpy_number(wrapped) else wrapped


def taking_python_numbers(lookaside):
    """``lookaside`` (of a thunder operator) given its numpy number arguments as Python numbers."""
    return _converting(lookaside, as_python)


def _converting(fn, convert):
    """``fn`` called with ``convert`` applied to each argument."""

    def call(*args, **kwargs):
        return fn(*map(convert, args), **{key: convert(value) for key, value in kwargs.items()})

    return call


def is_numpy_function(fn: Any) -> bool:
    """Whether ``fn`` is numpy's (a ufunc such as ``np.sqrt``, or a function of its modules)."""
    module = getattr(fn, "__module__", None)
    return isinstance(fn, numpy.ufunc) or isinstance(module, str) and module.partition(".")[0] == "numpy"


def of_pinned_numbers(fn):
    """``fn`` (numpy's) called natively on the pinned values of the symbolic numbers it is given."""

    def pinned(value):
        return guard_recorder.python_value(value) if isinstance(value, NumberProxy) else value

    return interpreter_needs_wrap(_converting(fn, pinned))
