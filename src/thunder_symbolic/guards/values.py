"""Guards on the Python values a trace read that are not proxies: None, dtypes, callables, enums, containers.

thunder's prologue re-checks tensors and numbers, but a value that stays a Python object while tracing
(``mask is None``, ``x.to(dtype)``, ``act(x)``, ``len(sizes)``, ``"bias" in cfg``) was baked into the
trace unchecked, in both cache options: the program traced for ``mask=None`` was reused for a mask.
Each such value read from the call's arguments, the function's globals and closures, a module's
attributes, or a Python module that is not a library's API (a config module, ``os.environ``) is checked
here the cheapest way that proves the trace still holds, as torch.compile's guards do:

* identity (``is``) for None, dtypes, layouts, memory formats, enum members, classes; for a function, identity or
  the same code, closure contents and defaults (a descriptor makes a new one at every read), for a partial the
  same function and arguments;
* type for instances of classes defined in Python (``isinstance(cache, StaticCache)``);
* type and keys for an object's ``__dict__`` that the code reads as a dict (``vars(cfg).get("bias")``,
  ``"bias" in cfg.__dict__``), whose missing names matter as much as its values;
* whether an object has an attribute, where the trace asked (``hasattr(cfg, "bias")``, ``getattr(self, "scale",
  1.0)`` or ``try: o.k except AttributeError:`` finding none): setting it later must not reuse the program;
* type and length for tuples and lists, type and keys (in order) for dicts; their items are checked where
  the trace reads them;
* type and a snapshot of the contents for values Python reads natively (sets, ranges, bytes, deques, dict
  views and subclasses, numpy arrays and scalars, fractions, decimals, ``os.environ``); an iterator cannot be
  checked: the trace is refused with :class:`UncheckableValueError`;
* a module's submodules by name where torch's code reads them as a dict (``for layer in self.layers``,
  ``len(self.layers)``, ``children()``), the names ``named_parameters()`` and ``named_buffers()`` list, and
  a parameter, buffer or submodule read as None;
* process state read through a call (``torch.get_num_threads()``, ``ContextVar.get()``: :func:`reads_state`),
  made again by the prologue and compared.

torch's own bookkeeping on modules (hooks, the non-persistent buffer set) is not checked; parameters,
buffers and submodules are thunder's, but for the reads above.

While tracing, :class:`ValueGuards` also keeps a shallow snapshot of every container it checked (with the path
it was read through): a traced function that changes one in place (``cache.append(...)``, ``memo[k] = t``) has a
side effect that :mod:`thunder_symbolic.semantics.side_effects` replays on every call; when the trace ends the
container is as it was (:meth:`ValueGuards.restore_containers`).
"""

from __future__ import annotations

import array
import collections
import contextlib
import contextvars
import decimal
import dis
import enum
import fractions
import functools
import inspect
import os
import re
import sys
import types
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from typing import Any

import torch
from thunder.core.interpreter import ProvenanceRecord, PseudoInst
from thunder.core.jit_ext import EXT_FLAG_IS_CALLABLE, EXT_FLAG_IS_MODULE, EXT_FLAG_IS_TENSOR_PROXY
from thunder.core.prims import OpTags
from thunder.core.proxies import AnyProxy, Proxy
from thunder.core.symbol import default_python_printer
from thunder.executors.pythonex import ex as pythonex

from thunder_symbolic.guards.prologue import GuardFailed

__all__ = [
    "SideEffectError",
    "checked",
    "UncheckableValueError",
    "ValueGuards",
    "check_member_names",
    "check_namespace_read",
    "check_python_values",
    "describe",
    "guard_for",
    "reads_state",
    "recording_values",
]


class UncheckableValueError(TypeError):
    """The traced function read a value natively that no prologue check can prove unchanged (an iterator)."""


class SideEffectError(NotImplementedError):
    """The traced function changed Python state (a global list, a module attribute) that the cached program
    would not change again on later calls."""


# Step names a guarded value may be reached through: attributes, items, and these dunder attributes.
_ALLOWED_DUNDERS = frozenset(
    {
        *("__globals__", "__closure__", "__defaults__", "__kwdefaults__", "__self__", "__func__", "__dict__"),
        *("__class__", "__wrapped__"),
    }
)
_NAMESPACES = (
    *(".__globals__", ".__closure__", ".__defaults__", ".__kwdefaults__", ".__dict__", "['__builtins__']"),
    "._modules",
)
# Python modules whose attributes are a library's API (functions, classes, dtypes), which programs do not
# reassign: reads through them (``torch.relu``, ``F.silu``, ``math.pi``: dozens in a model's code) are not
# checked. Any other module's attributes are state a program may change between calls (a config module,
# ``os.environ``) and are checked like globals.
_LIBRARY_PACKAGES = frozenset(
    {
        *("torch", "thunder", "thunder_symbolic", "numpy", "builtins", "math", "cmath", "operator", "functools"),
        *("itertools", "collections", "typing", "types", "enum", "numbers", "dataclasses", "inspect", "abc"),
        *("contextlib", "warnings"),
    }
)
# torch's bookkeeping on a module, which is not checked; its submodules (``_modules``) are a step to their
# attributes (``self.mlp.act is None`` reads ``self._modules['mlp'].act``).
_MODULE_INTERNALS = frozenset(vars(torch.nn.Module())) - {"training", "_modules"}
_IDENTITY_TYPES = (
    type(None),
    torch.dtype,
    torch.layout,
    torch.memory_format,
    enum.Enum,
    types.FunctionType,
    type,
    functools.partial,
)


