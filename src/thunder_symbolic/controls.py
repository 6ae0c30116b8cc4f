"""What users declare about their shapes and their compiles, in the spirit of torch.compile's controls.

- Per-dim shape controls, on the tensor (:func:`mark_static`, :func:`mark_dynamic`, like
  ``torch._dynamo.mark_static``/``mark_dynamic``) or as the jit option ``dynamic_shapes`` naming
  arguments and dims (like ``torch.export``'s): a static dim is pinned by a guard; a dynamic dim with a
  range ``[min, max]`` starts the trace knowing it (every guard the range implies is dropped) and adds
  the range to the prologue's checks. A call outside the range recompiles, or, for a ``strict`` range,
  raises a :class:`ValueError` naming the argument, the dim, the range and the value.
- A recompile budget per jitted function (jit options ``recompile_limit``, default 8 as torch.compile's,
  and ``on_recompile_limit``: ``"warn"`` or ``"raise"``; process-wide ``THUNDER_SYMBOLIC_RECOMPILE_LIMIT``
  and ``THUNDER_SYMBOLIC_ON_RECOMPILE_LIMIT``): at its limit a function compiles no more, and a call that none
  of its programs accepts runs eagerly (``"warn"``, torch.compile's behaviour) or raises.
  ``diagnostics.fail_on_recompile`` makes any further recompile of a warmed-up function raise, as
  ``torch.compiler.set_stance("fail_on_recompile")`` does.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "STATIC",
    "Budget",
    "DeclaredShapeError",
    "Dim",
    "JitOptions",
    "RecompileLimitExceeded",
    "RecompileLimitWarning",
    "budget_from_options",
    "default_cache_option",
    "inherited_options",
    "inheriting_options",
    "declared_dims",
    "dynamic_shapes_from_options",
    "mark_dynamic",
    "mark_static",
]

_MARKS = "_thunder_symbolic_dims"

# (control, what it does): the status report (python -m thunder_symbolic) and the README show this table.
CONTROLS = (
    ("mark_static(t, *dims)", "specialize for the current size of t's dims (pinned by a guard)"),
    (
        "mark_dynamic(t, dim, min=, max=, strict=)",
        "dim dynamic in [min, max]: the range checked once, what it implies dropped",
    ),
    ("jit(..., dynamic_shapes={'x': {0: Dim(...) or STATIC}})", "the same, by parameter name and dim"),
    ("jit(..., recompile_limit=8)", "programs per function before on_recompile_limit applies"),
    (
        "jit(..., on_recompile_limit='warn' | 'raise')",
        "past the limit: run eagerly, warning once (naming the guards that failed most), or raise",
    ),
    ("fail_on_recompile(jf)", "any further recompile of jf raises (serving after warm-up)"),
    ("THUNDER_SYMBOLIC_RECOMPILE_LIMIT, _ON_RECOMPILE_LIMIT", "process-wide defaults of the two jit options"),
    ("THUNDER_SYMBOLIC_LOG=recompiles", "log each recompilation with its reasons"),
    (
        "THUNDER_SYMBOLIC_CACHE_DIR, THUNDER_SYMBOLIC_VERDICT_CACHE=0",
        "where thunderfx's verdicts (the node kinds thunder runs) are kept across processes; 0 keeps none",
    ),
    (
        "THUNDER_SYMBOLIC_SHARED_SUMS=0",
        "small sums over gloo ranks of one host through gloo instead of shared memory",
    ),
    (
        "THUNDER_SYMBOLIC_DEFAULT_CACHE='symbolic values'",
        "the cache option of a thunder.jit call that names none (thunder's default: 'constant values')",
    ),
    ("THUNDER_SYMBOLIC=0", "do not apply the patch set in this process"),
)


@dataclass(frozen=True)
class Dim:
    """A dynamic dim, optionally within ``[min, max]``; ``strict``: a call outside the range is an error."""

    min: int | None = None
    max: int | None = None
    strict: bool = False

    def __post_init__(self):
        for bound in ("min", "max"):
            value = getattr(self, bound)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                raise ValueError(f"Dim: {bound} must be an int >= 0 or None, got {value!r}")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"Dim: min ({self.min}) is larger than max ({self.max})")
        if not isinstance(self.strict, bool):
            raise TypeError(f"Dim: strict must be a bool, got {self.strict!r}")

    def __str__(self) -> str:
        return f"[{0 if self.min is None else self.min}, {'inf' if self.max is None else self.max}]"

    def contains(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class _Static:
    """The one marker of a static dim: copies of a marked tensor keep it (identity is how it is recognized)."""

    def __repr__(self) -> str:
        return "thunder_symbolic.STATIC"

    def __reduce__(self) -> str:
        return "STATIC"


STATIC = _Static()  # a dim the program is specialized for: pinned by a guard


def _check_dim(t: Any, dim: Any, caller: str) -> int:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{caller} expects a tensor, got {type(t).__name__}")
    if t.ndim == 0:
        raise ValueError(f"{caller}: a 0-d tensor has no dims to mark, got dim {dim!r}")
    if not isinstance(dim, int) or isinstance(dim, bool) or not -t.ndim <= dim < t.ndim:
        raise ValueError(
            f"{caller}: dim must be an int in [{-t.ndim}, {t.ndim - 1}] for a {t.ndim}-d tensor, got {dim!r}"
        )
    return dim % t.ndim


def mark_static(t: torch.Tensor, *dims: int) -> torch.Tensor:
    """Specialize every program ``t`` reaches for the current size of ``dims`` (all dims when none given)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"mark_static expects a tensor, got {type(t).__name__}")
    for dim in dims or range(t.ndim):
        t.__dict__.setdefault(_MARKS, {})[_check_dim(t, dim, "mark_static")] = STATIC
    return t


