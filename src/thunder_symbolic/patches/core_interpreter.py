"""Patches of ``thunder/core/interpreter.py``: Python builtins that meet symbolic numbers, subscripts and bound
method calls without interpreted frames, each code object disassembled once, and default arguments read as values."""

from __future__ import annotations

import dis
import functools
import inspect
import operator
import sys
import types
from collections.abc import Sequence

from thunder.core.interpreter import (
    INTERPRETER_SIGNALS,
    InterpreterFrame,
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    check_and_append,
    do_raise,
    get_interpreterruntimectx,
    interpreter_needs_wrap,
    is_pycapsule,
    unwrap,
    wrap_const,
)
from thunder.core.proxies import IntegerProxy, Proxy, TensorProxy

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.semantics import numpy_numbers, side_effects, sizes, subscripts


def _tensor_len(t: TensorProxy):
    # A tensor's length is its first dim: symbolic, as torch.compile's len() of a tensor is a SymInt.
    # Python code that needs an int (range, an index) converts it with __index__, which pins it.
    return t.__len__()


@patch(
    "thunder.core.interpreter:_default_lookaside_map",
    summary="len() of a tensor is its first dim, a symbolic int under symbolic values, instead of failing",
    why=(
        "The interpreter's len lookaside rejected the IntegerProxy a TensorProxy's __len__ returns under "
        "symbolic values; converting it to an int would pin the dim (one compile per length)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _lookaside_map(original):
    original_len = original[len]

    def len_lookaside(obj):
        if isinstance(unwrap(obj), TensorProxy):
            return interpreter_needs_wrap(_tensor_len)(obj)
        return original_len(obj)

    return {**original, len: len_lookaside}


def _index_with_index_value(getitem):
    def __getitem__(self, idx, /):
        if isinstance(unwrap(idx), IntegerProxy):
            idx = wrap_const(operator.index(unwrap(idx)))
        return getitem(self, idx)

    return __getitem__


@patch(
    "thunder.core.interpreter:_default_provenance_tracking_lookaside_map",
    summary="a list or tuple indexed by a symbolic int uses its __index__ value, as Python does (pinned); a "
    "list's insert, remove, clear and *= are traced",
    why=(
        "Under symbolic values int attributes of modules are IntegerProxies; transformers' caches index "
        "`self.layers[layer_idx]`, which the interpreter rejected ('indices must be integers or slices'). And "
        "0.2.6's interpreter raised NotImplementedError ('Sequence.insert, please file an issue') for these four "
        "list methods, either cache."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _provenance_lookaside_map(original):
    replaced = {seq.__getitem__: _index_with_index_value(original[seq.__getitem__]) for seq in (list, tuple)}
    replaced |= {
        list.insert: _list_insert,
        list.remove: _list_remove,
        list.clear: _list_clear,
        list.__imul__: _list_imul,
    }
    return {**original, **replaced}


# A traced list's methods change the list and the wrappers of its items together (the interpreter keeps both).


def _list_insert(lst: WrappedValue, index: WrappedValue, item: WrappedValue):
    lst.track_items()
    at = operator.index(unwrap(index))
    lst.value.insert(at, item.value)
    lst.item_wrappers.insert(at, item)
    return wrap_const(None)


def _list_clear(lst: WrappedValue):
    lst.track_items()
    lst.value.clear()
    lst.item_wrappers.clear()
    return wrap_const(None)


def _list_imul(lst: WrappedValue, times: WrappedValue):
    lst.track_items()
    n = operator.index(unwrap(times))
    lst.value *= n
    lst.item_wrappers *= n
    return lst


def _list_remove(lst: WrappedValue, item: WrappedValue):
    """``lst.remove(item)``: the first item that is ``item`` or equals it (the comparison traced) is removed."""
    lst.track_items()
    for at, candidate in enumerate(list(lst.item_wrappers)):
        same = candidate.value is item.value or _interpret_call(operator.eq, candidate, item)
        if same is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            return same
        if same is True or isinstance(same, WrappedValue) and bool(unwrap(same)):
            del lst.value[at], lst.item_wrappers[at]
            return wrap_const(None)
    return do_raise(ValueError("list.remove(x): x not in list"))


def _is_pybind11_function_record(obj) -> bool:
    return type(obj).__name__.startswith("pybind11_detail_function_record")


@patch(
    "thunder.core.interpreter:is_pycapsule",
    summary="a pybind11 function record counts as a capsule: a builtin bound to one is called as it is",
    why=(
        "From torch 2.12 a DTensor placement (`Shard(0)`) is a pybind11 class whose `__init__` is a builtin "
        "bound to a function record. The interpreter looked the method up on the record's type and called its "
        "`__init__` with the record: pybind11 aborts the process ('UNEXPECTED CALL OF "
        "function_record_PyTypeObject_methods::tp_init_impl'). Capsules are already exempt for the same reason: "
        "their type has none of the methods bound to them."
    ),
)
def _is_pycapsule(original):
    def is_pycapsule(x) -> bool:
        return original(x) or _is_pybind11_function_record(x)

    return is_pycapsule


_SIZE_CHANGED = "changed size during iteration"
_READS_OF_A_CHANGING_DICT = 8


@patch(
    "thunder.core.interpreter:populate_item_wrappers",
    summary="a dict whose size changes while its items are wrapped (a weakref callback removing an entry) is "
    "read again, for the items not wrapped yet",
    why=(
        "Wrapping the items of a dict runs code (callbacks, allocations) that can drop the last reference to an "
        "object, and a weak registry's callback then removes its entry: Dynamo's GenerationTracker, which tags "
        "every module made after torch.compile has run (a loss module made in a model's forward, in traced code), "
        "is such a dict. The iteration raised 'dictionary changed size during iteration' as an InterpreterError, "
        "now and then (ViT and Gemma in the test suite). Each reading wraps only items not wrapped yet, so reading "
        "again completes the wrappers."
    ),
)
def _populate_item_wrappers(original):
    @functools.wraps(original)
    def populate_item_wrappers(obj):
        for _ in range(_READS_OF_A_CHANGING_DICT - 1):
            try:
                return original(obj)
            except RuntimeError as e:
                if _SIZE_CHANGED not in str(e):
                    raise
        return original(obj)

    return populate_item_wrappers


# --- Subscripts without interpreted frames (see thunder_symbolic.semantics.subscripts) --------------------------------


@patch(
    "thunder.core.interpreter:globals_lookup",
    summary="a global or builtin name in plain dicts is read by the interpreter's dict lookaside directly instead "
    "of by interpreting `d[k]` (same wrapped value and provenance)",
    why=(
        "Each LOAD_GLOBAL interpreted `lambda d, k: d[k]` and the subscript it calls (twice for a builtin): "
        "9,480 of the 12,612 frames interpreted to trace the benchmark's prefill (`type`, `getattr`, "
        "`hasattr`... in the interpreter's own helpers), a third of thunder's compile. Module builtins, dict "
        "subclasses and missing names keep the interpreted path (and its NameError)."
    ),
)
def _globals_lookup(original):
    def globals_lookup(globals_dict, name):
        lookaside = subscripts.lookaside(globals_dict, name)
        if lookaside is not None:
            if name.value in globals_dict.value:
                return subscripts.call(lookaside, globals_dict, name)
            if type(globals_dict.value.get("__builtins__")) is dict:
                builtins = subscripts.call(lookaside, globals_dict, wrap_const("__builtins__"))
                in_builtins = subscripts.lookaside(builtins, name)
                if in_builtins is not None and name.value in builtins.value:
                    return subscripts.call(in_builtins, builtins, name)
        return original(globals_dict, name)

    return globals_lookup


@patch(
    "thunder.core.interpreter:_setup_frame_and_run_python_function",
    summary="a call that leaves parameters to their defaults passes the defaults it reads from the function's "
    "__defaults__ and __kwdefaults__, so the prologue checks them as any value read from the function",
    why=(
        "0.2.6 binds default arguments as constants: after `f.__defaults__ = (5,)` (on the jitted function or "
        "one it calls), or a change inside a default list, the program traced for the old default was reused "
        "(both cache options): silently wrong results."
    ),
)
def _setup_frame_and_run_python_function(original):
    def setup_frame_and_run_python_function(compilectx, runtimectx, wrapped_fn, /, *args, **kwargs):
        read = value_guards.current() if compilectx._with_provenance_tracking else None  # (else nothing wrapped)
        if (
            read is not None
            and (wrapped_fn.value.__defaults__ or wrapped_fn.value.__kwdefaults__)
            and read.reaches(wrapped_fn.provenance)
        ):
            args, kwargs = _with_defaults(wrapped_fn, args, kwargs)
        return original(compilectx, runtimectx, wrapped_fn, *args, **kwargs)

    return setup_frame_and_run_python_function


def _with_defaults(wrapped_fn: WrappedValue, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` and ``kwargs`` with every parameter they leave to its default passed explicitly, read from
    ``fn.__defaults__[i]`` or ``fn.__kwdefaults__[name]`` (positional-only ones positionally, the rest by name)."""
    fn = wrapped_fn.value
    code, defaults, kwdefaults = fn.__code__, fn.__defaults__ or (), fn.__kwdefaults__ or {}
    names = code.co_varnames
    first_default = code.co_argcount - len(defaults)
    if len(args) < min(first_default, code.co_posonlyargcount):
        return args, kwargs  # a positional-only argument without default is missing: thunder raises the TypeError
    args, kwargs = list(args), dict(kwargs)
    for index in range(max(len(args), first_default), code.co_argcount):
        if index < code.co_posonlyargcount:
            args.append(_default(wrapped_fn, "__defaults__", index - first_default))
        elif names[index] not in kwargs:
            kwargs[names[index]] = _default(wrapped_fn, "__defaults__", index - first_default)
    for name in names[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]:
        if name not in kwargs and name in kwdefaults:
            kwargs[name] = _default(wrapped_fn, "__kwdefaults__", name)
    return tuple(args), kwargs


def _default(wrapped_fn: WrappedValue, namespace: str, key: int | str) -> WrappedValue:
    table = ProvenanceRecord(PseudoInst.LOAD_ATTR, inputs=[wrapped_fn.provenance, wrap_const(namespace).provenance])
    record = ProvenanceRecord(PseudoInst.BINARY_SUBSCR, inputs=[table, wrap_const(key).provenance])
    value = getattr(wrapped_fn.value, namespace)[key]
    known = get_interpreterruntimectx()._known_wrappers.get(id(value))
    if known is not None and known[0]() is not None and type(value) in (list, dict, set):
        return known[0]()  # a container traced already: one wrapper, so its changes are seen through either name
    return WrappedValue(value, provenance=record)  # (not `wrap`: it returns a constant's wrapper made before)


@patch(
    "thunder.core.interpreter:_call_dispatch",
    summary="a bound method written in Python is called as its `__func__` with its `__self__`, both read through "
    "the interpreter as its helper reads them (same values, provenance and checks), without interpreting the "
    "helper; a builtin method of an object is traced as the descriptor it was bound from, found by binding each "
    "candidate with the object's type as well as the object",
    why=(
        "Each call of a bound method object (a module's `forward`, which torch's `__call__` reads and then calls; "
        "`method = obj.method; method(...)`) interpreted `lambda fn, *args, **kwargs: fn.__func__(fn.__self__, "
        "*args, **kwargs)`, its argument list and keyword dict rebuilt by interpreted LIST_EXTEND and DICT_MERGE: "
        "about a sixth of a small decoder's tracing. And 0.2.6 found a builtin method's descriptor by calling "
        "`candidate.__get__(obj)` on each base class's method: for a method that needs its defining class "
        "(METH_METHOD, such as `_io._BufferedIOBase.seek`), CPython 3.12.1 dereferences the missing type and the "
        "process dies with a segmentation fault (transformers' generation reached it through torch.vmap, "
        "torch.library, traceback and linecache's `buffer.seek(0)`)."
    ),
)
def _call_dispatch(original):
    def call_dispatch(compilectx, runtimectx, fn, /, *args, **kwargs):
        method = unwrap(fn)
        if isinstance(method, (types.BuiltinMethodType, types.MethodWrapperType)):
            descriptor = _descriptor_of(method)
            if descriptor is not None:  # (None: thunder's path, which has no candidate to bind)
                wrapped = fn if isinstance(fn, WrappedValue) else wrap_const(fn)
                instance = _interpret_call(getattr, wrapped, wrap_const("__self__"))
                if instance is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
                    return instance
                return _interpret_call(wrap_const(descriptor), instance, *args, **kwargs)
        if (
            not isinstance(method, types.MethodType)
            or not compilectx._with_provenance_tracking
            or hasattr(method, "__thunder_interpreter_orig_fn")  # (thunder's own unwrapping comes first)
        ):
            return original(compilectx, runtimectx, fn, *args, **kwargs)
        wrapped = fn if isinstance(fn, WrappedValue) else wrap_const(fn)
        function = _interpret_call(getattr, wrapped, wrap_const("__func__"))
        if function is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            return function
        instance = _interpret_call(getattr, wrapped, wrap_const("__self__"))
        if instance is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            return instance
        return _interpret_call(function, instance, *args, **kwargs)

    return call_dispatch


def _descriptor_of(method) -> types.MethodDescriptorType | types.WrapperDescriptorType | None:
    """The method or slot descriptor of a base class of ``type(method.__self__)`` that ``method`` was bound from
    (``super().seek``), else the type's own attribute of that name; None for a builtin of no object, of a class,
    of a module or of a capsule (already canonical), and where the type has no such attribute (thunder then calls
    the method opaquely). Binding passes the type: ``descriptor.__get__(obj)`` crashes CPython 3.12.1 for a method
    that needs its defining class."""
    instance = method.__self__
    if instance is None or isinstance(instance, (type, types.ModuleType)) or is_pycapsule(instance):
        return None
    kind, name = type(instance), method.__name__
    for base in kind.__mro__[1:]:
        candidate = getattr(base, name, None)
        if isinstance(candidate, (types.WrapperDescriptorType, types.MethodDescriptorType)):
            try:
                if candidate.__get__(instance, kind) == method:
                    return candidate
            except TypeError:  # (a descriptor of a class the instance is not one of)
                continue
    found = getattr(kind, name, None)
    return None if found is None or isinstance(found, types.BuiltinFunctionType) else found


@patch(
    "thunder.core.interpreter:wrap_args_from_list",
    summary="the items of a call's `*args` tuple or list are read by the interpreter's lookaside directly "
    "(same wrapped values and provenance)",
    why=(
        "It interpreted `lambda seq, i: seq[i]` and the subscript it calls for every argument of every call "
        "made with `*args`: 1,424 of the frames interpreted to trace the benchmark's prefill."
    ),
)
def _wrap_args_from_list(original):
    def wrap_args_from_list(lst):
        keys = [wrap_const(i) for i in range(len(unwrap(lst)))]
        lookaside = subscripts.lookaside(lst, keys[0]) if keys else None
        if lookaside is None:
            return original(lst)
        return [subscripts.call(lookaside, lst, key) for key in keys]

    return wrap_args_from_list


@patch(
    "thunder.core.interpreter:_default_opcode_handler_map",
    summary="BINARY_SUBSCR of a tuple or list by an int, or of a dict by a str, calls the interpreter's lookaside "
    "directly instead of interpreting `obj.__getitem__(index)` (same wrapped value and provenance); a slice, sum or "
    "repetition of a size is marked a size (see thunder_symbolic.semantics.sizes); assigning or deleting a global or a "
    "closure variable of a function reached through the inputs is replayed by the epilogue; an object's `__dict__` or "
    "a module's `_modules` read in traced code has its keys checked; `del obj.name` of an object the program was given "
    "is replayed by the epilogue; a numpy number meeting a proxy in a binary operator is its Python number",
    why="One interpreted frame per subscript such as `outputs[0]` (74 in the benchmark's prefill, besides those "
    "of global reads and `*args`). Eager's `x.shape[1:]` and `x.shape[:-1] + (n,)` are torch.Size; traced, they "
    "were tuples to isinstance, type and str. `global LAST; LAST = x.shape[0]` ran once, while tracing (a proxy "
    "left in LAST under symbolic values), and a counter (`calls += 1`) failed its next call with thunder's "
    "'Expected 1 to be equal to and have the type of 0' (either cache). `cfg.__dict__.get('bias')` and "
    "`'bias' in cfg.__dict__` answered for the first call's attributes on every call, and iterating a ModuleList, "
    "Sequential or ModuleDict (`self._modules` in torch's code) for the first call's layers. `x * np.float32(0.5)` "
    "failed in thunder's mul, `np.float32(2) * x` in the interpreter.",
)
def _opcode_handlers(original):
    binary_subscr, binary_slice, binary_op = original["BINARY_SUBSCR"], original["BINARY_SLICE"], original["BINARY_OP"]

    def binary_subscr_handler(inst, /, stack, **kwargs):
        container, key = stack.getitem_wrapped(-2), stack.getitem_wrapped(-1)
        lookaside = subscripts.lookaside(container, key)
        if lookaside is None:
            sliced = type(unwrap(key)) is slice and sizes.is_size(container)
            return _marking_a_size(sliced, binary_subscr(inst, stack=stack, **kwargs), stack)
        stack.pop_wrapped(), stack.pop_wrapped()
        return check_and_append(stack, subscripts.call(lookaside, container, key))

    def binary_slice_handler(inst, /, stack, **kwargs):
        sliced = sizes.is_size(stack.getitem_wrapped(-3))
        return _marking_a_size(sliced, binary_slice(inst, stack=stack, **kwargs), stack)

    def binary_op_handler(inst, /, stack, **kwargs):
        left, right = stack.getitem_wrapped(-2), stack.getitem_wrapped(-1)
        if numpy_numbers.is_numpy_number(left) and isinstance(unwrap(right), Proxy):
            stack[-2] = numpy_numbers.as_python(left)
        elif numpy_numbers.is_numpy_number(right) and isinstance(unwrap(left), Proxy):
            stack[-1] = numpy_numbers.as_python(right)
        sized = inst.arg in sizes.SIZE_OPS and (sizes.is_size(left) or sizes.is_size(right))
        return _marking_a_size(sized, binary_op(inst, stack=stack, **kwargs), stack)

    handlers = {"BINARY_SUBSCR": binary_subscr_handler, "BINARY_SLICE": binary_slice_handler}
    handlers["LOAD_ATTR"] = _checking_dict_reads(original["LOAD_ATTR"])
    handlers["DELETE_ATTR"] = _deleting_attributes(original["DELETE_ATTR"])
    for opname, target in (("GLOBAL", _globals_of), ("DEREF", _cell_of)):
        for verb in ("STORE", "DELETE"):
            name = f"{verb}_{opname}"
            handlers[name] = _recording_stores(original[name], target, verb)
    return {**original, **handlers, "BINARY_OP": binary_op_handler}


def _checking_dict_reads(handler):
    """``handler`` of LOAD_ATTR, having the prologue check the keys of an object's ``__dict__`` or a module's
    ``_modules`` that traced code reads (thunder's own attribute lookup reads them through getattr, not this
    opcode)."""

    def load_attr_handler(inst, /, stack, **kwargs):
        signal = handler(inst, stack=stack, **kwargs)
        if inst.argval in ("__dict__", "_modules") and signal is None:
            value_guards.check_namespace_read(stack.getitem_wrapped(-1), guard_recorder.source_location)
        return signal

    return load_attr_handler


def _deleting_attributes(handler):
    """``handler`` of DELETE_ATTR under thunder.jit: ``del obj.name`` with ``obj`` wrapped (0.2.6 deleted it from the
    unwrapped object, natively, and the trace kept reading the deleted value), recorded for the replay where ``obj``
    existed before the call (see thunder_symbolic.semantics.side_effects)."""

    def delete_attr_handler(inst, /, stack, co, **kwargs):
        read, effects = value_guards.current(), side_effects.current()
        if read is None or effects is None:  # (the interpreter alone: nothing is wrapped)
            return handler(inst, stack=stack, co=co, **kwargs)
        obj, name = stack.pop_wrapped(), co.co_names[inst.arg]
        if not isinstance(obj.value, Proxy) and read.reaches(obj.provenance):
            effects.store("attr", obj, obj.provenance, name, side_effects.DELETED)
        result = _interpret_call(delattr, obj, wrap_const(name))
        if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
            return result
        obj.attribute_wrappers.pop(name, None)
        members = obj.attribute_wrappers.get("__dict__")
        if members is not None and isinstance(members.item_wrappers, dict):
            members.item_wrappers.pop(name, None)
            members.key_wrappers.pop(name, None)
        return None

    return delete_attr_handler


def _recording_stores(handler, target, verb: str):
    """``handler`` of STORE/DELETE_GLOBAL or _DEREF, which changes a global of, or a closure variable captured by,
    a function reached through the inputs natively: the change is recorded for the replay (put back when the trace
    ends, made again by every call's epilogue: see thunder_symbolic.semantics.side_effects). Globals of library
    modules and cells made while tracing are the traced code's own."""
    kind = "globals" if target is _globals_of else "cell"

    def recording_handler(inst, /, stack, co, frame, **kwargs):
        read, effects = value_guards.current(), side_effects.current()
        namespace = target(inst, co, frame)
        if (
            read is not None
            and effects is not None
            and isinstance(namespace, WrappedValue)
            and read.reaches(namespace.provenance)
        ):
            value = stack.getitem_wrapped(-1) if verb == "STORE" else side_effects.DELETED
            effects.store(kind, namespace, namespace.provenance, inst.argval if kind == "globals" else None, value)
        return handler(inst, stack=stack, co=co, frame=frame, **kwargs)

    return recording_handler


def _globals_of(inst, co, frame):
    return frame.globals


def _cell_of(inst, co, frame):
    cell = frame.localsplus[inst.arg]
    return cell if inst.argval in co.co_freevars else None  # (a cell variable of this frame is its own)


def _marking_a_size(from_a_size: bool, signal, stack):
    """An opcode handler's ``signal``, after marking the value it pushed a size when computed from one."""
    if from_a_size and signal is None:
        sizes.mark(stack.getitem_wrapped(-1))
    return signal


@patch(
    "thunder.core.interpreter:InterpreterFrame.get_or_make_python_frame",
    summary="the stand-in Python frame for an exception raised in interpreted code is made once per code position",
    why=(
        "Every exception leaving an interpreted frame (each `for` loop ends with one, StopIteration) got a "
        "fresh stand-in frame for its traceback, built on a new thread that the interpreter waits for by "
        "spinning while holding the GIL: about 7 ms each with the other rank on the second core, 86 times in "
        "the benchmark's prefill. The frame depends only on the position (file, function, line): it holds no "
        "locals, so one per position serves every traceback."
    ),
)
def _python_frame(original):
    frames: dict[tuple, object] = {}

    def get_or_make_python_frame(self: InterpreterFrame):
        if self.positions is None:
            return original(self)  # (which refuses it)
        code = self.code
        position = (code.co_filename, code.co_firstlineno, code.co_name, self.qualname, self.positions.lineno)
        frame = frames.get(position)
        if frame is None:
            if len(frames) >= _PYTHON_FRAMES_KEPT:
                frames.clear()
            frame = frames[position] = original(self)
        return frame

    return get_or_make_python_frame


_PYTHON_FRAMES_KEPT = 4096  # positions; a frame is a few hundred bytes


def _module_view(module: types.ModuleType, **overrides) -> types.ModuleType:
    """``module`` as thunder's interpreter sees it, with ``overrides``. A plain module with a copy of the
    namespace: the interpreter reads attributes such as dis.Instruction per instruction, and a module's own
    lookup is the fastest; its ``__getattr__`` (PEP 562) serves what the module gains later."""
    view = types.ModuleType(module.__name__, module.__doc__)
    view.__dict__.update(vars(module))
    view.__dict__.update(overrides)
    view.__getattr__ = functools.partial(getattr, module)
    return view


def _get_instructions(x, **kwargs):
    if kwargs or not isinstance(x, types.CodeType):
        return dis.get_instructions(x, **kwargs)
    return iter(_instructions(x))


@functools.lru_cache(maxsize=4096)
def _instructions(code: types.CodeType) -> tuple[dis.Instruction, ...]:
    # Equal code objects (same bytecode, constants, names, line table) have the same instructions.
    return tuple(dis.get_instructions(code))


@patch(
    "thunder.core.interpreter:dis",
    summary="the interpreter disassembles each code object once instead of at every call of its function",
    why=(
        "The interpreter runs a frame from the list of its code's instructions, and 0.2.6 disassembled the "
        "code again for every frame: the same small functions are called thousands of times while a model is "
        "traced (a twentieth of thunder's compile of the inference benchmark's prefill). Only the "
        "interpreter's view of the module changes; every other module keeps the dis module itself."
    ),
    rebinds=False,
)
def _dis(original):
    return _module_view(dis, get_instructions=_get_instructions)  # a code object's instructions read once


@patch(
    "thunder.core.interpreter:inspect",
    summary="the interpreter's inspect.stack() reads the source of the frames it indexes, not of every caller",
    why=(
        "Each interpretation keeps its caller's frame (inspect.stack()[2], read only when it records its "
        "history), and inspect.stack reads the source line of every frame on the stack: under Dynamo and a "
        "model's call that is a hundred frames, 5-7 ms an interpretation, more the first time a process reads "
        "their files. Only the interpreter's view of the module changes; every other module keeps inspect."
    ),
    rebinds=False,
)
def _inspect(original):
    return _module_view(inspect, stack=_stack)


def _stack(context: int = 1) -> Sequence[inspect.FrameInfo]:
    return _CallerFrames(sys._getframe(1), context)


class _CallerFrames(Sequence):
    """What ``inspect.stack()`` returns, each frame's information (its source lines) read when it is indexed."""

    def __init__(self, frame: types.FrameType | None, context: int):
        self._frames, self._context = [], context
        while frame is not None:
            self._frames.append(frame)
            frame = frame.f_back

    def __len__(self) -> int:
        return len(self._frames)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        frame = self._frames[index]
        info = inspect.getframeinfo(frame, self._context)
        return inspect.FrameInfo(frame, *info, positions=info.positions)