def _inst_name(record: ProvenanceRecord) -> str:
    inst = record.inst
    return inst.opname if isinstance(inst, dis.Instruction) else inst.name


def describe(record: ProvenanceRecord, skip: Container[int] = frozenset()) -> str | None:
    """The Python path of a value read from the inputs (``args[1]``, ``fn.__globals__['G']``, ``module.scale``),
    or None when it was not read that way (computed, or reached through an entry of ``skip``)."""
    if id(record) in skip:
        return None
    name = _inst_name(record)
    if name == "INPUT_ARGS":
        return "args"
    if name == "INPUT_KWARGS":
        return "kwargs"
    if name == "INPUT_FN":
        return "fn"
    if name not in ("LOAD_ATTR", "BINARY_SUBSCR") or len(record.inputs) != 2:
        return None
    obj, key = record.inputs
    if _inst_name(key) != "CONSTANT" or not isinstance(key.value, (int, str)) or isinstance(key.value, bool):
        return None
    base = describe(obj, skip)
    if base is None or obj.ext_flag & EXT_FLAG_IS_MODULE and key.value in _MODULE_INTERNALS:
        return None
    if obj.ext_flag & EXT_FLAG_IS_TENSOR_PROXY:  # a tensor's metadata: thunder checks tensors
        return None
    if name == "BINARY_SUBSCR":
        return f"{base}[{key.value!r}]"
    if key.value.startswith("__") and key.value not in _ALLOWED_DUNDERS:
        return None
    return f"{base}.{key.value}"


def _stable_builtin(value: Any) -> bool:
    """A builtin function of no object or of a module (``torch.tanh``): the same object on every read."""
    owner = getattr(value, "__self__", None)
    return owner is None or isinstance(owner, types.ModuleType)


def _class_builtin(value: Any) -> bool:
    """A builtin bound to a class (a C classmethod such as ``MyFunction.apply`` on torch >= 2.13): each read
    makes a new object, equal to the others (same class, same C function)."""
    return isinstance(value, types.BuiltinFunctionType) and isinstance(getattr(value, "__self__", None), type)


def guard_for(value: Any) -> tuple[str, Any] | None:
    """(kind, expected) of the check that proves a read value unchanged, or None when it needs none here
    (tensors, numbers and strings are proxies checked by thunder; modules are handled by thunder)."""
    if isinstance(value, (bool, int, float, complex, str, torch.Tensor, torch.device, torch.nn.Module)):
        return None
    if isinstance(value, functools.partial):
        return "partial", value
    if type(value) is types.FunctionType:
        return "function", value
    if isinstance(value, _IDENTITY_TYPES) or isinstance(value, types.BuiltinFunctionType) and _stable_builtin(value):
        return "is", value
    if _class_builtin(value):
        return "==", value
    if type(value) in (tuple, list):
        return "len", (type(value), len(value))
    if type(value) is dict:
        return "keys", (dict, tuple(value))
    snapshot = Snapshot.of(value)
    if snapshot is not None:
        return "snapshot", snapshot
    if isinstance(value, tuple) and not isinstance(value, torch.Size):  # a named tuple holding tensors or objects
        return "len", (type(value), len(value))
    if type(value).__flags__ & _HEAP_TYPE and not isinstance(value, (Proxy, torch.Size)):
        # An instance of a class defined in Python (a config, a cache): code dispatches on its type
        # (`isinstance(cache, StaticCache)`), which its attributes, checked where they are read, do not show.
        return "type", type(value)
    return None


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (not a builtin type)


_PLAIN = (type(None), bool, int, float, complex, str, bytes, range, fractions.Fraction, decimal.Decimal)


def _plain(item: Any) -> bool:
    """Whether ``==`` compares ``item`` by value (not a tensor, whose ``==`` is elementwise, nor any object)."""
    if type(item) in _PLAIN:
        return True
    if type(item) is tuple:
        return all(map(_plain, item))
    return _numpy_scalar(item)


def _numpy_scalar(x: Any) -> bool:
    numpy = sys.modules.get("numpy")  # (only a program that has numpy can pass its values)
    return numpy is not None and isinstance(x, numpy.generic)


def _same(item: Any, recorded: Any) -> bool:
    """Plain values equal, tuples item by item (a dict's (key, value) pairs), sets as sets (items by hash and
    ``==``, an object's hash being its identity), others the same objects (a tensor is checked by identity)."""
    if type(recorded) is frozenset:
        return type(item) is frozenset and item == recorded
    if _plain(recorded):
        return _plain(item) and type(item) is type(recorded) and bool(item == recorded)
    if type(recorded) is tuple:
        return type(item) is tuple and len(item) == len(recorded) and all(map(_same, item, recorded))
    return item is recorded


def _same_partial(partial: Any, recorded: functools.partial) -> bool:
    """Whether ``partial`` calls what ``recorded`` calls: a ``partialmethod`` makes a new partial of a new bound
    method at every read, so identity would never hold."""
    return (
        type(partial) is type(recorded)
        and _same_part(partial.func, recorded.func)
        and len(partial.args) == len(recorded.args)
        and all(map(_same_part, partial.args, recorded.args))
        and partial.keywords.keys() == recorded.keywords.keys()
        and all(_same_part(partial.keywords[k], v) for k, v in recorded.keywords.items())
    )


