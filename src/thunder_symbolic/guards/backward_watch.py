"""The backward watch: what building a backward reads of symbolic sizes, after the prologue is final.

thunder traces the forward (its recorder's guards become the prologue's check), then builds the backward
and lets the executors transform the joint and backward traces; grad rules and meta checks read sizes
there too (``int(a.shape[0] - stop)`` for a slice's padding). From :func:`start` (the grad transform)
until the cache entry is built (:func:`finish`), a stand-in recorder receives those observations:

- one the prologue already checks, or one the algebra proves for every input, is harmless;
- one expressible over the computation's inputs becomes a *late guard*, checked right after the prologue;
- any other one raises :class:`BackwardSpecializes`: the caller (``dispatch``) then compiles the program
  with exact shapes, as under ``cache="constant values"``.

:func:`compiling` is the one context manager callers wrap a compile in: the watch never outlives it.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass
from typing import Any

from thunder_symbolic.guards import algebra
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards.prologue import compile_guards
from thunder_symbolic.guards.recorder import Guard, GuardRecorder

__all__ = ["BackwardSpecializes", "compiling", "finish", "start", "started", "strictly"]


class BackwardSpecializes(Exception):
    """Building the backward observed a symbolic number the prologue does not check (it would bake it in)."""


@dataclass
class _Watch(GuardRecorder):
    """Stands in for the forward's recorder while the backward is built (see the module docstring)."""

    forward: GuardRecorder | None = None
    # Outside the grad transform and the forward/backward split, the executors re-run meta functions
    # on numbers they re-create without expressions; those observations repeat checks already watched.
    strict: bool = False
    stands_in = True

    def _add(self, condition: algebra.Expr, number: Any) -> None:
        forward = self.forward
        simplified, form = algebra.simplify(condition, forward.symbols)
        if form is not None and forward.facts.decide(form) is True:
            return
        source = simplified.render(_trace_name)
        if source in forward.guards:
            return
        if any(id(leaf) not in forward.final_names for leaf in simplified.leaves()):
            raise BackwardSpecializes(f"the backward depends on {source}, which the prologue cannot check")
        where = f"{guard_recorder.source_location()} (building the backward)"
        forward.late.setdefault(source, Guard(simplified, where, form))
        if form is not None:
            forward.facts.learn(form)

    def _unexpressible(self, number: Any, what: str) -> None:
        if self.strict:
            raise BackwardSpecializes(f"the backward depends on {what}, which the prologue cannot check")


def _trace_name(proxy: Any) -> str:
    return proxy.name


def start() -> None:
    """Watch what runs from now until the cache entry is built: called where the backward starts."""
    forward = guard_recorder.finished()
    if forward is None:
        return
    forward.backward_started = True
    if forward.unexpressible or guard_recorder.current() is not None:
        return  # every input pinned (nothing can be left unchecked), or already watched or recording
    guard_recorder.install(_Watch(forward=forward))


def started() -> bool:
    """Whether the last compile got as far as building a backward (its forward traced and guarded)."""
    forward = guard_recorder.finished()
    return forward is not None and forward.backward_started


@contextlib.contextmanager
def strictly():
    """While the grad rules run and the backward is split off, every observation must be expressible."""
    watch = guard_recorder.current()
    if not isinstance(watch, _Watch):
        yield
        return
    watch.strict = True
    try:
        yield
    finally:
        watch.strict = False


def _stop() -> None:
    if isinstance(guard_recorder.current(), _Watch):
        guard_recorder.install(None)


@contextlib.contextmanager
def compiling():
    """Around a call that may compile (and build a backward): the watch ends with it, whatever happens."""
    try:
        yield
    finally:
        _stop()


def finish(entry: Any) -> Any:
    """End the watch as the cache entry is built; the entry's prologue then checks the late guards too."""
    _stop()
    forward = guard_recorder.finished()
    if forward is None or not forward.late:
        return entry
    guards, forward.late = list(forward.late.values()), {}
    leaves = {id(leaf): leaf for g in guards for leaf in g.condition.leaves()}
    names = tuple(forward.final_names[i] for i in leaves)
    rendered = tuple((g.condition.render(lambda p: forward.final_names[id(p)]), g.where) for g in guards)
    readers = _input_readers(entry.computation_traces[0].args)
    return entry._replace(prologue_fn=_with_late_guards(entry.prologue_fn, readers, names, rendered))


def _input_readers(args) -> dict[str, tuple[int, str | None]]:
    """By name, where a late guard finds a value among the computation's inputs (the prologue's first
    result): an input, or the local tensor of a DTensor input (its local sizes are symbolic inputs too)."""
    readers: dict[str, tuple[int, str | None]] = {}
    for i, p in enumerate(args):
        readers[p.name] = (i, None)
        local = getattr(p, "local_tensor", None)
        if local is not None:
            readers.setdefault(local.name, (i, "_local_tensor"))
    return readers


def _with_late_guards(prologue_fn, readers: dict[str, tuple[int, str | None]], names: tuple[str, ...], guards):
    """``prologue_fn`` followed by a check of the late guards, which read the computation's inputs (the
    prologue's first result) by name."""
    missing = [n for n in names if n not in readers]
    if missing:
        raise BackwardSpecializes(f"the backward depends on {missing}, which are not inputs of the computation")
    where = [readers[n] for n in names]
    check = compile_guards(names, guards)

    @functools.wraps(prologue_fn)
    def prologue(*args, **kwargs):
        inputs, to_epilogue = prologue_fn(*args, **kwargs)
        check(*[inputs[i] if attribute is None else getattr(inputs[i], attribute) for i, attribute in where])
        return inputs, to_epilogue

    prologue.late_guards = guards  # for diagnostics.explain
    return prologue
