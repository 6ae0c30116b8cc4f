"""Side-effect replay: what traced code changes in Python state that existed before the call is done again by the
epilogue, on every call, with that call's values.

This is torch.compile's model (Dynamo's ``side_effects.py``): tracing leaves pre-existing objects as they were, and
the compiled program makes the changes after the computation. While tracing, thunder's stand-ins take the changes
(a proxified copy of a container read from the inputs, a copy of an object's ``__dict__``), so reads after writes
see the writes; what the interpreter writes natively (a class attribute, a global, a closure cell, a container
read natively) is recorded here and put back when the trace ends (:meth:`SideEffects.restore`), whether it
succeeded or failed. When it succeeds, the final state of everything changed becomes one Python function, the
:class:`Replay`, which the epilogue calls with the objects the prologue unpacked (by their paths from the inputs)
and the values the computation produced:

* objects the program created and that reach pre-existing state are built anew on every call, as
  ``cls.__new__(cls)`` with their ``__dict__`` (Dynamo's way: ``__init__``'s effects are the stores it made);
* an object's attributes (modules, the jitted module itself, plain objects, functions) are stored in its
  ``__dict__``, a class's (or an object's whose ``__setattr__`` is C code) with ``setattr``; a global in its
  module's namespace, a ``nonlocal`` in its cell;
* a list gets the appended items (``extend``) or, when earlier items moved or went, its whole new contents, the
  items it kept taken from it by their old index; a dict its changed and deleted keys; a set its added and
  removed items;
* an object the program made and returns (transformers' ``DynamicCache`` with ``use_cache=True``) is made anew
  the same way (:func:`made_anew`);
* logging calls, ``warnings.warn`` and ``print`` (:func:`deferred`) are made with that call's values: a logger
  reads the clock and its level then, a warning goes through the warnings filters then (from the line that
  called ``warn`` in the traced code), ``warning_once`` helpers keep their own once.

The replay's assumptions are checked by the prologue like any value the trace read: a changed list's length and
type (its old items are taken by index), a dict's keys. Values are the call's own: tensors and numbers from the
computation, objects from the prologue, constants as traced. What cannot be replayed faithfully raises
:class:`SideEffectError` when the trace ends: an object made by C code (no ``__dict__`` to rebuild it from) that
escapes into pre-existing state, or a change to a pre-existing object the prologue cannot reach (no path from the
inputs).
"""

from __future__ import annotations

import contextlib
import contextvars
import enum
import functools
import logging
import types
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from thunder.core import devices, dtypes
from thunder.core.interpreter import (
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    get_interpreterruntimectx,
    unwrap,
    wrap_const,
)
from thunder.core.jit_ext import EXT_FLAG_IS_MODULE
from thunder.core.prims import OpTags
from thunder.core.proxies import AnyProxy, Proxy
from thunder.core.symbol import default_python_printer
from thunder.executors.pythonex import ex as pythonex

from thunder_symbolic.guards.values import SideEffectError

__all__ = [
    "DELETED",
    "Replay",
    "SideEffectError",
    "SideEffects",
    "collect",
    "current",
    "defer_call",
    "deferred",
    "made_anew",
    "recording",
    "returnable",
]


DELETED = object()  # the value of a name a store removed (``del obj.x``, ``del G``)
MISSING = object()  # what a name held before a store that created it


def _constant(value: Any) -> bool:
    """Whether ``value`` is the same object (or an equal immutable one) wherever the program meets it: a replay may
    hold it."""
    if value is None or value is Ellipsis or value is NotImplemented:
        return True
    if type(value) in (bool, int, float, complex, str, bytes, range, slice):
        return True
    if type(value) in (tuple, frozenset):
        return all(map(_constant, value))
    return isinstance(
        value,
        (
            torch.dtype,
            torch.device,
            torch.layout,
            torch.memory_format,
            enum.Enum,
            type,
            types.ModuleType,
            types.FunctionType,
            types.BuiltinFunctionType,
            functools.partial,
        ),
    )


@dataclass
class _Store:
    """Stores into one namespace the interpreter writes natively: ``kind`` is ``"attr"`` (``setattr`` of a class, or
    of an object whose type's ``__setattr__`` is C code), ``"globals"`` (a dict) or ``"cell"`` (``cell_contents``,
    name None)."""

    kind: str
    target: WrappedValue
    record: ProvenanceRecord
    values: dict[Any, Any] = field(default_factory=dict)  # name -> the wrapped value stored, or DELETED
    before: dict[Any, Any] = field(default_factory=dict)  # name -> what it held before the first store (or MISSING)