def _same_function(fn: Any, recorded: types.FunctionType) -> bool:
    """Whether ``fn`` is ``recorded`` made again: the same code, globals, closure contents and defaults (a descriptor,
    ``partialmethod`` read from its class, makes a new function at every read)."""
    if (
        type(fn) is not types.FunctionType
        or fn.__code__ is not recorded.__code__
        or fn.__globals__ is not recorded.__globals__
    ):
        return False
    cells, recorded_cells = fn.__closure__ or (), recorded.__closure__ or ()
    defaults, recorded_defaults = fn.__defaults__ or (), recorded.__defaults__ or ()
    return (
        len(cells) == len(recorded_cells)
        and all(_same_part(a.cell_contents, b.cell_contents) for a, b in zip(cells, recorded_cells))
        and len(defaults) == len(recorded_defaults)
        and all(map(_same_part, defaults, recorded_defaults))
        and _same_part(fn.__kwdefaults__, recorded.__kwdefaults__)
    )


def _same_part(item: Any, recorded: Any) -> bool:
    if item is recorded:
        return True
    if isinstance(recorded, types.MethodType):
        return (
            type(item) is types.MethodType and item.__func__ is recorded.__func__ and item.__self__ is recorded.__self__
        )
    if isinstance(recorded, functools.partial):
        return _same_partial(item, recorded)
    if type(recorded) is types.FunctionType:
        return _same_function(item, recorded)
    if type(recorded) is dict:
        return (
            type(item) is dict
            and item.keys() == recorded.keys()
            and all(_same_part(item[k], v) for k, v in recorded.items())
        )
    return _same(item, recorded)


_NOT_NATIVE = object()
_NATIVE_CONTAINERS = (collections.deque, array.array, type({}.keys()), type({}.values()), type({}.items()))
_ENVIRON = type(os.environ)


def _frozen(value: Any) -> Any:
    """What Python reads of ``value`` natively, in a form compared by :func:`_same`; _NOT_NATIVE for a value
    whose reads are traced (and checked where they are made)."""
    kind = type(value)
    if kind in (set, frozenset):
        return frozenset(value)
    if kind in (range, bytes, fractions.Fraction, decimal.Decimal) or _numpy_scalar(value):
        return value  # immutable
    if kind is bytearray:
        return bytes(value)
    if kind is memoryview:
        return (value.format, value.shape, value.tobytes())
    if isinstance(value, dict) and kind is not dict:
        return tuple(value.items())
    if isinstance(value, tuple) and kind is not tuple and not isinstance(value, torch.Size):
        # A named tuple of plain values, which `sum`, `len` and unpacking read natively; one holding tensors or
        # objects is checked by type and length, its items where they are read (see guard_for).
        return tuple(value) if all(map(_plain, value)) else _NOT_NATIVE
    if isinstance(value, _NATIVE_CONTAINERS):
        return tuple(value)
    if kind is _ENVIRON:
        # `os.environ[name]` reads through a key the code computes (encoded bytes), which no path can name: the
        # whole environment is compared, as a set of its raw (name, value) pairs.
        return frozenset(value._data.items())
    return _NOT_NATIVE


class Snapshot:
    """What a value Python reads natively was when traced: its contents, read by C code (``sum(a_set)``,
    ``len(a_deque)``, ``sum(a_dict.values())``, ``float(a_fraction)``, ``int(a_numpy_int)``), never reach the
    trace one by one to be checked. Plain items are compared by value, others by identity. An iterator cannot
    be checked (that would consume it): its snapshot is :attr:`uncheckable`, and the trace is refused."""

    __slots__ = ("contents", "kind")

    def __init__(self, kind: type, contents: Any):
        self.kind, self.contents = kind, contents

    @classmethod
    def of(cls, value: Any) -> Snapshot | None:
        """The snapshot of a natively read value, or None for any other."""
        if isinstance(value, collections.abc.Iterator):
            return cls(type(value), _NEVER)
        numpy = sys.modules.get("numpy")
        if numpy is not None and type(value) is numpy.ndarray:
            return cls(numpy.ndarray, value.copy())
        frozen = _frozen(value)
        return None if frozen is _NOT_NATIVE else cls(type(value), frozen)

    @property
    def uncheckable(self) -> bool:
        return self.contents is _NEVER

    def matches(self, value: Any) -> bool:
        if type(value) is not self.kind:
            return False
        numpy = sys.modules.get("numpy")
        if numpy is not None and self.kind is numpy.ndarray:
            return value.shape == self.contents.shape and bool(numpy.array_equal(value, self.contents))
        return _same(_frozen(value), self.contents)

    def __repr__(self) -> str:
        if self.uncheckable:
            return f"a {self.kind.__name__}: an iterator, which a check would consume"
        if self.kind is _ENVIRON:
            return "the same environment variables"
        return f"a {self.kind.__name__} equal to {self.contents!r}"


_NEVER = object()


# How each kind of check reads, for value ``o`` and expected object ``e`` (see guard_for).
_FAILS = {
    "is": "{o} is not {e}",
    "==": "{o} != {e}",
    "len": "type({o}) is not {e}[0] or len({o}) != {e}[1]",
    "keys": "type({o}) is not {e}[0] or tuple({o}) != {e}[1]",
    "snapshot": "not {e}.matches({o})",
    "partial": "not _same_partial({o}, {e})",
    "function": "{o} is not {e} and not _same_function({o}, {e})",
    "contiguous": "{o}.is_contiguous(memory_format={e}[0]) is not {e}[1]",
    "hasattr": "hasattr({o}, {e}[0]) is not {e}[1]",
    "type": "type({o}) is not {e}",
    "no grad": "{o}.grad is not None",
    "not cached": "{e} in {o}",
    "inference": "{o}.is_inference() is not {e}",
    "strides": "{o}.stride() != {e}",
    "layout": "{o}.layout is not {e}",
    "names": "tuple(n for n, _ in getattr({o}, {e}[0])(*{e}[1], **{e}[2])) != {e}[3]",
}


