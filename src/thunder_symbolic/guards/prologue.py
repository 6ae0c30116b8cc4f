"""The prologue's guard check: one operator that re-evaluates every recorded guard on each call.

The guards of a trace are compiled into one small Python function (``if not (x.shape[0] > 8): fail``),
so each guard costs one comparison per call. The operator's arguments carry the guards' source text,
which makes the prologue trace show exactly what is checked::

    check_symbolic_guards(('x', 'n'), (('(x.shape[0] > 8)', 'f.py:3 in f'), ...), x, n)
"""

from __future__ import annotations

import functools
import re
from typing import Any

from thunder.core.prims import OpTags
from thunder.executors.pythonex import ex as pythonex

from thunder_symbolic.guards.algebra import NAMESPACE, same_float
from thunder_symbolic.guards.shared_terms import shared_terms

__all__ = [
    "GuardFailed",
    "check_dtensor_layout",
    "check_float_value",
    "check_symbolic_guards",
    "dtensor_layout",
]


class GuardFailed(RuntimeError):
    """A prologue guard does not hold for the new inputs: the cached program cannot be reused."""

    def __init__(self, condition: str, where: str):
        super().__init__(f"guard {condition} failed (recorded at {where})")
        self.condition = condition
        self.where = where


@functools.lru_cache(maxsize=1024)  # (bounded: it outlives the jitted functions whose programs it serves)
def compile_guards(names: tuple[str, ...], guards: tuple[tuple[str, str], ...]):
    """A function of the named inputs that raises :class:`GuardFailed` for the first guard that fails.

    It checks the guards with their repeated terms computed once (:func:`shared_terms`); when that check
    rejects or raises, the guards as written decide, so a failure names the first guard that fails."""
    conditions, shapes = _shapes_read_once(names, [condition for condition, _ in guards])
    exact = _compiled(names, guards, conditions, shapes)
    lines = [f"def check_guards({', '.join(names)}):", "    try:"]
    lines += [f"        {local} = {read}" for local, read in shapes.items()]
    for assignments, condition in shared_terms(conditions, frozenset(shapes)):
        lines += [f"        {assignment}" for assignment in assignments]
        if condition is not None:
            lines.append(f"        if not ({condition}):\n            return _exact({', '.join(names)})")
    lines += ["    except GuardFailed:", "        raise", "    except Exception:  # noqa: BLE001",
              f"        return _exact({', '.join(names)})", "    return None"]  # fmt: skip
    namespace: dict[str, Any] = {**NAMESPACE, "_exact": exact, "GuardFailed": GuardFailed}
    exec(compile("\n".join(lines), "<thunder_symbolic guards>", "exec"), namespace)
    check = namespace["check_guards"]
    check.exact = exact
    return check


def _shapes_read_once(names, conditions: list[str]) -> tuple[list[str], dict[str, str]]:
    """The conditions reading each tensor's shape from a local (every ``.shape`` access builds a new
    torch.Size), and those locals: ``{"_shape0": "x.shape"}``."""
    shapes = {}
    for position, name in enumerate(names):
        pattern = re.compile(rf"\b{re.escape(name)}\.shape\b")
        if any(pattern.search(c) for c in conditions):
            shapes[f"_shape{position}"] = f"{name}.shape"
            conditions = [pattern.sub(f"_shape{position}", c) for c in conditions]
    return conditions, shapes


def _compiled(names, guards, conditions: list[str], shapes: dict[str, str]):
    """The guards as written, in order: raises GuardFailed for the first that fails."""

    def fail(index: int):
        raise GuardFailed(*guards[index])

    lines = [f"def check_guards({', '.join(names)}):"]
    lines += [f"    {local} = {read}" for local, read in shapes.items()]
    for index, condition in enumerate(conditions):
        lines.append(f"    if not {condition}:\n        fail({index})")
    lines.append("    return None")
    namespace: dict[str, Any] = {**NAMESPACE, "fail": fail}
    exec(compile("\n".join(lines), "<thunder_symbolic guards as recorded>", "exec"), namespace)
    return namespace["check_guards"]


def _meta(names, guards, *inputs) -> None:
    if len(names) != len(inputs):
        raise ValueError(f"check_symbolic_guards: {len(names)} names for {len(inputs)} inputs")
    compile_guards(names, guards)  # a malformed guard fails while tracing, not at the first call


# The prologue passes the same ``guards`` tuple object (a constant of its code) on every call: looking
# it up by identity avoids hashing every guard's text per call. The entry keeps the tuple alive.
_by_identity: dict[int, tuple[tuple, Any]] = {}


def _impl(names, guards, *inputs) -> None:
    found = _by_identity.get(id(guards))
    if found is None or found[0] is not guards:
        found = _by_identity[id(guards)] = (guards, compile_guards(names, guards))
    found[1](*inputs)


check_symbolic_guards = pythonex.register_operator(
    "check_symbolic_guards", meta=_meta, fn=_impl, tags=(OpTags.DONT_DCE,)
)
pythonex.register_implementation(check_symbolic_guards, check_symbolic_guards, checker=lambda *args: True)


def dtensor_layout(spec: Any) -> str:
    """A DTensor spec without its tensor metadata: the mesh and the placements. The sizes of a symbolic
    DTensor argument are checked by its guards; the spec's repr, which 0.2.6 compares, includes them."""
    return repr((spec.mesh, tuple(spec.placements)))


# Specs already found to have a layout, by identity (a parameter's spec is the same object on every call):
# rendering a spec costs microseconds, looking it up tens of nanoseconds. Entries keep their spec alive.
_layouts: dict[int, tuple[Any, str]] = {}


def _check_layout(dtensor, layout: str) -> None:
    spec = dtensor._spec
    known = _layouts.get(id(spec))
    if known is None or known[0] is not spec:
        if len(_layouts) >= 4096:
            _layouts.clear()
        known = _layouts[id(spec)] = (spec, dtensor_layout(spec))
    if known[1] != layout:
        raise GuardFailed(f"DTensor layout {layout}", "a DTensor argument")


check_dtensor_layout = pythonex.register_operator(
    "check_dtensor_layout", meta=lambda dtensor, layout: None, fn=_check_layout, tags=(OpTags.DONT_DCE,)
)
pythonex.register_implementation(check_dtensor_layout, check_dtensor_layout, checker=lambda *args: True)


def _check_float(number, value: float) -> None:
    if type(number) is not float or not same_float(number, value):
        raise GuardFailed(f"same_float(<float pinned by value>, {value!r})", f"a float pinned by value, got {number!r}")


# thunder's check_number_type_and_value, for floats: equal as Python code can tell them apart.
check_float_value = pythonex.register_operator(
    "check_float_value", meta=lambda number, value: None, fn=_check_float, tags=(OpTags.DONT_DCE,)
)
pythonex.register_implementation(check_float_value, check_float_value, checker=lambda *args: True)
