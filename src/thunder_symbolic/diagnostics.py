"""Why did a jitted function recompile? The failed prologue checks of each cache miss, with their source.

Every cached program's prologue is watched: when all of them reject a call (a cache miss), the reasons
they gave — for guards recorded by this package, the condition and the source line that created it —
are kept as a :class:`Miss`. :func:`recompile_reasons` returns them; ``THUNDER_SYMBOLIC_LOG=recompiles``
logs each one as it happens (logger ``thunder_symbolic.recompiles``), in the spirit of
``TORCH_LOGS=recompiles``. thunder's own ``cache_misses`` keeps meaning "compiles".
"""

from __future__ import annotations

import collections
import functools
import logging
import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

import thunder
from thunder_symbolic.controls import Budget, RecompileLimitExceeded, RecompileLimitWarning
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards.prologue import GuardFailed

__all__ = ["Miss", "Program", "explain", "fail_on_recompile", "recompile_reasons"]

log = logging.getLogger("thunder_symbolic.recompiles")
if "recompiles" in os.environ.get("THUNDER_SYMBOLIC_LOG", "").split(","):
    log.setLevel(logging.INFO)
    if not log.handlers:
        log.addHandler(logging.StreamHandler())

KEPT_MISSES = 32
_CALLERS_TO_SKIP = tuple(os.path.dirname(m.__file__) for m in (thunder, torch)) + (os.path.dirname(__file__),)


@dataclass(frozen=True)
class Miss:
    """One recompilation: the call that missed and why each cached program rejected it (newest first)."""

    call: int
    reasons: tuple[str, ...]

    def __str__(self) -> str:
        return f"call {self.call}: " + "; ".join(self.reasons)


@dataclass(frozen=True)
class Program:
    """What the prologue of one cached program checks before reusing it.

    ``guards`` are the (condition, where) pairs of the symbolic guards, simplified, late guards (from
    building the backward) last; ``observed`` counts the observations tracing recorded before the guards
    that always hold, repeat, or follow from kept ones were dropped; ``value_checks`` counts the checks
    of other Python values (None, dtypes, containers).
    """

    index: int
    guards: tuple[tuple[str, str], ...]
    observed: int
    value_checks: int

    def __str__(self) -> str:
        def count(n: int, what: str) -> str:
            return f"{n} {what}" + ("" if n == 1 else "s")

        head = f"program {self.index}: {count(len(self.guards), 'guard')} (of {self.observed} observed), "
        lines = [head + count(self.value_checks, "value check")]
        lines += [f"  {condition}  # {where}" for condition, where in self.guards]
        return "\n".join(lines)


def _program(index: int, entry: Any, observed: int) -> Program:
    guards: tuple = ()
    value_checks = 0
    for bsym in entry.prologue_traces[-1].bound_symbols if entry.prologue_traces else ():
        if bsym.sym.name == "check_symbolic_guards":
            guards += tuple(bsym.args[1])
        elif bsym.sym.name == "check_python_values":
            value_checks += len(bsym.args[0])
    late = getattr(entry.prologue_fn, "late_guards", ())
    return Program(index, guards + tuple(late), observed, value_checks)


class RunEagerly(RecompileLimitExceeded):
    """The call is past its function's recompile limit: the jitted function runs the original eagerly (raised
    through thunder's cache lookup, caught by the wrapper :func:`eager_past_limit` puts around the function)."""


def eager_past_limit(call, fn):
    """``call`` (what ``thunder.jit`` returned, or a module's forward), running ``fn`` eagerly past the limit."""

    @functools.wraps(call)
    def jitted(*args, **kwargs):
        try:
            return call(*args, **kwargs)
        except RunEagerly:
            return fn(*args, **kwargs)

    jitted.__wrapped__ = getattr(call, "__wrapped__", call)  # (what thunder's function wraps: the user's)
    return jitted