def compile_checks(entries: tuple[tuple[str, Any, str, str], ...]):
    """One function of the checked values that raises :class:`GuardFailed` for the first check that fails
    (each check is one comparison; calling an operator per value cost a microsecond each)."""

    def fail(index: int):
        raise GuardFailed(*entries[index][2:])

    namespace: dict[str, Any] = {"fail": fail, "_same_partial": _same_partial, "_same_function": _same_function}
    lines = [f"def check_values({', '.join(f'o{i}' for i in range(len(entries)))}):"]
    for i, (kind, expected, _, _) in enumerate(entries):
        namespace[f"e{i}"] = expected
        lines.append(f"    if {_FAILS[kind].format(o=f'o{i}', e=f'e{i}')}:\n        fail({i})")
    lines.append("    return None")
    exec(compile("\n".join(lines), "<thunder_symbolic value checks>", "exec"), namespace)  # noqa: S102
    return namespace["check_values"]


def _compile_state_checks(entries: tuple[tuple[tuple, str, str], ...]):
    def check_state() -> None:
        for (fn, args, result), condition, where in entries:
            if not _same(fn(*args), result):
                raise GuardFailed(condition, where)

    return check_state


class Checks:
    """The checks one prologue makes, as entries ``(..., condition, where)`` (``condition`` as the user would write
    it): compiled into one function by ``compile`` at their first use, and owned by the prologue's trace (an
    object of its context; the trace prints the conditions), so that they go when the cache entry goes and two
    traces of one program print alike."""

    __slots__ = ("_compile", "_fn", "entries")

    def __init__(self, entries: tuple, compile: Callable[[tuple], Callable]):
        self.entries, self._compile, self._fn = entries, compile, None

    def __call__(self, *values: Any) -> None:
        fn = self._fn
        if fn is None:
            fn = self._fn = self._compile(self.entries)
        fn(*values)

    def __len__(self) -> int:
        return len(self.entries)

    def conditions(self) -> list[tuple[str, str]]:
        return [entry[-2:] for entry in self.entries]


def _run(checks: Checks, *values: Any) -> None:
    checks(*values)


def _print_checks(bsym, out_printables, arg_printables, kwarg_printables) -> list[str]:
    """The call, after each condition it checks as a comment."""
    lines = [" ".join(f"# {condition}  ({where})".split()) for condition, where in bsym.args[0].conditions()]
    return [*lines, default_python_printer(bsym, out_printables, arg_printables, kwarg_printables)]