@dataclass
class SideEffects:
    """What one trace changed of state that existed before the call, in the order the program did it."""

    stores: dict[int, _Store] = field(default_factory=dict)  # by id of the namespace object
    calls: list[tuple[Any, tuple, dict, dict]] = field(default_factory=list)  # deferred: (fn, args, kwargs, how)
    runtime: Any = None  # the interpreter's runtime context (see :meth:`known`)
    owners: dict[int, WrappedValue] = field(default_factory=dict)  # id of a __dict__ -> its object, as assigned to
    written: dict[int, set] = field(default_factory=dict)  # id of an object -> the attribute names assigned or deleted

    def assigning(self, obj: WrappedValue, name: Any) -> None:
        """Note that the program assigns ``obj.name`` (thunder stores it in a copy of ``obj.__dict__``)."""
        members = getattr(obj.value, "__dict__", None)
        if type(members) is dict:
            self.owners.setdefault(id(members), obj)
        self.written.setdefault(id(obj.value), set()).add(name)

    def wrote(self, obj: Any, name: Any) -> bool:
        """Whether the program assigned or deleted ``obj.name`` so far (what it then reads of it is its own)."""
        return name in self.written.get(id(obj), ())

    def interpreting(self) -> None:
        """Note the interpreter's runtime context (called from its lookasides, while it runs)."""
        if self.runtime is None:
            self.runtime = get_interpreterruntimectx()

    def known(self, value: Any) -> WrappedValue | None:
        """The interpreter's wrapper of ``value`` (met unwrapped, in the state of an object the program made)."""
        found = self.runtime._known_wrappers.get(id(value)) if self.runtime is not None else None
        wrapper = found[0]() if found is not None else None
        if wrapper is None or not (wrapper.value is value or wrapper.original_value is value):
            return None
        return wrapper

    def store(self, kind: str, target: WrappedValue, record: ProvenanceRecord, name: Any, value: Any) -> None:
        """Record that the interpreter is about to write ``value`` (wrapped, or DELETED) under ``name`` of the
        namespace ``target`` (read through ``record``), natively: :meth:`restore` puts the old value back."""
        found = self.stores.get(id(target.value))
        if found is None:
            found = self.stores[id(target.value)] = _Store(kind, target, record)
        if name not in found.before:
            found.before[name] = _read(kind, target.value, name)
        found.values[name] = value
        if kind == "attr":
            self.written.setdefault(id(target.value), set()).add(name)

    def defer(self, fn: Any, args: tuple, kwargs: dict, how: dict | None = None) -> None:
        """Record a call (logging, a warning, a print) to make on every call of the program, after its computation."""
        self.calls.append((fn, args, kwargs, how or {}))

    def restore(self) -> None:
        """Put back what the interpreter wrote natively into pre-existing namespaces while tracing."""
        for store in reversed(self.stores.values()):
            for name, before in store.before.items():
                _write(store.kind, store.target.value, name, DELETED if before is MISSING else before)


def _read(kind: str, namespace: Any, name: Any) -> Any:
    if kind == "cell":
        try:
            return namespace.cell_contents
        except ValueError:
            return MISSING
    if kind == "attr":
        members = getattr(namespace, "__dict__", None)
        if isinstance(namespace, type) or members is not None and name in members:
            return members.get(name, MISSING)
        return getattr(namespace, name, MISSING)  # (a slot, or a module's parameter)
    return namespace.get(name, MISSING)


def _write(kind: str, namespace: Any, name: Any, value: Any) -> None:
    if kind == "cell":
        if value is DELETED:
            with contextlib.suppress(ValueError):
                del namespace.cell_contents
        else:
            namespace.cell_contents = value
    elif kind == "attr":
        if value is DELETED:
            with contextlib.suppress(AttributeError):
                delattr(namespace, name)
        else:
            setattr(namespace, name, value)
    elif value is DELETED:
        namespace.pop(name, None)
    else:
        namespace[name] = value


_current: contextvars.ContextVar[SideEffects | None] = contextvars.ContextVar("thunder_symbolic_effects", default=None)


def current() -> SideEffects | None:
    return _current.get()


