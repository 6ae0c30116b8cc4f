"""Recording guards while thunder traces a function under symbolic values.

Whenever the value of a symbolic number leaves the trace and becomes a Python value — a branch on
``x.shape[0] > 8``, ``range(n)``, ``float(x.shape[-1])``, a meta function's ``if dim == 1`` — the
recorder keeps a guard: the number's expression over the inputs and what was observed. Truth-value
observations become predicate guards (``x.shape[0] > 8``), so every input on the same side of the
predicate reuses the program; conversions to a Python number pin the exact value.

A guard that cannot be expressed over the inputs (a number whose derivation is unknown) makes the
recorder pin every input dim and number instead: recompiling is always preferred to a wrong reuse.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import linecache
import operator
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

from thunder_symbolic.controls import STATIC, DeclaredShapeError
from thunder_symbolic.guards import algebra
from thunder_symbolic.guards.algebra import (
    NAMESPACE,
    Const,
    Expr,
    Facts,
    InputDim,
    NumberInput,
    Symbols,
    attach,
    expr_of,
    is_data_dependent,
)

_current: contextvars.ContextVar[GuardRecorder | None] = contextvars.ContextVar("thunder_symbolic_guards", default=None)
_finished: contextvars.ContextVar[GuardRecorder | None] = contextvars.ContextVar(
    "thunder_symbolic_finished_guards", default=None
)

_THUNDER_DIR = os.path.dirname(os.path.dirname(__import__("thunder").__file__))
_INTERNAL = (os.path.join(_THUNDER_DIR, "thunder") + os.sep, os.path.join(_THUNDER_DIR, "torch") + os.sep)


class DataDependentError(NotImplementedError):
    """Python needs the value of a number that depends on tensor data, which no guard can check."""


def refuse_data_dependent(number: Any, what: str) -> None:
    raise DataDependentError(
        f"{what} of {getattr(number, 'name', number)} at {source_location()} depends on tensor data (.item()): "
        "thunder knows it only when the program runs, so it cannot be used in Python control flow or "
        "converted to a Python number while tracing; keep it a tensor (torch.where, masking) instead"
    )


@dataclass(frozen=True)
class Guard:
    condition: Expr  # a bool-valued expression that must hold for the trace to be reused
    where: str  # the source line whose observation created it
    form: Any = None  # its sympy form, when it is integer algebra (see algebra.Facts)


@dataclass
class GuardRecorder:
    number_inputs: list[Any] = field(default_factory=list)
    tensor_inputs: list[Any] = field(default_factory=list)
    guards: dict[str, Guard] = field(default_factory=dict)  # by rendered condition, to drop duplicates
    unexpressible: list[str] = field(default_factory=list)  # why every input must be pinned instead
    final_names: dict[int, str] = field(default_factory=dict)  # input proxy id -> its name in the prologue
    late: dict[str, Guard] = field(default_factory=dict)  # observed while the backward was built
    symbols: Symbols = field(default_factory=Symbols)
    facts: Facts | None = None  # what the kept guards prove (see algebra.Facts)
    observations: int = 0  # conditions recorded (type checks included), before dropping the implied ones
    decided: set[str] = field(default_factory=set)  # rendered conditions added already (see _add)
    ignoring: int = 0  # > 0 inside observations_ignored()
    backward_started: bool = False  # the compile got as far as building a backward (guards.backward_watch)
    stands_in = False  # True for a recorder standing in for another one (guards.backward_watch)

    def __post_init__(self):
        self.facts = self.facts or Facts(self.symbols)

    # Inputs ---------------------------------------------------------------------------------------

    def add_tensor_input(self, tensor: Any, declared: dict[int, Any] | None = None, name: str = "") -> None:
        """A tensor input; ``declared``: what the user declared of its dims (see :mod:`thunder_symbolic.controls`)."""
        self.tensor_inputs.append(tensor)
        for index, dim in enumerate(tensor._shape):
            if not isinstance(dim, int):
                attach(dim, InputDim(tensor, index))
        for index, spec in (declared or {}).items():
            dim = tensor._shape[index]
            if not isinstance(dim, int):
                self._declare(InputDim(tensor, index), dim.value, spec, f"{name or tensor.name}.shape[{index}]")

    def _declare(self, dim: InputDim, value: int, spec: Any, what: str) -> None:
        """Guards first, so that what they imply is known to every later one: a static dim is pinned; a
        range is checked, or for a call outside it, its side of the range."""
        if spec is STATIC:
            return self._add(algebra.equals(dim, value), None, f"{what} marked static")
        if not spec.contains(value):
            if spec.strict:
                raise DeclaredShapeError(f"{what} is {value}, outside the range {spec} declared for it (strict)")
            below = spec.min is not None and value < spec.min
            bound = algebra.compare(operator.lt if below else operator.gt, dim, Const(spec.min if below else spec.max))
            return self._add(bound, None, f"{what} outside its declared range {spec}")
        for fn, bound in ((operator.ge, spec.min), (operator.le, spec.max)):
            if bound is not None:
                self._add(algebra.compare(fn, dim, Const(bound)), None, f"{what} within its declared range {spec}")

    def add_number_input(self, number: Any) -> None:
        self.number_inputs.append(number)
        self.observations += 1  # its type check
        attach(number, NumberInput(number))

    # Observations ---------------------------------------------------------------------------------

    def observe_truth(self, number: Any, truth: bool) -> None:
        if self.ignoring:
            return
        expr = self._expression(number, f"its truth value ({truth})")
        if expr is None:
            return
        self.observe_condition(expr, truth, number)

    def observe_condition(self, expr: Expr, truth: bool, number: Any = "a comparison") -> None:
        """``expr`` (a condition over the inputs, with no proxy of its own) was ``truth``."""
        self._add(algebra.truth(expr) if truth else algebra.negate(expr), number)

    def observe_value(self, number: Any, value: Any) -> None:
        if self.ignoring:
            return
        expr = self._expression(number, f"its value ({value!r})")
        if expr is None:
            return
        self._add(algebra.equals(expr, value), number)  # of floats bitwise: -0.0 is not 0.0; NaN pins NaN

    def _expression(self, number: Any, what: str) -> Expr | None:
        """The expression of an observed number; None (and every input pinned) when it has none."""
        if is_data_dependent(number):
            refuse_data_dependent(number, what)
        expr = expr_of(number)
        if expr is None:
            self._unexpressible(number, what)
        return expr

    def _add(self, condition: Expr, number: Any, where: str | None = None) -> None:
        """Keep ``condition`` simplified, unless the guards kept already prove it (or it always holds).

        A condition added before is decided the same way again (kept guards and what they prove only grow),
        so it is skipped by its rendering: a trace observes a few conditions many times over (the benchmark's
        prefill makes 885 observations), and simplifying one goes through sympy."""
        self.observations += 1
        raw = condition.render(_trace_name)
        if raw in self.decided:
            return
        self.decided.add(raw)
        simplified, form = algebra.simplify(condition, self.symbols)
        if form is not None and self.facts.decide(form) is True:
            return
        for candidate in (simplified, condition) if simplified is not condition else (condition,):
            source = candidate.render(_trace_name) if candidate is not condition else raw
            if source in self.guards:
                return
            if _holds_now(candidate, source):  # the simplified form must reproduce the trace, as the traced one
                self.guards[source] = Guard(candidate, where or source_location(), form)
                if form is not None:
                    self.facts.learn(form)
                return
        self._unexpressible(number, f"the guard {source} does not reproduce the traced value")

    def _unexpressible(self, number: Any, what: str) -> None:
        self.unexpressible.append(f"{what} of {getattr(number, 'name', number)} at {source_location()}")

    # Result ---------------------------------------------------------------------------------------

    def conditions(self) -> list[Guard]:
        """Every guard the prologue must check: number-input types, then the recorded guards or pins."""
        out = [Guard(algebra.type_is(NumberInput(n), type(n.value)), "number input") for n in self.number_inputs]
        if self.unexpressible:
            where = f"pinned: cannot express {self.unexpressible[0]}"
            for t in self.tensor_inputs:
                for index, dim in enumerate(t._shape):
                    if not isinstance(dim, int):
                        out.append(Guard(algebra.equals(InputDim(t, index), dim.value), where))
            for n in self.number_inputs:
                out.append(Guard(algebra.equals(NumberInput(n), n.value), where))
        kept = list(self.guards.values())
        dropped = algebra.redundant([g.form for g in kept], self.symbols)  # implied by guards kept later
        out.extend(g for i, g in enumerate(kept) if i not in dropped)
        return out


def _holds_now(condition: Expr, source: str) -> bool:
    """Whether ``condition`` is true for the values the trace saw (a guard that is not models nothing)."""
    try:
        return eval(source, dict(NAMESPACE), _current_values(condition)) is True
    except Exception:  # noqa: BLE001  (any failure means the expression does not model the trace)
        return False


def _trace_name(proxy: Any) -> str:
    return proxy.name


def _current_values(expr: Expr) -> dict[str, Any]:
    """The values the trace saw for the leaves of ``expr``, by proxy name (for self-checking a guard)."""
    env = {}
    for leaf in expr.leaves():
        if hasattr(leaf, "_shape"):
            env[leaf.name] = types.SimpleNamespace(shape=tuple(getattr(d, "value", d) for d in leaf._shape))
        else:
            env[leaf.name] = leaf.value
    return env


_THUNDER = os.path.join(_THUNDER_DIR, "thunder") + os.sep
_THUNDER_TESTS = os.path.join(_THUNDER_DIR, "thunder", "tests") + os.sep  # (user code, though in thunder's folder)


def user_code_is_calling() -> bool:
    """Whether the innermost frame the interpreter runs is not thunder's own (its opcode helpers ask ``type()``
    of proxies to dispatch; user and library code ask about the value the proxy stands for). thunder's tests are
    user code: `isinstance(n, int)` of an int argument in one was False."""
    from thunder.core.interpreter import get_interpreterruntimectx

    try:
        frames = get_interpreterruntimectx().frame_stack
    except LookupError:
        return False
    filename = frames[-1].code.co_filename if frames else ""
    return bool(frames) and (not filename.startswith(_THUNDER) or filename.startswith(_THUNDER_TESTS))


def source_location() -> str:
    """``file:line in function: code`` of the observation being recorded: the innermost user frame the
    interpreter runs while tracing, else (building a backward, a meta check) the innermost Python frame
    outside this package."""
    from thunder.core.interpreter import get_interpreterruntimectx

    try:
        frames = get_interpreterruntimectx().frame_stack
    except LookupError:
        frames = []
    if frames:
        chosen = next((f for f in reversed(frames) if not f.code.co_filename.startswith(_INTERNAL)), frames[-1])
        line = (chosen.positions.lineno if chosen.positions else None) or chosen.code.co_firstlineno
        return _location(chosen.code.co_filename, line, chosen.qualname)
    frame = sys._getframe(1)
    while frame is not None and (
        frame.f_code.co_filename.startswith(_OWN) or os.path.basename(frame.f_code.co_filename) in _PASSING_THROUGH
    ):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return _location(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_qualname)


def _location(filename: str, line: int, function: str) -> str:
    code = linecache.getline(filename, line).strip()
    return f"{os.path.basename(filename)}:{line} in {function}" + (f": {code}" if code else "")


_OWN = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_PASSING_THROUGH = ("proxies.py", "baseutils.py", "langctxs.py", "ops.py")  # conversions, checks, wrappers


def current() -> GuardRecorder | None:
    return _current.get()


def python_value(x: Any) -> Any:
    """The Python value of ``x`` for code that needs a real number (text, hashing, a fallback op's fake run):
    a symbolic number's value is pinned by a guard (a truth value for a bool), a data-dependent one refused.

    The one way this package reads a number's value on the user's behalf, as ``guard_int`` is PyTorch's.
    """
    python_type = getattr(x, "python_type", None)
    if python_type is None or not hasattr(x, "value"):
        return x
    recorder = _current.get()
    if recorder is not None and is_data_dependent(x):
        refuse_data_dependent(x, "the value")
    value = x.value
    if recorder is not None:
        (recorder.observe_truth if python_type is bool else recorder.observe_value)(x, value)
    return value


@contextlib.contextmanager
def recording():
    """Record guards for the trace being built (nesting restarts recording for the inner trace)."""
    if getattr(_current.get(), "stands_in", False):
        _current.set(None)  # a failed compile's backward watch must not judge the next trace
    recorder = GuardRecorder()
    _finished.set(None)
    token = _current.set(recorder)
    try:
        yield recorder
    finally:
        _current.reset(token)
        _finished.set(recorder)  # the outermost recording finishes last: the prologue's guards


def finished() -> GuardRecorder | None:
    """The recorder of the last trace (the prologue's guards), once its recording has ended."""
    return _finished.get()


def install(stand_in: GuardRecorder | None) -> None:
    """Make ``stand_in`` receive the observations from now on (the backward watch; None to end it)."""
    _current.set(stand_in)


@contextlib.contextmanager
def paused():
    """Stop recording: what runs now (building the prologue) observes nothing of the user's program."""
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


@contextlib.contextmanager
def observations_ignored():
    """Numbers are derived as usual, but what runs now observes nothing the caller has not guarded itself
    (a meta function whose checks the caller made first, without the comparisons that decide nothing)."""
    recorder = _current.get()
    if recorder is None:
        yield
        return
    recorder.ignoring += 1
    try:
        yield
    finally:
        recorder.ignoring -= 1


def unobserved(fn):
    """``fn`` run with recording paused: what it does with proxies is not an observation of the program."""

    @functools.wraps(fn)
    def run_unobserved(*args, **kwargs):
        if _current.get() is None:  # (a trace's printing calls it ten thousand times: no context manager then)
            return fn(*args, **kwargs)
        with paused():
            return fn(*args, **kwargs)

    return run_unobserved
