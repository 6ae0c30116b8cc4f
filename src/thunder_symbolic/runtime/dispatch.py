"""A shorter call path for functions jitted with ``cache="symbolic values"``.

thunder's per-call path wraps the work in several layers (statistics timers, a language context, a
copy of the cache entry per call) that cost more than the prologue itself. On a cache hit this path
does the same work without them: the same cache information (default dtype and device, autocast,
aliasing of the tensor arguments, grad mode), cached prologues tried newest first until one accepts
the call — so every guard still runs on every call — then the computation and the epilogue, and
thunder's statistics. With several cached programs, the one that accepted the same argument sizes
and numbers last time is tried first (:class:`DispatchHints`): a hint, never a proof, since its
prologue runs in full; a function that cycles through a few sizes pays one prologue per call.
Everything else takes thunder's own path: a miss (which compiles, with Python's cyclic collector
paused: :mod:`thunder_symbolic.runtime.gc_pause`), programs with a backward (see
:func:`with_exact_shapes_for_autograd`), autocast, DDP/FSDP, and calls made while tracing.
"""

from __future__ import annotations

import functools
import types
from time import perf_counter_ns

import torch
from thunder.core import compile_data as compile_data_module
from thunder.core.interpreter import InterpreterError
from thunder.core.options import CACHE_OPTIONS
from thunder.core.pytree import tree_flatten
from thunder.core.trace import _tracectx
from thunder.executors.torchex import no_autocast

import thunder
from thunder_symbolic.controls import DeclaredShapeError
from thunder_symbolic.guards import backward_watch
from thunder_symbolic.guards.compiled_prologue import compile_prologue
from thunder_symbolic.runtime import gc_pause

__all__ = ["alias_groups", "fast_call_path", "needs_backward", "undecorated"]

_EXACT_BACKWARD = "_thunder_symbolic_exact_backward"  # on a CompileData whose backward needs exact shapes: why
set_grad_enabled = torch._C._set_grad_enabled


# Flattened as themselves by thunder's tree_flatten (none_is_leaf; a parameter or a DTensor is a leaf too: a
# tensor-parallel module's region takes dozens).
_LEAVES = {torch.Tensor, torch.nn.Parameter, int, float, bool, str, type(None)}
if torch.distributed.is_available():
    from torch.distributed.tensor import DTensor

    _LEAVES.add(DTensor)


# Arguments that hold no tensor and are not containers (a dtype, a callable): no need to flatten for them.
_NOT_CONTAINERS = frozenset(
    (int, float, bool, str, type(None), torch.dtype, torch.device, types.FunctionType, types.BuiltinFunctionType)
)


def _fewer_than_two_tensors(args, kwargs) -> bool:
    """Whether the arguments certainly hold fewer than two tensors (then no two can share a storage)."""
    pending, tensors = [*args, *kwargs.values()], 0
    while pending:
        a = pending.pop()
        kind = type(a)
        if isinstance(a, torch.Tensor):
            tensors += 1
            if tensors > 1:
                return False
        elif kind is list or kind is tuple:
            pending.extend(a)
        elif kind is dict:
            pending.extend(a.values())
        elif kind not in _NOT_CONTAINERS:
            return False  # anything else may be a container thunder flattens: count exactly
    return True


def _all_leaves(args) -> bool:
    for a in args:  # a loop, not all(generator): leaving a generator early raises GeneratorExit
        if type(a) not in _LEAVES:
            return False
    return True


def alias_groups(args, kwargs) -> str:
    """thunder's ``alias_tensor_indices``: groups of argument tensors sharing a storage, as "0,2-1,3"."""
    if kwargs or not _all_leaves(args):
        if _fewer_than_two_tensors(args, kwargs):
            return ""
        args, _ = tree_flatten((args, kwargs))
    tensors = [(i, t) for i, t in enumerate(args) if type(t) is torch.Tensor and t.layout is torch.strided]
    if len(tensors) < 2:
        return ""
    by_storage: dict[int, list[str]] = {}
    for index, t in tensors:
        by_storage.setdefault(t.untyped_storage().data_ptr(), []).append(str(index))
    return "-".join(",".join(group) for group in by_storage.values() if len(group) > 1)