class MissRecordingCache(list):
    """thunder's per-function list of cache entries, watching each entry's prologue for rejections."""

    def __init__(self, name: str, stats: Any, budget: Budget, transforms: Sequence[Any] = ()):
        super().__init__()
        self.name = name
        self.stats = stats
        self.budget = budget
        self.transforms = tuple(type(t).__name__ for t in transforms)
        self.warned = False
        self.failed_guards: collections.Counter[tuple[str, str]] = collections.Counter()
        self.misses: collections.deque[Miss] = collections.deque(maxlen=KEPT_MISSES)
        self.rejections: list[str] = []
        self.programs: list[Program] = []

    def __reversed__(self):
        """thunder's cache lookup: the entries, newest first. Past the last one, every entry has rejected the call
        and thunder would compile: at the recompile limit, :meth:`_at_limit` stops it first."""
        yield from super().__reversed__()
        if len(self) >= self.budget.limit:
            self._at_limit()

    def append(self, entry) -> None:
        if self:  # a recompilation: every existing entry has just rejected the call
            miss = Miss(self.stats.calls, tuple(reversed(self.rejections)))
            self.misses.append(miss)
            log.info("thunder_symbolic: recompiling %s (compile %d) because %s", self.name, len(self) + 1, miss)
        self.rejections.clear()
        finished = guard_recorder.finished()
        self.programs.append(_program(len(self), entry, finished.observations if finished is not None else 0))
        super().append(entry._replace(prologue_fn=self._watch(entry.prologue_fn, len(self))))

    def _at_limit(self) -> None:
        """No cached program accepts the call and the function has compiled as many as its limit allows: raise
        (``"raise"``), or warn once and have the call run eagerly (``"warn"``, torch.compile's behaviour), naming
        the guards that failed most. Nothing is compiled, so nothing grows past the limit. A function jitted with
        transforms (``grad``, quantization, a distributed transform) computes something else than its eager
        self: under ``"warn"`` it compiles past the limit, as thunder does, after one warning."""
        top = "; ".join(
            f"{condition} (recorded at {where}): {n} times"
            for (condition, where), n in self.failed_guards.most_common(3)
        )
        if top:
            why = f"; the guards that failed most: {top}"
        else:  # thunder's own checks (constant values) raise their own errors
            why = f"; the last program rejected the call with {self.rejections[0]}" if self.rejections else ""
        self.rejections.clear()
        message = (
            f"{self.name} has compiled {len(self)} programs, its recompile limit ({self.budget.limit}), and none of "
            f"them accepts this call{why}"
        )
        if self.budget.on_limit == "raise":
            raise RecompileLimitExceeded(message + " (on_recompile_limit='raise')")
        if self.transforms:  # (running the function eagerly would not compute what its transforms make of it)
            if not self.warned:
                self.warned = True
                warnings.warn(
                    f"{message}. It compiles past the limit, as thunder does: its transforms "
                    f"({', '.join(self.transforms)}) change what it computes, so it cannot run eagerly instead; "
                    "set recompile_limit or THUNDER_SYMBOLIC_RECOMPILE_LIMIT to raise the limit, or "
                    "on_recompile_limit='raise' to stop.",
                    RecompileLimitWarning,
                    skip_file_prefixes=_CALLERS_TO_SKIP,
                )
            return
        if not self.warned:
            self.warned = True
            warnings.warn(
                message + ". Calls that none accepts run eagerly; set recompile_limit or "
                "THUNDER_SYMBOLIC_RECOMPILE_LIMIT to raise the limit.",
                RecompileLimitWarning,
                skip_file_prefixes=_CALLERS_TO_SKIP,  # (the warning points at the user's call)
            )
        raise RunEagerly(message)

    def _watch(self, prologue, index: int):
        rejections, failed_guards = self.rejections, self.failed_guards

        @functools.wraps(prologue)
        def watched_prologue(*args, **kwargs):
            try:
                result = prologue(*args, **kwargs)
            except Exception as e:
                rejections.append(f"program {index}: {type(e).__name__}: {e}")
                if isinstance(e, GuardFailed):
                    failed_guards[(e.condition, e.where)] += 1
                raise
            rejections.clear()
            return result

        return watched_prologue


def cache_of(jfn, caller: str) -> MissRecordingCache | None:
    stats = getattr(jfn, "_lc_cs", None)
    if stats is None:
        raise TypeError(f"{caller} expects a function returned by thunder.jit, got {type(jfn).__name__}")
    cache = stats.interpreter_cache
    return cache if isinstance(cache, MissRecordingCache) else None


def fail_on_recompile(jfn) -> None:
    """From now on, a recompile of ``jfn`` raises :class:`RecompileLimitExceeded` (serving after warm-up)."""
    cache = cache_of(jfn, "fail_on_recompile")
    if cache is None:
        raise TypeError("fail_on_recompile needs a function jitted while thunder-symbolic is applied")
    cache.budget = Budget(max(len(cache), 1), "raise")


def recompile_reasons(jfn) -> list[Miss]:
    """The last recompilations of ``jfn`` (a function or module from ``thunder.jit``), oldest first."""
    cache = cache_of(jfn, "recompile_reasons")
    return list(cache.misses) if cache is not None else []


def explain(jfn) -> list[Program]:
    """What each cached program of ``jfn`` checks before it is reused, oldest first (``print`` them)."""
    cache = cache_of(jfn, "explain")
    return list(cache.programs) if cache is not None else []
