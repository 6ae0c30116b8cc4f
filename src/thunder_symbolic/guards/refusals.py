"""Calls refused while tracing: their result, or their effect, would be the first call's on every call.

thunder makes a call it does not trace once, while tracing, and the compiled program returns what that call
returned. For a call whose answer changes from call to call with nothing the prologue can check, or whose
effect eager Python repeats on every call, that is a wrong result: the trace is refused with an error naming
the call and its line. (Calls whose answer the prologue can make again, ``torch.get_num_threads()`` or a
``ContextVar``'s value, are checked instead: :func:`thunder_symbolic.guards.values.reads_state`.)
"""

from __future__ import annotations

import _random
import sys
import time
import types
from collections.abc import Callable
from typing import Any

import torch

from thunder_symbolic.guards.values import SideEffectError, UncheckableValueError

__all__ = ["inference_mode_refused", "refusal"]


def refusal(fn: Any) -> Callable[[str], Exception] | None:
    """The error (given where the call is) for a call of ``fn`` that traced code must not make, or None."""
    if draws_random(fn):
        return lambda where: random_draw_refused(fn, where)
    if seeds_torch(fn):
        return lambda where: seeding_refused(fn, where)
    if reads_clock(fn):
        return lambda where: clock_read_refused(fn, where)
    return None


def _generator_class(fn: Any) -> type | None:
    """The random number generator class whose compiled method ``fn`` is (the interpreter calls ``random.random``,
    a C method bound to the module's generator, as ``_random.Random.random`` of it, and numpy's Cython methods
    unbound), or None."""
    owner = getattr(fn, "__objclass__", None)
    if owner is None and type(fn).__name__ == "cython_function_or_method":
        owner = getattr(sys.modules.get(fn.__module__), fn.__qualname__.rpartition(".")[0], None)
    elif owner is None:
        owner = type(getattr(fn, "__self__", None))
    numpy = sys.modules.get("numpy")
    generators = (_random.Random, numpy.random.RandomState, numpy.random.Generator) if numpy else (_random.Random,)
    return owner if isinstance(owner, type) and issubclass(owner, generators) else None


def draws_random(fn: Any) -> bool:
    """Whether calling ``fn`` draws from a Python random number generator (``random.random``, every method of a
    ``random.Random`` draws through one, numpy's ``np.random.rand``, a ``Generator``'s): a new result each call."""
    compiled = isinstance(fn, (types.BuiltinMethodType, _METHOD_DESCRIPTOR))
    return (compiled or type(fn).__name__ == "cython_function_or_method") and _generator_class(fn) is not None


_METHOD_DESCRIPTOR = type(str.join)


def random_draw_refused(fn: Any, where: str) -> SideEffectError:
    """The error for traced code that draws from a Python random number generator: thunder calls it once, while
    tracing, and the compiled program returns that draw on every call (and leaves the generator's state alone)."""
    name = f"{_generator_class(fn).__name__}.{fn.__name__}"
    return SideEffectError(
        f"{name}() at {where} draws from a Python random number generator; the compiled program would repeat this "
        "call's draw on every later call (eager Python draws anew), so thunder.jit refuses to compile it. Draw "
        "with torch inside the function (torch.rand, torch.randint), or pass the drawn value as an argument."
    )


# torch's functions and Generator methods that set a random number generator's state: called once, while tracing.
_TORCH_SEEDING = frozenset(
    id(getattr(owner, name))
    for owner, names in (
        (torch.random, ("manual_seed", "seed", "set_rng_state")),
        (torch.cuda, ("manual_seed", "manual_seed_all", "seed", "seed_all", "set_rng_state", "set_rng_state_all")),
    )
    for name in names
    if hasattr(owner, name)
)
_GENERATOR_SEEDING = ("manual_seed", "seed", "set_state")


def seeds_torch(fn: Any) -> bool:
    """Whether calling ``fn`` sets the state of a torch random number generator (``torch.manual_seed``, a
    ``torch.Generator``'s ``manual_seed``, bound or unbound)."""
    if id(fn) in _TORCH_SEEDING:
        return True
    owner = getattr(fn, "__objclass__", None) or type(getattr(fn, "__self__", None))
    return isinstance(owner, type) and issubclass(owner, torch.Generator) and fn.__name__ in _GENERATOR_SEEDING


def seeding_refused(fn: Any, where: str) -> SideEffectError:
    """The error for traced code that seeds a torch generator: thunder seeded it once, while tracing; the compiled
    program's random draws then follow the generator's state, not the seed (eager seeds on every call)."""
    return SideEffectError(
        f"{getattr(fn, '__qualname__', fn.__name__)}() at {where} sets the state of a torch random number "
        "generator; the compiled program would not set it again on later calls (eager Python does), so thunder.jit "
        "refuses to compile it. Seed outside the jitted function."
    )


def inference_mode_refused(mode: bool, where: str) -> NotImplementedError:
    """The error for traced code that turns inference mode on or off: thunder enters the mode while tracing, but
    the compiled program runs in the caller's mode (0.2.6, either cache: the tensors made inside a
    ``torch.inference_mode()`` block required grad and were not inference tensors)."""
    return NotImplementedError(
        f"torch.inference_mode({mode}) at {where} turns inference mode {'on' if mode else 'off'} inside the jitted "
        "function; thunder's compiled program would run in the caller's mode instead, so thunder.jit refuses to "
        "compile it. Enter the mode around the call of the jitted function, or use torch.no_grad() inside it."
    )


# Python's clocks: read once, while tracing, a reading was returned by every later call of the program.
_CLOCKS = frozenset(
    id(getattr(time, name))
    for base in ("time", "perf_counter", "monotonic", "process_time", "thread_time")
    for name in (base, f"{base}_ns")
)


def reads_clock(fn: Any) -> bool:
    """Whether ``fn`` is one of Python's clocks (``time.time``, ``time.perf_counter``...)."""
    return id(fn) in _CLOCKS


def clock_read_refused(fn: Any, where: str) -> UncheckableValueError:
    """The error for traced code that reads a clock: no check can prove a reading unchanged."""
    return UncheckableValueError(
        f"time.{fn.__name__}() at {where} reads a clock; the compiled program would return this call's reading on "
        "every later call (eager Python reads it anew), so thunder.jit refuses to compile it. Read the clock "
        "outside the jitted function and pass the value as an argument."
    )