def _name_of(value: Any) -> str:
    """How a user would spell a checked object: ``None``, ``torch.float64``, ``torch.relu``, ``Color.RED``."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, type)):
        module = getattr(value, "__module__", None) or getattr(getattr(value, "__self__", None), "__name__", "")
        name = value.__qualname__ if isinstance(value, (types.FunctionType, type)) else value.__name__
        return f"{module}.{name}" if module and module != "builtins" else name
    return str(value)


# How each kind of check reads to a user, for path ``p`` and expected object ``e``.
_SHOWN = {
    "is": lambda p, e: f"{p} is {_name_of(e)}",
    "==": lambda p, e: f"{p} == {_name_of(e)}",
    "partial": lambda p, e: f"{p} calls {e!r}",
    "function": lambda p, e: f"{p} is {_name_of(e)}",
    "type": lambda p, e: f"type({p}) is {_name_of(e)}",
    "no grad": lambda p, e: f"{p}.grad is None",
    "not cached": lambda p, e: f"{e!r} not in {p}",
    "inference": lambda p, e: f"{p}.is_inference() is {e}",
    "strides": lambda p, e: f"{p}.stride() == {e}",
    "layout": lambda p, e: f"{p}.layout is {e}",
    "contiguous": lambda p, e: f"{p}.is_contiguous(memory_format={e[0]}) is {e[1]}",
    "len": lambda p, e: f"type({p}) is {e[0].__name__} and len({p}) == {e[1]}",
    "snapshot": lambda p, e: f"{p} is still {e!r}",
    "hasattr": lambda p, e: f"{'' if e[1] else 'not '}hasattr({p}, {e[0]!r})",
    "keys": lambda p, e: f"type({p}) is {e[0].__name__} and list({p}) == {list(e[1])!r}",
    "names": lambda p, e: f"[name for name, _ in {p}.{e[0]}({_arguments(*e[1:3])})] == {list(e[3])!r}",
}


def _arguments(args: tuple, kwargs: dict) -> str:
    return ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())])


def render(kind: str, expected: Any, path: str) -> str:
    """The check as Python a user would write, for the prologue trace and ``recompile_reasons``."""
    return _SHOWN[kind](path, expected)


# check_python_values(checks, *values): the prologue trace shows each condition as the user would write it
# (``mask is None``, ``type(sizes) is tuple and len(sizes) == 2``).
check_python_values = pythonex.register_operator(
    "check_python_values",
    meta=lambda checks, *values: None,
    fn=_run,
    tags=(OpTags.DONT_DCE,),
    python_printer=_print_checks,
)
pythonex.register_implementation(check_python_values, check_python_values, checker=lambda *args: True)

# check_state_reads(checks): each call of process state the trace made (see reads_state), made again; the trace
# shows it as ``torch.get_num_threads() == 2``.
check_state_reads = pythonex.register_operator(
    "check_state_reads", meta=lambda checks: None, fn=_run, tags=(OpTags.DONT_DCE,), python_printer=_print_checks
)
pythonex.register_implementation(check_state_reads, check_state_reads, checker=lambda *args: True)

# torch's getters of process state that a program may branch on or compute with (thunder's cache information
# covers grad mode, autocast and the default dtype and device): called once, while tracing, they were baked in.
_TORCH_STATE_GETTERS = frozenset(
    id(getter)
    for name in (
        *("are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled"),
        *("get_deterministic_debug_mode", "get_num_threads", "get_num_interop_threads", "is_inference_mode_enabled"),
        *("get_float32_matmul_precision", "is_anomaly_enabled", "is_anomaly_check_nan_enabled"),
    )
    if (getter := getattr(torch, name, None)) is not None
)


def reads_state(fn: Any) -> bool:
    """Whether calling ``fn`` reads process state that later calls may find changed: one of torch's getters
    (``torch.are_deterministic_algorithms_enabled()``, ``torch.get_num_threads()``) or a ``ContextVar``'s
    ``get`` (bound, or unbound with the variable first, as the interpreter calls it)."""
    if fn is contextvars.ContextVar.get:
        return True
    if isinstance(fn, types.BuiltinMethodType) and type(getattr(fn, "__self__", None)) is contextvars.ContextVar:
        return fn.__name__ == "get"
    return id(fn) in _TORCH_STATE_GETTERS


def _call_text(fn: Any, args: tuple) -> str:
    """The call as the user wrote it: ``torch.get_num_threads()``, ``ContextVar('scale').get()``."""
    if fn is contextvars.ContextVar.get:
        (variable, *args) = args
        return f"ContextVar({variable.name!r}).get({_arguments(args, {})})"
    if isinstance(fn, types.BuiltinMethodType) and isinstance(fn.__self__, contextvars.ContextVar):
        return f"ContextVar({fn.__self__.name!r}).get({_arguments(args, {})})"
    return f"torch.{fn.__name__}({_arguments(args, {})})"


def _snapshot(value: Any) -> tuple:
    if type(value) is dict:
        return tuple((k, id(v)) for k, v in value.items())
    if type(value) in (set, frozenset):
        return tuple(sorted(map(id, value)))
    return tuple(map(id, value))


@dataclass
class Watched:
    """A container the trace read from the inputs (through ``record``), and what it held then."""

    path: str
    container: Any
    copy: Any
    snapshot: tuple
    record: ProvenanceRecord
    stand_in: Any = None  # the wrapper of the container of proxies traced code sees instead (see watch_copy)
    stand_in_copy: Any = None  # the stand-in's items then (kept alive: their ids are in its snapshot)
    stand_in_snapshot: tuple = ()

    def changed(self) -> bool:
        if _snapshot(self.container) != self.snapshot:
            return True
        return self.stand_in is not None and _snapshot(self.stand_in.value) != self.stand_in_snapshot

    def contents(self) -> tuple[Any, Any, Any]:
        """(its contents as the trace left them, as they were, the wrappers of the final items or None): the
        stand-in's, which traced code changes, unless native code alone changed the container itself. (Where both
        changed, the container's own change came from outside the program: a weak registry's callback removing
        the entry of an object freed while tracing, which a replay must not repeat on later calls.)"""
        stand_in_changed = self.stand_in is not None and _snapshot(self.stand_in.value) != self.stand_in_snapshot
        if self.stand_in is not None and (stand_in_changed or _snapshot(self.container) == self.snapshot):
            wrappers = self.stand_in.item_wrappers if self.stand_in.has_item_tracking else None
            return self.stand_in.value, self.stand_in_copy, wrappers
        return self.container, self.copy, None


@dataclass
class ValueGuards:
    """The Python values one trace read, each checked once (by path), and the containers to watch for changes."""

    fn: Any = None  # the function (or module) being traced, to name its arguments and globals
    checks: list[tuple[Any, tuple[str, Any, str, str]]] = field(default_factory=list)  # (proxy, check)
    seen: set[str] = field(default_factory=set)
    # The provenance records of Python modules read, by id. The records are kept: a freed one's id is soon a new
    # record's, and a value read through that one (a global function, fn.__globals__['g']) went unchecked.
    python_modules: dict[int, ProvenanceRecord] = field(default_factory=dict)
    watched: list[Watched] = field(default_factory=list)
    uncheckable: list[str] = field(default_factory=list)  # what was read that no check can prove unchanged
    state: dict[tuple, tuple[int, str, str]] = field(default_factory=dict)  # calls reading process state, checked

    def constraints(self) -> list[tuple]:
        """The prologue constraints checking every value and every process state recorded, one call each."""
        found = []
        if self.checks:
            checks = Checks(tuple(check for _, check in self.checks), compile_checks)
            found.append((check_python_values, checks, *(p for p, _ in self.checks)))
        if self.state:
            found.append((check_state_reads, Checks(tuple(self.state.values()), _compile_state_checks)))
        return found

    def state_read(self, fn: Any, args: tuple, result: Any, where: Callable[[], str]) -> UncheckableValueError | None:
        """Have the prologue make the call ``fn(*args)`` (see :func:`reads_state`) again and compare its result with
        ``result``; the error to raise instead when no comparison can prove the result unchanged (an object whose
        attributes the program may read: no check reaches them)."""
        if not (_plain(result) or isinstance(result, _IDENTITY_TYPES)):
            return UncheckableValueError(
                f"{_call_text(fn, args)} at {where()} returns a {type(result).__name__}, which thunder.jit cannot "
                "check on later calls (what the program reads of it is not reachable from the inputs), so it refuses "
                "to compile it. Pass the value as an argument instead."
            )
        key = (fn, *map(id, args))
        if key not in self.state:
            value = _name_of(result) if isinstance(result, _IDENTITY_TYPES) else repr(result)
            self.state[key] = ((fn, args, result), f"{_call_text(fn, args)} == {value}", where())
        return None

    def guard(self, value: Any, record: ProvenanceRecord, where: Callable[[], str]) -> tuple[str, Any, str, str] | None:
        """The (kind, expected object, condition, where) to check for ``value`` read through
        ``record``, once per path (the caller records it with :meth:`check`). ``where`` is asked only for a
        check: finding the source line for every value the interpreter wraps took about a second of a
        model's compile."""
        if isinstance(value, types.ModuleType):
            if _library_module(value):
                self.python_modules[id(record)] = record  # its attributes are its API (torch.relu): not checked
            return None  # (a module is the same object wherever it is imported; what is read from it is checked)
        found = guard_for(value)
        if found is None:
            return None
        path = describe(record, self.python_modules)
        # The roots (args, kwargs, fn) are thunder's to check (it checks their lengths); namespaces (a function's
        # globals, its closure cells, builtins) are steps to the values read from them, not values themselves.
        if path is None or not record.inputs or path in self.seen or path.endswith(_NAMESPACES):
            return None
        if path.endswith(".__class__") and path[: -len(".__class__")] in self.seen:
            return None  # (the object's own check proves its type: `type(o)`, read after `o`, needs none)
        self.seen.add(path)
        shown = user_path(path, self.fn)
        if isinstance(found[1], Snapshot) and found[1].uncheckable:
            self.uncheckable.append(f"{shown} ({found[1]!r})")
            return None
        if type(value) in (list, dict, set):
            self._watch(shown, value, record)
        kind, expected = found
        # Arguments are read as the call starts, inside thunder: name them; other values where they are read.
        at = where()
        if at.startswith("interpreter.py"):
            at = f"argument {shown.partition('[')[0].partition('.')[0]}"
        return kind, expected, render(kind, expected, shown), at

    def namespace_keys(self, namespace: dict, record: ProvenanceRecord, where: Callable[[], str]) -> tuple | None:
        """The check of the names in an object's ``__dict__`` that the code read as a dict (``vars(cfg)``), once per
        path: asking it for a name it lacks (``.get``, ``in``, a caught KeyError) answers from its keys. Of a
        module, its ``_modules`` is checked so (a ModuleList, Sequential or ModuleDict iterates it, counts it,
        indexes it from the end; ``children()`` walks it): its ``__dict__`` is not (torch's own ``__getattr__``
        reads it, by name) and a change the traced code makes to its submodules is thunder's to replay."""
        if len(record.inputs) != 2:
            return None
        if record.inputs[0].ext_flag & EXT_FLAG_IS_MODULE:  # (an OrderedDict once a ModuleList was cut)
            path = describe(record, self.python_modules) if record.inputs[1].value == "_modules" else None
            return self._once(path, f"keys of {path}", "keys", (type(namespace), tuple(namespace)), where)
        if type(namespace) is not dict:
            return None
        path = describe(record, self.python_modules)
        found = self._once(path, f"keys of {path}", "keys", (dict, tuple(namespace)), where)
        if found is not None:
            self._watch(user_path(path, self.fn), namespace, record)
        return found

    def _watch(self, path: str, container: Any, record: ProvenanceRecord) -> None:
        if all(watched.container is not container for watched in self.watched):
            self.watched.append(Watched(path, container, container.copy(), _snapshot(container), record))

    def member_names(
        self, module: Any, record: ProvenanceRecord, method: str, args: tuple, kwargs: dict, where: Callable[[], str]
    ) -> tuple | None:
        """The check of the names ``module.<method>(*args, **kwargs)`` lists (``module`` read through ``record``),
        once per path and call."""
        names = tuple(name for name, _ in getattr(module, method)(*args, **kwargs))
        path = describe(record, self.python_modules)
        return self._once(path, f"{path}.{method}{args}{kwargs}", "names", (method, args, kwargs, names), where)

    def not_cached(self, record: ProvenanceRecord, name: str, where: Callable[[], str]) -> tuple | None:
        """The check that an object's ``__dict__`` (read through ``record``) still lacks ``name``: a cached property
        the program computed, which eager code may cache later (a value it then reads instead)."""
        path = describe(record, self.python_modules)
        return self._once(path, f"{name} not in {path}", "not cached", name, where)

    def path_of(self, record: ProvenanceRecord) -> str:
        """How the user spells the value read through ``record`` (``cfg``, ``self.mlp``, ``args[2]``)."""
        path = describe(record, self.python_modules)
        return "object" if path is None else user_path(path, self.fn)

    def reaches(self, record: ProvenanceRecord) -> bool:
        """Whether the prologue can read the value read through ``record`` (a path from the inputs that is not
        a library module's attribute)."""
        return describe(record, self.python_modules) is not None

    def existed(self, record: ProvenanceRecord) -> bool:
        """Whether the value read through ``record`` existed before the call: read by attribute and item steps from
        the inputs, a constant or a module (reachable by the prologue or a library's state), rather than made by the
        program (a call's result, an object it built)."""
        while record.inputs:
            if _inst_name(record) not in ("LOAD_ATTR", "BINARY_SUBSCR"):
                return False
            record = record.inputs[0]
        return _inst_name(record) in ("INPUT_ARGS", "INPUT_KWARGS", "INPUT_FN", "CONSTANT")

    def presence(
        self, obj: Any, record: ProvenanceRecord, name: str, answer: bool, where: Callable[[], str]
    ) -> tuple[str, Any, str, str] | None:
        """The check that ``hasattr(obj, name)`` still gives ``answer`` (``obj`` read through ``record``), once
        per path and name; None for an object the prologue does not reach or whose attributes are not the user's
        (a tensor proxy's, a Python module's)."""
        if not isinstance(name, str) or name.startswith("__") or isinstance(obj, (Proxy, types.ModuleType)):
            return None  # (Python looks a dunder up on the type: the interpreter's probes for protocols)
        path = describe(record, self.python_modules)
        if path is not None and path.endswith(_NAMESPACES):
            return None
        return self._once(path, f"{path} has {name}", "hasattr", (name, answer), where)

    def _once(self, path: str | None, key: str, kind: str, expected: Any, where: Callable[[], str]):
        """The check ``kind`` of the value at ``path`` (None: unreachable) against ``expected``, unless ``key`` was
        checked already in this trace (``where`` is asked only for a check)."""
        if path is None or key in self.seen:
            return None
        self.seen.add(key)
        return kind, expected, render(kind, expected, user_path(path, self.fn)), where()

    def watch_copy(self, container: Any, stand_in: Any) -> None:
        """Traced code sees ``stand_in`` (a wrapper of the same items as proxies) for ``container``: a change to
        either is one."""
        for watched in self.watched:
            if watched.container is container:
                watched.stand_in, watched.stand_in_copy = stand_in, stand_in.value.copy()
                watched.stand_in_snapshot = _snapshot(stand_in.value)

    def check(self, proxy: Any, check: tuple[str, Any, str, str]) -> None:
        """Check ``proxy`` (standing for the value, unpacked by the prologue) as ``check`` says."""
        self.checks.append((proxy, check))

    def contiguity(self, record: ProvenanceRecord, memory_format: Any, answer: bool, where: str) -> tuple:
        """The check that an input tensor's ``is_contiguous(memory_format)`` still gives ``answer``."""
        expected = (memory_format, answer)
        path = describe(record)
        shown = "tensor" if path is None else user_path(path, self.fn)
        return "contiguous", expected, render("contiguous", expected, shown), where

    def input_tensor(
        self, record: ProvenanceRecord, kind: str, expected: Any, where: Callable[[], str]
    ) -> tuple | None:
        """The check ``kind`` (``"type"``, ``"no grad"``, ``"inference"``, ``"strides"``, ``"layout"``) that an input
        tensor read through ``record`` still answers ``expected``, once per tensor and kind: thunder's own check of a
        tensor covers its shape, device, dtype and requires_grad only (a gradient it lacked was None to the trace,
        its strides are not modelled, a sparse tensor passes as a dense one)."""
        path = describe(record)
        return self._once(path, f"{kind} of {path}", kind, expected, where)

    def check_checkable(self, fn_name: str) -> None:
        """Raise :class:`UncheckableValueError` if the trace read a value no prologue check can prove unchanged."""
        if self.uncheckable:
            raise UncheckableValueError(
                f"{fn_name} reads {', '.join(self.uncheckable)} natively (outside the trace): thunder.jit cannot "
                "prove a compiled program valid for the next call's value, so it refuses to compile it. Pass a "
                "tuple, a list or a dict of numbers, strings or tensors instead."
            )

    def restore_containers(self) -> None:
        """Put back every watched container that tracing changed (traced code changes the stand-ins, but what runs
        natively changes the container itself; its replay is the epilogue's)."""
        for watched in self.watched:
            container = watched.container
            if _snapshot(container) == watched.snapshot:
                continue
            if type(container) is list:
                container[:] = watched.copy
            else:
                container.clear()
                container.update(watched.copy)


