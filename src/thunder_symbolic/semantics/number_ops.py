"""Python number operations on symbolic numbers, with exactly Python's semantics.

thunder 0.2.6 lacks several operations on NumberProxies (``<<``, ``>>``, unary ``+``, ``round``,
``math.ceil``/``floor``/``trunc`` returning ints, ``//`` and ``%`` on floats, ``torch.sym_max``). One
operator covers them all: it records the operation by name in the trace, its meta function computes the
traced value with the Python function itself (so the result type is Python's), and at run time the
same Python function runs on the real numbers. The result carries its expression for guards.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from typing import Any

import torch
from thunder.core.proxies import NumberProxy, numberproxy
from thunder.core.trace import get_tracectx
from thunder.core.utils import resolve_constraints
from thunder.executors.pythonex import ex as pythonex

from thunder_symbolic.autodiff.grad_rules import grad_rule
from thunder_symbolic.guards import algebra

__all__ = ["OPERATIONS", "python_number_op", "apply_number_op", "sym_sum"]

OPERATIONS: dict[str, Any] = {
    "lshift": operator.lshift,
    "rshift": operator.rshift,
    "pos": operator.pos,
    "invert": operator.inv,
    "round": builtins.round,
    "ceil": math.ceil,
    "floor": math.floor,
    "trunc": math.trunc,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "max": builtins.max,
    "min": builtins.min,
    "sym_max": torch.sym_max,  # a float when either operand is one (builtins.max returns the larger operand)
    "sym_min": torch.sym_min,
}


def _value(x: Any) -> Any:
    return x.value if isinstance(x, NumberProxy) else x


def _meta(name: str, *operands) -> NumberProxy:
    value = OPERATIONS[name](*(_value(o) for o in operands))
    return numberproxy(type(value), value, constraint=resolve_constraints(*operands))


def _impl(name: str, *operands):
    return OPERATIONS[name](*operands)


python_number_op = pythonex.register_operator("python_number_op", meta=_meta, fn=_impl)
pythonex.register_implementation(python_number_op, python_number_op, checker=lambda *args: True)


@grad_rule("python_number_op")
def _no_gradient(name: str, *operands):
    """Numbers get no gradient: without a rule, a program computing one (``head_dim ** 0.5`` of a dynamic
    size) failed in grad mode ("Failed to find a gradient transform")."""
    return python_number_op(name, *operands)


def apply_number_op(name: str, *operands):
    """``OPERATIONS[name](*operands)``: recorded in the trace when tracing, else computed directly."""
    if get_tracectx() is None or not any(isinstance(o, NumberProxy) for o in operands):
        return OPERATIONS[name](*(_value(o) for o in operands))
    if any(algebra.is_data_dependent(o) for o in operands):
        raise NotImplementedError(f"{name} of a number that depends on tensor data (.item()) is not supported")
    result = python_number_op(name, *operands)
    expr = algebra.apply(OPERATIONS[name], operands)
    if expr is not None:
        algebra.attach(result, expr)
    return result


def sym_sum(args):
    """``torch.sym_sum(args)``, the sum Dynamo writes for sizes (a cat's length: ``sym_sum([1, s40])``):
    the numbers added one by one, so symbolic ones record each addition with its expression."""
    args = list(args)
    return functools.reduce(operator.add, args) if args else 0