# The code objects of torch.no_grad()'s and thunder's no_autocast decorators, to recognize them.
_NO_GRAD_CODE = torch.no_grad()(lambda: None).__code__
_NO_AUTOCAST_CODE = no_autocast(lambda: None).__code__


def undecorated(computation):
    """The computation inside thunder's ``@torch.no_grad() @no_autocast`` decorators, or None.

    Entering them costs more than small computations; the caller sets grad mode itself, and autocast
    is off whenever the short path runs (and was off when the entry was compiled: the prologue checks it).
    """
    inner = getattr(computation, "__wrapped__", None)
    if getattr(computation, "__code__", None) is not _NO_GRAD_CODE or inner is None:
        return None
    if getattr(inner, "__code__", None) is not _NO_AUTOCAST_CODE:
        return None
    return getattr(inner, "__wrapped__", None)


def needs_backward(compile_data, args, kwargs) -> bool:
    """Whether this call would build a backward: grad mode on and a tensor input or parameter requiring grad."""
    if compile_data.disable_torch_autograd_support or not torch.is_grad_enabled():
        return False
    if any(isinstance(t, torch.Tensor) and t.requires_grad for t in tree_flatten((args, kwargs))[0]):
        return True
    fn = compile_data.fn
    return isinstance(fn, torch.nn.Module) and any(p.requires_grad for p in fn.parameters())


def with_exact_shapes_for_autograd(thunder_call, compile_data, stats):
    """Compile a program that needs a backward with exact shapes once its backward proves to need them.

    thunder builds the backward after the prologue; until the cache entry is built, a watch (see
    :mod:`thunder_symbolic.guards.backward_watch`) raises ``BackwardSpecializes`` on any size or
    number the prologue cannot check. Such programs (a slice's padding, for one) are then compiled as
    under ``cache="constant values"``, now and on every later miss; the others keep one program across
    shapes, backward included. Cached entries of both kinds coexist.
    """

    def exact(*args, **kwargs):
        compile_data.cache_option = CACHE_OPTIONS.CONSTANT_VALUES
        try:
            return thunder_call(*args, **kwargs)
        finally:
            compile_data.cache_option = CACHE_OPTIONS.SYMBOLIC_VALUES

    @functools.wraps(thunder_call)
    def call(*args, **kwargs):
        if not needs_backward(compile_data, args, kwargs):
            return thunder_call(*args, **kwargs)
        if getattr(compile_data, _EXACT_BACKWARD, False):
            return exact(*args, **kwargs)
        misses, entries = stats.cache_misses, len(stats.interpreter_cache)
        try:
            with backward_watch.compiling():
                return thunder_call(*args, **kwargs)
        except Exception as e:
            # A backward that specializes, or that thunder cannot build from symbolic sizes (0.2.6's
            # passes fail on some, e.g. cat's: "Detected a cycle while swapping"). Errors of tracing
            # the function itself (before the backward) or of running a compiled program are raised.
            compiled_nothing = stats.cache_misses > misses and len(stats.interpreter_cache) == entries
            from_backward = isinstance(e, backward_watch.BackwardSpecializes) or backward_watch.started()
            if not (compiled_nothing and from_backward):
                raise
            setattr(compile_data, _EXACT_BACKWARD, f"{type(e).__name__}: {e}")
            stats.cache_misses -= 1  # the abandoned attempt compiled nothing; the exact one counts
            return exact(*args, **kwargs)

    return call


def _declared_shape_errors_unwrapped(thunder_call):
    """A call outside a strict declared range raises the ValueError that says so, not the interpreter's
    wrapper around it (the check runs while thunder traces the new inputs)."""

    @functools.wraps(thunder_call)
    def call(*args, **kwargs):
        try:
            return thunder_call(*args, **kwargs)
        except InterpreterError as e:
            if isinstance(e.__cause__, DeclaredShapeError):
                raise e.__cause__ from None
            raise

    return call


_CPU = torch.device("cpu")