_current: contextvars.ContextVar[ValueGuards | None] = contextvars.ContextVar("thunder_symbolic_values", default=None)


def current() -> ValueGuards | None:
    return _current.get()


def user_path(path: str, fn: Any) -> str:
    """``path`` in the traced function's terms: its parameter names, global names, closure variable names,
    and ``self`` for a module (``args[1]`` -> ``mask``, ``fn.__globals__['G']`` -> ``G``); a class read as the
    code spells it (``o.__class__.post`` -> ``type(o).post``)."""
    named = _named_path(path, fn)
    while (at := named.find(".__class__")) >= 0:
        named = f"type({named[:at]}){named[at + len('.__class__') :]}"
    return named


def _named_path(path: str, fn: Any) -> str:
    path = re.sub(r"\._modules\['([^']*)'\]", _submodule_step, path)
    head, rest = re.match(
        r"(args\[\d+\]|kwargs\['[^']*'\]|fn\.__globals__\['[^']*'\]|"
        r"fn\.__closure__\[\d+\]\.cell_contents|fn)(.*)",
        path,
    ).groups()
    if head.startswith("args["):
        names = _positional_parameters(fn)
        index = int(head[5:-1])
        return (names[index] if index < len(names) else head) + rest
    if head.startswith(("kwargs[", "fn.__globals__[")):
        return head.partition("['")[2][:-2] + rest
    if head.startswith("fn.__closure__"):
        code = getattr(fn, "__code__", None)
        index = int(head[len("fn.__closure__[") :].partition("]")[0])
        return (code.co_freevars[index] if code is not None else head) + rest
    return ("self" if isinstance(fn, torch.nn.Module) else getattr(fn, "__name__", "fn")) + rest