@contextlib.contextmanager
def recording():
    """Record the side effects of one trace; what was written natively is put back when it ends."""
    effects = SideEffects()
    token = _current.set(effects)
    try:
        yield effects
    finally:
        _current.reset(token)
        effects.restore()


# --- Calls made on every call of the program -------------------------------------------------------------------

_LOGGING_METHODS = ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "log")


@functools.cache
def _logging_functions(logger_attributes: int) -> frozenset[int]:
    """Ids of the logging functions a replay calls instead of tracing: ``Logger``'s methods (with what libraries
    install on it: transformers' ``warning_once``), the module's own functions, ``warnings.warn`` and ``print``.
    (``logger_attributes`` changes when a library adds one.)"""
    found = [
        getattr(owner, name, None)
        for owner in (logging.Logger, logging.LoggerAdapter, logging)
        for name in _LOGGING_METHODS
    ]
    found += [value for name, value in vars(logging.Logger).items() if name.endswith("_once") and callable(value)]
    return frozenset(id(fn) for fn in found if fn is not None)


def deferred(fn: Any) -> bool:
    """Whether a traced call of ``fn`` is made by the replay, on every call of the program, instead of being traced:
    logging (a ``LogRecord`` reads the clock), ``warnings.warn`` and ``print`` (which run natively once, while
    tracing, in thunder 0.2.6)."""
    if fn is print or fn is warnings.warn or fn is warnings.warn_explicit:
        return True
    return id(fn) in _logging_functions(len(vars(logging.Logger)))


def defer_call(fn: Any, *args: WrappedValue, **kwargs: WrappedValue) -> WrappedValue:
    """The lookaside of a :func:`deferred` function: recorded for the replay; the traced program sees None (what
    each returns)."""
    effects = current()
    if effects is None:  # (not under thunder.jit's tracing: call it)
        return wrap_const(fn(*map(unwrap, args), **{k: unwrap(v) for k, v in kwargs.items()}))
    how = {}
    if fn is warnings.warn:
        fn, args, kwargs, how = _explicit_warning(args, kwargs)
    effects.defer(fn, args, kwargs, how)
    return wrap_const(None)


def _explicit_warning(args: tuple, kwargs: dict) -> tuple:
    """``warnings.warn(message, category, stacklevel)`` as the ``warn_explicit`` call it makes, from the traced frame
    ``stacklevel`` frames up: filters and ``once`` registries then see the user's line, not the replay's."""
    names = ("message", "category", "stacklevel", "source")
    given = dict(zip(names, args)) | kwargs
    message = given["message"]
    category = unwrap(given.get("category", wrap_const(None)))
    if isinstance(unwrap(message), Warning):
        category = type(unwrap(message))
    stacklevel = unwrap(given.get("stacklevel", wrap_const(1)))
    frames = get_interpreterruntimectx().frame_stack
    frame = frames[max(len(frames) - max(int(stacklevel), 1), 0)] if frames else None
    where = {"filename": "sys", "lineno": 1, "module": "sys", "globals": None}
    if frame is not None:
        namespace = unwrap(frame.globals)
        where = {
            "filename": frame.code.co_filename,
            "lineno": (frame.positions.lineno if frame.positions else None) or frame.code.co_firstlineno,
            "module": namespace.get("__name__", "<unknown>"),
            "globals": namespace,
        }
    return warnings.warn_explicit, (message,), {}, {"category": category or UserWarning, **where}


def _warn(message, *, category, filename, lineno, module, globals):
    registry = globals.setdefault("__warningregistry__", {}) if globals is not None else None
    warnings.warn_explicit(message, category, filename, lineno, module, registry, globals)


# --- The replay -------------------------------------------------------------------------------------------------


class Replay:
    """One function of the objects and values a call's epilogue passes (``inputs``), making the trace's changes to
    pre-existing state again; its source is its ``repr``."""

    def __init__(self, source: str, namespace: dict[str, Any]):
        self.source = source
        exec(compile(source, "<thunder_symbolic replay>", "exec"), namespace)  # noqa: S102
        self.fn = namespace["replay"]

    def __call__(self, *inputs: Any) -> Any:
        return self.fn(*inputs)

    def __repr__(self) -> str:
        return f"<replay of side effects:\n{self.source}>"


def _replay(replay: Replay, *inputs: Any) -> Any:
    return replay(*inputs)