def _default_device() -> torch.device:
    """``torch.get_default_device()`` without its cost (2 µs) when no device mode is active and none was
    set: then it is the CPU. The thread-local is read through its ``__dict__``: a missing attribute raises
    inside ``hasattr``, and an exception costs microseconds on a path this short."""
    if torch._C._len_torch_function_stack() == 0 and "device_context" not in vars(torch._GLOBAL_DEVICE_CONTEXT):
        return _CPU
    return torch.get_default_device()


def _tracing() -> bool:
    """thunder's ``is_tracing()`` without the LookupError it raises (and catches) outside a trace."""
    return _tracectx.get(None) is not None


_HINTED_TYPES = (int, float, bool, str, type(None))


def _hint_of(a):
    return a.shape if isinstance(a, torch.Tensor) else a if type(a) in _HINTED_TYPES else id(a)


class DispatchHints(dict):
    """The position of the cache entry that last accepted a call, by a cheap key of the call's arguments
    (tensor shapes, numbers, strings; other objects by identity). Bounded: cleared past ``LIMIT`` keys."""

    LIMIT = 256

    @staticmethod
    def key(args, kwargs):
        return (*map(_hint_of, args), *((name, _hint_of(a)) for name, a in kwargs.items()))

    def remember(self, key, position: int) -> None:
        if len(self) >= self.LIMIT:
            self.clear()
        self[key] = position


def _positions_to_try(count: int, hinted: int | None) -> list[int]:
    """The positions of the cached entries, the hinted one first, then the others newest first (a list:
    a generator left at the first hit raises GeneratorExit, which costs more than the list)."""
    newest_first = list(range(count - 1, -1, -1))
    if hinted is not None and hinted < count:
        newest_first.remove(hinted)
        newest_first.insert(0, hinted)
    return newest_first


_PROLOGUE_TIMER = "jit.<locals>.prologue_execution_timer.<locals>.wrapped"


def thunder_prologue(prologue_fn):
    """The prologue thunder compiled, inside the cache's watcher (``diagnostics``: the short path needs no
    reasons, a miss retries every prologue on thunder's path) and thunder's timer of prologue executions
    (whose statistics the short path keeps itself); else ``prologue_fn`` itself (late guards wrap it)."""
    fn = getattr(prologue_fn, "__wrapped__", prologue_fn)
    code = getattr(fn, "__code__", None)
    if code is None or code.co_qualname != _PROLOGUE_TIMER or code.co_filename != thunder.__file__:
        return prologue_fn
    return dict(zip(code.co_freevars, fn.__closure__))["fn"].cell_contents


def _hit_functions(entry) -> tuple:
    """What a hit on ``entry`` runs: its prologue compiled into one check (see
    :mod:`thunder_symbolic.guards.compiled_prologue`; None where it is not compiled), thunder's prologue
    (see :func:`thunder_prologue`), and its computation and epilogue without their decorators (None for
    both unless both have them). Call with the compile data set: a module's prologue reads it."""
    computation, epilogue = undecorated(entry.computation_fn), undecorated(entry.epilogue_fn)
    if computation is None or epilogue is None:
        computation = epilogue = None
    prologue = thunder_prologue(entry.prologue_fn)
    accept = None
    if prologue is not entry.prologue_fn:  # thunder's own (late guards wrap the others)
        accept = compile_prologue(
            entry.prologue_traces[-1], prologue, default_device=_default_device, alias_groups=alias_groups
        )
    return accept, prologue, computation, epilogue


def _cache_info(grad_enabled: bool, check_aliases: bool, args, kwargs) -> dict:
    """The cache information thunder's prologues read, as thunder's path would publish it for this call."""
    cache_info = {
        "default_dtype": torch.get_default_dtype(),
        "default_device": _default_device(),
        "is_autocast_enabled": False,
        "is_grad_enabled": grad_enabled,
        "no_grad_sync": False,
    }
    if check_aliases:
        cache_info["alias_tensor_indices"] = alias_groups(args, kwargs)
    return cache_info