def mark_dynamic(t: torch.Tensor, dim: int, *, min: int | None = None, max: int | None = None, strict: bool = False):
    """Declare ``t``'s ``dim`` dynamic within ``[min, max]`` (either may be None)."""
    dim, declared = _check_dim(t, dim, "mark_dynamic"), Dim(min, max, strict)
    t.__dict__.setdefault(_MARKS, {})[dim] = declared
    return t


def dynamic_shapes_from_options(fn: Any, option: Any) -> dict[str, dict[int, Any]]:
    """The jit option ``dynamic_shapes={"x": {0: STATIC, 1: Dim(min=2)}}``, checked against ``fn``'s parameters."""
    if option is None:
        return {}
    if not isinstance(option, Mapping):
        raise TypeError(f"dynamic_shapes must be a dict of parameter name to {{dim: Dim or STATIC}}, got {option!r}")
    try:
        parameters = set(inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn).parameters)
    except (TypeError, ValueError):
        parameters = None
    out: dict[str, dict[int, Any]] = {}
    for name, dims in option.items():
        if parameters is not None and name not in parameters:
            raise ValueError(f"dynamic_shapes names {name!r}, which is not a parameter of {fn!r}: {sorted(parameters)}")
        if not isinstance(dims, Mapping) or not all(
            isinstance(d, int) and (spec is STATIC or isinstance(spec, Dim)) for d, spec in dims.items()
        ):
            raise TypeError(f"dynamic_shapes[{name!r}] must map dims (ints) to Dim(...) or STATIC, got {dims!r}")
        out[name] = dict(dims)
    return out


def declared_dims(t: torch.Tensor, name: str | None, options: Mapping[str, Mapping[int, Any]]) -> dict[int, Any]:
    """The declared dims of the input tensor ``t`` (parameter ``name``): its marks, then the jit option's."""
    declared = dict(getattr(t, _MARKS, {}))
    for dim, spec in (options.get(name, {}) if name is not None else {}).items():
        if not -t.ndim <= dim < max(t.ndim, 1):
            raise ValueError(f"dynamic_shapes[{name!r}] names dim {dim}, but {name} has {t.ndim} dims")
        declared[dim % t.ndim] = spec
    return declared