def _print_replay(bsym, out_printables, arg_printables, kwarg_printables) -> list[str]:
    """The call, after the replay's source as comments: the epilogue trace shows what it does."""
    call = default_python_printer(bsym, out_printables, arg_printables, kwarg_printables)
    return [*(f"# {line}" for line in bsym.args[0].source.splitlines()), call]


# replay_side_effects(replay, *inputs): the epilogue's step that makes the trace's side effects.
replay_side_effects = pythonex.register_operator(
    "replay_side_effects",
    meta=lambda replay, *inputs: None,
    fn=_replay,
    tags=(OpTags.DONT_DCE,),
    python_printer=_print_replay,
)
pythonex.register_implementation(replay_side_effects, replay_side_effects, checker=lambda *args: True)

# make_object(replay, *inputs) -> the object: an object the program made and returns, made anew on every call.
make_object = pythonex.register_operator(
    "make_object", meta=lambda replay, *inputs: None, fn=_replay, python_printer=_print_replay
)
pythonex.register_implementation(make_object, make_object, checker=lambda *args: True)


class Builder:
    """Turns the final state of what one trace changed into a :class:`Replay` and the proxies its epilogue passes.

    ``read`` (the trace's :class:`thunder_symbolic.guards.values.ValueGuards`) says whether the prologue can read a
    value read through a record (a path from the inputs) and whether it existed before the call; ``known(value)``
    gives the interpreter's wrapper of a value met unwrapped (an item of an object the program created), or None."""

    def __init__(self, read: Any, known: Callable[[Any], WrappedValue | None]):
        self._read, self._known = read, known
        self.inputs: list[Proxy] = []
        self._input_names: dict[int, str] = {}
        self.namespace: dict[str, Any] = {"_warn": _warn}
        self._constants: dict[int, str] = {}
        self._new: dict[int, str] = {}
        self.build: list[str] = []  # new objects, made first (cycles among them are fine)
        self.fill: list[str] = []  # their state
        self.before: list[str] = []  # old contents read before any change
        self.body: list[str] = []  # the changes, in order
        self._olds = 0

    # -- values ----------------------------------------------------------------------------------------------

    def _input(self, proxy: Proxy) -> str:
        name = self._input_names.get(id(proxy))
        if name is None:
            name = self._input_names[id(proxy)] = f"i{len(self.inputs)}"
            self.inputs.append(proxy)
        return name

    def constant(self, value: Any) -> str:
        if isinstance(value, dtypes.dtype):
            value = dtypes.to_torch_dtype(value)
        elif isinstance(value, devices.Device):
            value = devices.to_torch_device(value)
        if type(value) in (bool, int, float, str) or value is None:
            return repr(value)
        name = self._constants.get(id(value))
        if name is None:
            name = self._constants[id(value)] = f"c{len(self._constants)}"
            self.namespace[name] = value
        return name

    def target(self, value: Any, record: ProvenanceRecord) -> str | None:
        """The expression of a pre-existing object the replay changes: read by the prologue through ``record``, or,
        for a library's object (reached through a library module), the object itself; None for an object the
        program made (its changes are its own, and it is rebuilt where it reaches pre-existing state)."""
        if isinstance(value, Proxy):
            return self._input(value)
        if not self._read.reaches(record):
            return self.constant(value) if self._read.existed(record) else None
        name = self._input(AnyProxy(value, prefix="replayed", history=_fresh(record)))
        if record.inst is PseudoInst.INPUT_FN and record.ext_flag & EXT_FLAG_IS_MODULE:
            return f"{name}._model"  # (the prologue unpacks the jitted module as thunder's module around it)
        return name

    def value(self, value: Any, wrapper: WrappedValue | None = None) -> str:
        """The expression, at replay time, of ``value`` as the trace left it (``wrapper``: how the trace got it)."""
        if isinstance(value, WrappedValue):
            value, wrapper = value.value, value
        if isinstance(value, Proxy):
            return self._input(value)
        if id(value) in self._new:
            return self._new[id(value)]
        if _constant(value) or isinstance(value, (dtypes.dtype, devices.Device)):
            if type(value) is tuple:
                return "(" + "".join(f"{self.value(item)}, " for item in value) + ")"
            return self.constant(value)
        if wrapper is None:
            wrapper = self._known(value)
        record = wrapper.provenance if wrapper is not None else None
        if record is not None and self._read.existed(record):
            return self.target(value, record)
        if type(value) in (list, tuple, dict, set):
            return self._new_container(value, wrapper)
        if record is None and not _rebuildable(value):
            return self.constant(value)  # (an object met only natively: the same on every call)
        return self._new_object(value)

    def _new_container(self, value: Any, wrapper: WrappedValue | None) -> str:
        tracked = wrapper is not None and wrapper.has_item_tracking
        if type(value) is dict:
            items = wrapper.item_wrappers if tracked else {}
            return "{" + "".join(f"{self.value(k)}: {self.value(v, items.get(k))}, " for k, v in value.items()) + "}"
        items = wrapper.item_wrappers if tracked and type(value) is list else [None] * len(value)
        inner = "".join(f"{self.value(v, w)}, " for v, w in zip(value, items))
        if type(value) is set:
            return "{" + inner + "}" if value else "set()"
        return f"[{inner}]" if type(value) is list else f"({inner})"

    def _new_object(self, obj: Any) -> str:
        if not _rebuildable(obj):
            raise SideEffectError(
                f"the jitted function keeps a new {type(obj).__name__} in state that existed before the call, and "
                "its state is not in a __dict__ that a replay could rebuild on later calls; thunder.jit refuses to "
                "compile it. Create it outside the jitted function, or return it."
            )
        name = self._new[id(obj)] = f"o{len(self._new)}"
        cls = self.constant(type(obj))
        self.build.append(f"{name} = {cls}.__new__({cls})")
        state = "".join(f"{k!r}: {self.value(v)}, " for k, v in vars(obj).items())
        if state:
            self.fill.append(f"{name}.__dict__.update({{{state}}})")
        return name

    # -- changes ---------------------------------------------------------------------------------------------

    def set_items(self, target: str, items: dict[Any, Any], *, kind: str = "dict") -> None:
        """Store ``items`` (name -> value, or DELETED) into a dict, an object's ``__dict__``, attributes or a cell."""
        for name, value in items.items():
            deleted = value is DELETED
            if kind == "cell":
                self.body.append(
                    f"del {target}.cell_contents" if deleted else f"{target}.cell_contents = {self.value(value)}"
                )
            elif kind == "attr":
                self.body.append(
                    f"delattr({target}, {name!r})" if deleted else f"setattr({target}, {name!r}, {self.value(value)})"
                )
            else:
                key = self.value(name)
                self.body.append(f"{target}.pop({key}, None)" if deleted else f"{target}[{key}] = {self.value(value)}")

    def old_items(self, target: str) -> str:
        """A name for ``target``'s items before the replay changes anything (read by index or key)."""
        name = f"old{self._olds}"
        self._olds += 1
        self.before.append(f"{name} = {target}.copy()")
        return name

    def call(self, fn: Any, args: tuple, kwargs: dict, how: dict) -> None:
        arguments = [self.value(a) for a in args] + [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        if fn is warnings.warn_explicit:
            arguments += [f"{k}={self.constant(v) if k == 'globals' else self.value(v)}" for k, v in how.items()]
            self.body.append(f"_warn({', '.join(arguments)})")
        else:
            self.body.append(f"{self.constant(fn)}({', '.join(arguments)})")

    def replay(self, returning: str | None = None) -> Replay | None:
        """The function making what was added to this builder (and returning ``returning``, an expression), or None
        when there is nothing to make."""
        lines = self.build + self.before + self.fill + self.body
        if returning is not None:
            lines.append(f"return {returning}")
        if not lines:
            return None
        signature = ", ".join(f"i{i}" for i in range(len(self.inputs)))
        source = "\n".join([f"def replay({signature}):", *(f"    {line}" for line in lines)])
        return Replay(source, self.namespace)


def _fresh(record: ProvenanceRecord) -> ProvenanceRecord:
    """A copy of the path ``record`` without the proxies thunder attached to its steps while tracing (the prologue
    unpacks a step with one as that proxy, which it never unpacked itself); its root is the call's own."""
    if not record.inputs:
        return record
    copy = ProvenanceRecord(
        record.inst, [_fresh(i) for i in record.inputs], record.output_idx, record.output_key, record.value
    )
    copy.ext_flag = record.ext_flag
    return copy


def _rebuildable(obj: Any) -> bool:
    """Whether ``obj``'s state is its ``__dict__`` and its class makes one with a bare ``__new__`` (a class defined
    in Python without slots)."""
    cls = type(obj)
    return (
        isinstance(getattr(obj, "__dict__", None), dict)
        and cls.__flags__ & (1 << 9)  # Py_TPFLAGS_HEAPTYPE: defined by a class statement
        and "__slots__" not in vars(cls)
        and not isinstance(obj, (torch.Tensor, torch.nn.Module, BaseException))
    )


def _replay_container(builder: Builder, watched) -> None:
    """The changes to one watched container (see :class:`thunder_symbolic.guards.values.Watched`)."""
    final, before, wrappers = watched.contents()
    target = builder.target(watched.container, watched.record)
    if type(final) is list:
        olds = {id(item): i for i, item in enumerate(before)}
        indices = [olds.get(id(item)) for item in final]
        wrappers = wrappers or [None] * len(final)
        if indices[: len(before)] == list(range(len(before))):  # items appended
            added = [builder.value(item, w) for item, w in zip(final[len(before) :], wrappers[len(before) :])]
            builder.body.append(f"{target}.extend([{', '.join(added)}])")
        else:
            old = builder.old_items(target)
            items = [
                f"{old}[{j}]" if j is not None else builder.value(item, w)
                for item, w, j in zip(final, wrappers, indices)
            ]
            builder.body.append(f"{target}[:] = [{', '.join(items)}]")
    elif type(final) is dict:
        changes = {k: DELETED for k in before if k not in final}
        for key, item in final.items():
            if key not in before or before[key] is not item:
                changes[key] = item if wrappers is None else wrappers.get(key, item)
        builder.set_items(target, changes)
    else:  # a set
        removed, added = [x for x in before if x not in final], [x for x in final if x not in before]
        if removed:
            builder.body.append(f"{target}.difference_update(({''.join(f'{builder.value(x)}, ' for x in removed)}))")
        if added:
            builder.body.append(f"{target}.update(({''.join(f'{builder.value(x)}, ' for x in added)}))")


def collect(builder: Builder, effects: SideEffects, watched: list, member_stores: dict) -> None:
    """Everything the trace changed into ``builder``: the deferred calls, then the watched containers it changed,
    the stores into objects' ``__dict__`` (``member_stores``: the wrapper of each dict thunder's ``object.__setattr__``
    stored into -> [(name, wrapped value)...], in program order), and what the interpreter wrote natively."""
    for fn, args, kwargs, how in effects.calls:
        builder.call(fn, args, kwargs, how)
    for entry in watched:
        if entry.changed():
            _replay_container(builder, entry)
    for members, stores in member_stores.items():
        real = members.original_value if members.original_value is not members.nothing else members.value
        owner = effects.owners.get(id(real))
        target = builder.target(owner.value, owner.provenance) if owner is not None else None
        if target is not None:
            builder.set_items(f"{target}.__dict__", dict(stores))
    for store in effects.stores.values():
        target = builder.target(store.target.value, store.record)
        if store.kind == "cell":
            builder.set_items(target, {None: store.values[None]}, kind="cell")
        else:
            builder.set_items(target, store.values, kind=store.kind)


def returnable(value: Any, record: ProvenanceRecord) -> bool:
    """Whether ``value`` (read through ``record``), which the program returns, is an object it made whose state is
    its ``__dict__``: thunder's epilogue cannot return it ("unhandled value"), and returning the object made while
    tracing would return it, holding proxies, on every call."""
    import dataclasses

    from thunder.core.jit_ext import should_register_for_prologue

    return _rebuildable(value) and not dataclasses.is_dataclass(value) and not should_register_for_prologue(record)


def made_anew(wrapped: WrappedValue, read: Any, effects: SideEffects) -> AnyProxy:
    """The proxy of ``wrapped``'s object as the epilogue makes it on every call (bound in the current trace)."""
    from thunder.core.trace import get_tracectx

    builder = Builder(read, effects.known)
    made = builder.replay(returning=builder.value(wrapped.value, wrapped))
    output = AnyProxy(wrapped.value, prefix="made")
    get_tracectx().bound_symbols.append(make_object.bind(made, *builder.inputs, output=output))
    return output


def emit(builder: Builder, epilogue_trace) -> None:
    """Append the replay ``builder`` made, if any, to ``epilogue_trace``."""
    from thunder.core.trace import tracectx

    replay = builder.replay()
    if replay is None:
        return
    with tracectx(epilogue_trace):
        bsym = replay_side_effects.bind(replay, *builder.inputs, output=None)
    epilogue_trace.bound_symbols.append(bsym)