def fast_call_path(thunder_call, compile_data, stats):
    """Wrap ``thunder_call`` (what ``thunder.jit`` built) with the shorter path for cache hits."""
    thunder_call = _declared_shape_errors_unwrapped(with_exact_shapes_for_autograd(thunder_call, compile_data, stats))
    distributed = getattr(compile_data.fn, "use_ddp", False) or getattr(compile_data.fn, "use_fsdp", False)
    check_aliases = not compile_data.compile_options.get("skip_inplace_alias_updates", False)
    cache_info_ctx = thunder._cache_info_ctx
    hit_functions: dict = {}  # by the cached entry's prologue_fn: _hit_functions(entry)
    compile_data_ctx, compile_data_and_stats = compile_data_module._compile_data, (compile_data, stats)
    hints = DispatchHints()

    def prologue_result(entry, grad_enabled, args, kwargs):
        """``(functions, (inputs, to_epilogue))`` if ``entry``'s prologue accepts the call, else ``(functions,
        None)``."""
        functions = hit_functions.get(entry.prologue_fn)
        if functions is None:
            data_token = compile_data_ctx.set(compile_data_and_stats)
            try:
                functions = hit_functions[entry.prologue_fn] = _hit_functions(entry)
            finally:
                compile_data_ctx.reset(data_token)
        accept, prologue = functions[0], functions[1]
        stats.last_prologue_execution_start = perf_counter_ns()
        try:
            if accept is not None:
                return functions, accept(args, kwargs)
            # thunder's prologue reads the cache information and, for a module, the compile data
            token = cache_info_ctx.set(_cache_info(grad_enabled, check_aliases, args, kwargs))
            data_token = compile_data_ctx.set(compile_data_and_stats)
            try:
                return functions, prologue(*args, **kwargs)
            finally:
                compile_data_ctx.reset(data_token)
                cache_info_ctx.reset(token)
        except Exception:  # noqa: BLE001  (as thunder: a failing check means "not this entry")
            return functions, None
        finally:
            stats.last_prologue_execution_stop = perf_counter_ns()

    @functools.wraps(thunder_call)
    def call(*args, **kwargs):
        if distributed or _tracing() or torch.is_autocast_enabled() or torch.is_autocast_enabled("cpu"):
            return thunder_call(*args, **kwargs)
        grad_enabled = torch.is_grad_enabled()
        entries = stats.interpreter_cache
        key = hinted = None
        if len(entries) > 1:
            key = DispatchHints.key(args, kwargs)
            hinted = hints.get(key)
            positions = _positions_to_try(len(entries), hinted)
        else:
            positions = range(len(entries))
        for position in positions:
            entry = entries[position]
            if entry.backward_fn is not None:
                return thunder_call(*args, **kwargs)  # autograd: thunder's path connects it
            functions, accepted = prologue_result(entry, grad_enabled, args, kwargs)
            if accepted is not None:
                break
        else:
            rejections = getattr(stats.interpreter_cache, "rejections", None)
            if rejections is not None:
                rejections.clear()  # thunder's path tries the entries again and records why they fail
            with gc_pause.paused():  # a miss: thunder compiles
                return thunder_call(*args, **kwargs)
        if key is not None and position != hinted:
            hints.remember(key, position)

        inputs, to_epilogue = accepted
        stats.calls += 1
        stats.cache_hits += 1
        stats.last_traces = entry.computation_traces
        stats.last_prologue_traces = entry.prologue_traces
        stats.last_prologue = entry.prologue_fn
        stats.last_computation = entry.computation_fn
        stats.last_interpreted_instructions = None
        stats.last_interpreter_log = None
        compile_data.is_grad_enabled = grad_enabled
        computation, epilogue = functions[2], functions[3]
        if computation is None:
            outputs = entry.computation_fn(*inputs)
            return entry.epilogue_fn(*to_epilogue, *outputs)
        if not grad_enabled:  # both decorated with no_grad and no_autocast; autocast is off
            return epilogue(*to_epilogue, *computation(*inputs))
        set_grad_enabled(False)
        try:
            return epilogue(*to_epilogue, *computation(*inputs))
        finally:
            set_grad_enabled(True)

    return call