class DeclaredShapeError(ValueError):
    """A call's input is outside the strict range declared for one of its dims."""


class RecompileLimitWarning(UserWarning):
    """A jitted function is at its recompile limit and a call matches none of its programs: it runs eagerly."""


class RecompileLimitExceeded(RuntimeError):
    """A jitted function would compile more programs than its limit allows (``on_recompile_limit="raise"``;
    nothing is compiled)."""


@dataclass
class Budget:
    """How many programs a jitted function may compile, and what crossing the limit does."""

    limit: int = 8
    on_limit: str = "warn"  # or "raise"


def _int_option(value: Any, what: str) -> int:
    if isinstance(value, str):
        try:
            value = int(value)
        except ValueError:
            raise ValueError(f"{what} must be an int >= 1, got {value!r}") from None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    return value


def _mode_option(value: Any, what: str) -> str:
    if value not in ("warn", "raise"):
        raise ValueError(f"{what} must be 'warn' or 'raise', got {value!r}")
    return value


def budget_from_options(limit: Any = None, on_limit: Any = None) -> Budget:
    """The budget from the jit options, else the environment, else torch.compile's default (8, warn)."""
    if limit is None:
        env = os.environ.get("THUNDER_SYMBOLIC_RECOMPILE_LIMIT")
        limit = 8 if env is None else _int_option(env, "THUNDER_SYMBOLIC_RECOMPILE_LIMIT")
    else:
        limit = _int_option(limit, "recompile_limit")
    if on_limit is None:
        env = os.environ.get("THUNDER_SYMBOLIC_ON_RECOMPILE_LIMIT")
        on_limit = "warn" if env is None else _mode_option(env, "THUNDER_SYMBOLIC_ON_RECOMPILE_LIMIT")
    else:
        on_limit = _mode_option(on_limit, "on_recompile_limit")
    return Budget(limit, on_limit)


_CACHE_OPTION_NAMES = ("constant values", "symbolic values")


def default_cache_option() -> str | None:
    """The cache option of a ``thunder.jit`` call that names none, from ``THUNDER_SYMBOLIC_DEFAULT_CACHE`` (None when
    unset: thunder's own default). Running a whole code base, or thunder's own test suite, under symbolic values
    is how symbolic values is shown to be a drop-in for the default."""
    env = os.environ.get("THUNDER_SYMBOLIC_DEFAULT_CACHE")
    if env is None or not env.strip():
        return None
    if env.strip() not in _CACHE_OPTION_NAMES:
        raise ValueError(
            f"THUNDER_SYMBOLIC_DEFAULT_CACHE must be one of {', '.join(map(repr, _CACHE_OPTION_NAMES))}, got {env!r}"
        )
    return env.strip()


@dataclass(frozen=True)
class JitOptions:
    """Options of a ``thunder.jit`` call that thunder does not pass on where it calls ``thunder.jit`` itself (None:
    not given)."""

    cache: Any = None
    dynamic_shapes: dict[str, dict[int, Any]] | None = None
    budget: Budget | None = None


_INHERITED: contextvars.ContextVar[JitOptions | None] = contextvars.ContextVar(
    "thunder_symbolic_inherited_jit_options", default=None
)


@contextlib.contextmanager
def inheriting_options(options: JitOptions):
    """A ``thunder.jit`` call made inside takes ``options`` where it names none: thunder re-jits a jitted function
    to add a transform (``add_transform``, which ``thunder.core.transforms.grad`` calls) and passes on its
    executors and compile options but not these; thunderfx jits its regions of a graph Dynamo made dynamic."""
    token = _INHERITED.set(options)
    try:
        yield
    finally:
        _INHERITED.reset(token)


def inherited_options() -> JitOptions | None:
    """The options a ``thunder.jit`` call made now inherits (see :func:`inheriting_options`), else None."""
    return _INHERITED.get()