def _submodule_step(match: re.Match) -> str:
    """``._modules['mlp']`` as ``.mlp`` and ``._modules['0']`` (a Sequential's) as ``[0]``."""
    name = match.group(1)
    return f"[{name}]" if name.isdigit() else f".{name}"


def _positional_parameters(fn: Any) -> list[str]:
    try:
        signature = inspect.signature(fn.forward if isinstance(fn, torch.nn.Module) else fn)
    except (TypeError, ValueError):
        return []
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in signature.parameters.values() if p.kind in kinds]


@contextlib.contextmanager
def recording_values(fn: Any = None):
    guards = ValueGuards(fn=fn)
    token = _current.set(guards)
    try:
        yield guards
    finally:
        _current.reset(token)


def _library_module(module: types.ModuleType) -> bool:
    """Whether ``module`` belongs to a library whose attributes are its API (see _LIBRARY_PACKAGES)."""
    name = getattr(module, "__name__", None)
    return isinstance(name, str) and name.partition(".")[0] in _LIBRARY_PACKAGES


def checked(value: Any, record: ProvenanceRecord) -> AnyProxy:
    """The proxy through which the prologue reads ``value`` (read through ``record``) to check it. Its names are its
    own: an ``any`` proxy made while tracing shared its name with the one the epilogue made for a value it returns,
    and the prologue checked the returned value instead (``GuardFailed`` on a first call)."""
    return AnyProxy(value, prefix="checked", history=record)


