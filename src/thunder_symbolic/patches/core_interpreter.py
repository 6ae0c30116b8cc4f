"""Patches of ``thunder/core/interpreter.py``: Python builtins that meet symbolic numbers, and the cost of
reading a global."""

from __future__ import annotations

import operator

from thunder.core.interpreter import (
    InterpreterFrame,
    MutMappingWrapperMethods,
    WrappedValue,
    interpreter_needs_wrap,
    unwrap,
    wrap_const,
)
from thunder.core.proxies import IntegerProxy, TensorProxy

from thunder_symbolic._registry import patch


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
    summary="a list or tuple indexed by a symbolic int uses its __index__ value, as Python does (pinned)",
    why=(
        "Under symbolic values int attributes of modules are IntegerProxies; transformers' caches index "
        "`self.layers[layer_idx]`, which the interpreter rejected ('indices must be integers or slices')."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _provenance_lookaside_map(original):
    replaced = {seq.__getitem__: _index_with_index_value(original[seq.__getitem__]) for seq in (list, tuple)}
    return {**original, **replaced}


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


def _plain_dict(wrapped: object) -> bool:
    return isinstance(wrapped, WrappedValue) and type(wrapped.value) is dict and wrapped.item_wrappers is not None


@patch(
    "thunder.core.interpreter:globals_lookup",
    summary="a global or builtin name read from plain dicts is looked up directly instead of by interpreting "
    "`d[k]` (same wrapped value and provenance, no interpreted frames)",
    why=(
        "Each LOAD_GLOBAL interpreted a `lambda d, k: d[k]` (two frames: the lambda and its subscript), twice "
        "for a builtin. Tracing the benchmark's prefill ran 12,612 interpreted frames, 9,480 of them for globals "
        "(`type`, `getattr`, `hasattr`... in the interpreter's own helpers): a third of thunder's compile. The "
        "subscript ends in the dict wrapper's `__getitem__` either way; module builtins, dict subclasses and "
        "missing names keep the interpreted path (and its NameError)."
    ),
)
def _globals_lookup(original):
    def globals_lookup(globals_dict, name):
        if _plain_dict(globals_dict) and isinstance(name, WrappedValue) and type(name.value) is str:
            if name.value in globals_dict.value:
                return MutMappingWrapperMethods.__getitem__(globals_dict, name)
            builtins = globals_dict.value.get("__builtins__")
            if type(builtins) is dict and name.value in builtins:
                wrapped_builtins = MutMappingWrapperMethods.__getitem__(globals_dict, wrap_const("__builtins__"))
                if _plain_dict(wrapped_builtins):
                    return MutMappingWrapperMethods.__getitem__(wrapped_builtins, name)
        return original(globals_dict, name)

    return globals_lookup


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