def check_namespace_read(namespace: Any, where: Callable[[], str]) -> None:
    """Have the prologue check the keys of ``namespace`` (a wrapped value: the ``__dict__`` the traced code read
    explicitly, through ``vars(obj)`` or ``obj.__dict__``). Internal attribute lookups read it too, by name: their
    answers are checked as the attributes they find, or as missing ones (``hasattr``)."""
    read = current()
    if read is None or not isinstance(namespace.value, dict):
        return
    found = read.namespace_keys(namespace.value, namespace.provenance, where)
    if found is None:
        return
    history = namespace.provenance
    if history.inputs[0].ext_flag & EXT_FLAG_IS_MODULE:
        history = _read_as_callable(history)
    read.check(checked(namespace.value, history), found)


def _read_as_callable(record: ProvenanceRecord) -> ProvenanceRecord:
    """``record`` (a read from a module) flagged as a callable's: thunder's prologue reads a module's callables from
    the module and its other attributes from its ThunderModule, which for the jitted module is a wrapper with
    members of its own (its ``_modules`` holds the module)."""
    record = ProvenanceRecord(record.inst, inputs=record.inputs, value=record.value)
    record.ext_flag |= EXT_FLAG_IS_CALLABLE
    return record


def check_member_names(module: Any, method: str, args: tuple, kwargs: dict, where: Callable[[], str]) -> None:
    """Have the prologue check the names ``module.<method>(*args, **kwargs)`` lists (``named_parameters``,
    ``named_buffers``, which thunder calls natively; ``parameters()`` calls the first): a parameter registered
    after the trace must not be left out of the next call's loop."""
    read = current()
    if read is None:
        return
    found = read.member_names(module.value, module.provenance, method, args, kwargs, where)
    if found is not None:
        history = module.provenance
        if module.provenance.inst is PseudoInst.INPUT_FN:
            history = ProvenanceRecord(PseudoInst.INPUT_FN, inputs=[])  # (read as the module, not its ThunderModule)
        read.check(checked(module.value, history), found)


_MEMBER_DICTS = ("_parameters", "_buffers", "_modules")


def none_member_read(record: ProvenanceRecord) -> ProvenanceRecord | None:
    """For a None read from a module's parameters, buffers or submodules (``module._parameters['bias']``: a Linear
    without bias, a buffer or submodule not yet set), the record of reading it as ``module.bias``; None for any
    other read. thunder's prologue reads such a member with ``get_parameter``, ``get_buffer`` or ``get_submodule``,
    which fail for None: read as an attribute, it is checked like any None (setting it later recompiles)."""
    if _inst_name(record) != "BINARY_SUBSCR" or len(record.inputs) != 2:
        return None
    members, key = record.inputs
    if _inst_name(members) != "LOAD_ATTR" or len(members.inputs) != 2 or _inst_name(key) != "CONSTANT":
        return None
    module, which = members.inputs
    if not module.ext_flag & EXT_FLAG_IS_MODULE or _inst_name(which) != "CONSTANT" or which.value not in _MEMBER_DICTS:
        return None
    return ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[module, key])


def input_root(record: ProvenanceRecord) -> bool:
    """Whether ``record`` reads from the call's inputs (arguments, the function, its globals and closures)."""
    while record.inputs:
        record = record.inputs[0]
    return record.inst in (PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS, PseudoInst.INPUT_FN)
