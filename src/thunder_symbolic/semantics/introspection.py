"""What traced code learns when it looks at a value: ``type``, ``isinstance``, ``getattr``/``hasattr``, ``vars``,
``str``/``repr``/``format``, a tensor's strides, layout, storage attributes, ``.grad`` and ``.data``, a symbolic
number's Python attributes.

Each answer is the one eager Python gives for the call's values, and where it depends on an input the prologue
checks it (through :mod:`thunder_symbolic.guards.values`): a later call that would answer otherwise recompiles.
"""

from __future__ import annotations

import functools
import operator
from functools import partial
from typing import Any

import torch
from thunder.core import devices, dtypes
from thunder.core.interpreter import (
    INTERPRETER_SIGNALS,
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    do_raise,
    get_interpreterruntimectx,
    interpreter_needs_wrap,
    unwrap,
    wrap,
    wrap_const,
)
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import IntegerProxy, NumberProxy, Proxy, TensorProxy
from thunder.torch.experimental.dtensor_proxy import is_dtensor_proxy

from thunder import clang
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.semantics import side_effects, sizes, tensor_methods
from thunder_symbolic.semantics.opaque import opaque


def _input_contiguity(tensor):
    """``x.is_contiguous`` of an input tensor: its answer, checked by the prologue. thunder does not model
    strides, so 0.2.6 answered from a contiguous fake tensor (and then refused to branch on it)."""
    real = tensor.original_value

    @opaque
    def is_contiguous(memory_format=torch.contiguous_format):
        if not isinstance(real, torch.Tensor):
            raise _strides_not_tracked("is_contiguous()", tensor)
        answer = real.is_contiguous(memory_format=memory_format)
        read = value_guards.current()
        where = guard_recorder.source_location()
        read.check(tensor.value, read.contiguity(tensor.provenance, memory_format, answer, where))
        return answer

    return is_contiguous


def _input_inference(tensor):
    """``x.is_inference()``: of an input tensor, its answer, checked by the prologue; of a tensor the program
    computes, whether inference mode is on (as eager makes it: traced code cannot change the mode, see
    :func:`_entering_inference_mode`), checked as a read of that state. 0.2.6 answered
    for the first call under constant values and failed under symbolic values."""
    real = tensor.original_value

    @opaque
    def is_inference():
        if not isinstance(real, torch.Tensor):
            return inference_mode_read()
        return _checked_answer(tensor, "inference", real.is_inference())

    return is_inference


def _input_strides(tensor):
    """``x.stride()`` of an input tensor: its strides, checked by the prologue. thunder does not model strides:
    0.2.6 had no such attribute (AttributeError)."""
    real = tensor.original_value

    @opaque
    def stride(dim=None):
        if not isinstance(real, torch.Tensor):
            raise _strides_not_tracked("stride()", tensor)
        answer = _checked_answer(tensor, "strides", real.stride())
        return answer if dim is None else answer[dim]

    return stride


def _strides_not_tracked(read: str, tensor: WrappedValue) -> NotImplementedError:
    return NotImplementedError(
        f"{read} of {tensor.value.name} at {guard_recorder.source_location()}: thunder does not track the strides of "
        "tensors the program computes; ask it of an input tensor"
    )


def _checked_answer(tensor: WrappedValue, kind: str, answer: Any) -> Any:
    """``answer``, of the input tensor ``tensor``, checked by the prologue as ``kind`` (once per tensor)."""
    read = value_guards.current()
    if read is not None:
        found = read.input_tensor(tensor.provenance, kind, answer, guard_recorder.source_location)
        if found is not None:
            read.check(tensor.value, found)
    return answer


def inference_mode_read() -> bool:
    """Whether inference mode is on, checked by the prologue as a read of that state."""
    enabled = torch.is_inference_mode_enabled()
    read = value_guards.current()
    if read is not None:
        error = read.state_read(torch.is_inference_mode_enabled, (), enabled, guard_recorder.source_location)
        assert error is None  # (a bool)
    return enabled


def _storage_attribute(tensor: WrappedValue, name: str) -> WrappedValue:
    """``x.itemsize``, ``x.element_size()`` and ``x.nbytes``, of the dtype (checked for an input, set by the trace
    for a computed tensor) and symbolic sizes; ``x.is_cpu`` and ``x.is_meta`` of the device (the same); ``x.layout``
    and ``x.is_sparse``: an input's, checked, and a computed tensor's strided (thunder computes dense tensors).
    0.2.6 had none of these but ``element_size()``, which it ran as a fallback of the first call's shape: a compile
    per shape."""
    proxy = unwrap(tensor)
    if name in ("layout", "is_sparse"):
        layout = _input_layout(tensor)
        return wrap_const(layout if name == "layout" else layout is torch.sparse_coo)
    if name in ("is_cpu", "is_meta"):
        return wrap_const(proxy.device.type == name.removeprefix("is_"))
    itemsize = dtypes.to_torch_dtype(proxy.dtype).itemsize
    if name == "itemsize":
        return wrap_const(itemsize)
    if name == "element_size":
        return wrap_const(opaque(functools.partial(int, itemsize)))
    return _interpret_call(wrap_const(_nbytes), tensor, wrap_const(itemsize))


_STORAGE_ATTRIBUTES = frozenset(("itemsize", "element_size", "nbytes", "layout", "is_sparse", "is_cpu", "is_meta"))

# Methods of an input tensor answered from the tensor and checked by the prologue (made by the input's wrapper).
_INPUT_ANSWERS = {"is_contiguous": _input_contiguity, "is_inference": _input_inference, "stride": _input_strides}


def _input_layout(tensor: WrappedValue) -> torch.layout:
    """An input tensor's layout, checked by the prologue (thunder takes a sparse input, and its checks of a tensor
    do not tell a sparse one from a dense one); a computed tensor's, strided."""
    real = tensor.original_value
    return _checked_answer(tensor, "layout", real.layout) if isinstance(real, torch.Tensor) else torch.strided


def _data(tensor):
    """``x.data``: the tensor's values without autograd history, sharing its memory, which thunder's ``detach``
    is (an in-place update of it updates ``x``, as eager's)."""
    return tensor.detach()


def _nbytes(tensor, itemsize):
    return tensor.numel() * itemsize


def dtensor_aware_isinstance(lookaside):
    def isinstance_lookaside(obj, cls):
        result = lookaside(obj, cls)
        if unwrap(result) is False and is_dtensor_proxy(unwrap(obj)):
            from torch.distributed.tensor import DTensor

            if issubclass(DTensor, unwrap(cls)):
                return wrap(True, provenance=result.provenance)
        return result

    return isinstance_lookaside


def tensor_class_checked(lookaside):
    """``isinstance`` of an input tensor answers for its class (``isinstance(w, nn.Parameter)``), which the prologue
    checks; a tensor the program computes is a plain ``torch.Tensor``. (``isinstance(x, torch.Tensor)``, true of
    every tensor, needs no check.)"""

    def isinstance_lookaside(obj, cls):
        result = lookaside(obj, cls)
        if not isinstance(result, WrappedValue) or not isinstance(unwrap(obj), TensorProxy):
            return result
        real, ucls = _eager_tensor(obj), unwrap(cls)
        answer = isinstance(real, ucls) if isinstance(real, torch.Tensor) else issubclass(real, ucls)
        if ucls is not torch.Tensor:
            _check_tensor_class(obj)
        return result if answer is result.value else wrap(answer, provenance=result.provenance)

    return isinstance_lookaside


def _eager_tensor(tensor: WrappedValue):
    """The input tensor a proxy stands for, or the class eager gives a computed one (DTensor's for a DTensor)."""
    if isinstance(tensor.original_value, torch.Tensor):
        return tensor.original_value
    if is_dtensor_proxy(tensor.value):
        from torch.distributed.tensor import DTensor

        return DTensor
    return torch.Tensor


def _check_tensor_class(tensor: WrappedValue) -> None:
    if isinstance(tensor.original_value, torch.Tensor):
        _checked_answer(tensor, "type", type(tensor.original_value))


def text_lookaside(builtin):
    """``str``/``repr``/``ascii``/``format`` (f-strings too) as eager Python shows the value: the digits of the
    symbolic numbers in it (values pinned), and a size (a tuple in traced code) as a ``torch.Size``."""
    shown = interpreter_needs_wrap(partial(_text_of_python_value, builtin, None))
    shown_as_size = interpreter_needs_wrap(partial(_text_of_python_value, builtin, torch.Size))

    def text(*args, **kwargs):
        return (shown_as_size if args and sizes.is_size(args[0]) else shown)(*args, **kwargs)

    return text


def _text_of_python_value(builtin, container, *args, **kwargs):
    if args:
        value = _python_values(args[0])
        args = (value if container is None else container(value), *args[1:])
    return builtin(*args, **kwargs)


def _python_values(x):
    """``x`` with the symbolic numbers in it (in tuples, lists and dicts) replaced by their pinned values, and
    thunder's dtypes and devices by torch's."""
    if type(x) in (tuple, list):
        return type(x)(_python_values(item) for item in x)
    if type(x) is dict:
        return {key: _python_values(value) for key, value in x.items()}
    return _as_torch(guard_recorder.python_value(x))


def _as_torch(value):
    """torch's dtype or device for thunder's (which traced code holds: ``torch.device(...)`` makes thunder's)."""
    if isinstance(value, dtypes.dtype):
        return dtypes.to_torch_dtype(value)
    if isinstance(value, devices.Device):
        return devices.to_torch_device(value)
    return value


def tensor_introspection(lookaside):
    """``x.shape.numel()`` and ``x.size().numel()`` (traced code sees a size as a tuple, which has no ``numel``),
    ``x.is_contiguous()`` and ``x.stride()`` of input tensors, ``x.is_inference()``, ``x.grad`` of input tensors
    without one (checked still None), storage and device attributes (:func:`_storage_attribute`), ``x.shape``
    marked a size, and in user code ``x.dtype`` as torch's dtype."""

    def getattr_lookaside(obj, name, *default):
        value, attr = unwrap(obj), unwrap(name)
        if isinstance(value, TensorProxy) and type(attr) is str:
            if attr in _INPUT_ANSWERS and value_guards.current():
                return wrap_const(_INPUT_ANSWERS[attr](obj))
            if attr in _STORAGE_ATTRIBUTES:
                return _storage_attribute(obj, attr)
            if attr == "data":  # (0.2.6: AttributeError)
                return _interpret_call(wrap_const(_data), obj)
            if attr == "grad" and (error := _check_grad(obj)) is not None:
                return do_raise(error)
            if attr == "dtype" and guard_recorder.user_code_is_calling():
                result = lookaside(obj, name, *default)
                if isinstance(result, WrappedValue):  # torch's dtype, which `x.dtype is torch.float32` compares
                    return wrap(_as_torch(unwrap(result)), provenance=result.provenance)
                return result
        elif isinstance(value, NumberProxy) and _python_number_attribute(value, attr):
            return _number_attribute(obj, attr)
        if attr == "numel" and sizes.is_size(obj) and all(isinstance(d, (int, IntegerProxy)) for d in value):
            return wrap_const(partial(functools.reduce, operator.mul, value, 1))
        if (method := tensor_methods.bind(obj, name)) is not None:
            return method
        result = lookaside(obj, name, *default)
        if attr == "shape" and isinstance(value, TensorProxy) and isinstance(result, WrappedValue):
            sizes.mark(result)  # (its wrapper may be one the interpreter made earlier, from another read)
        return result

    return getattr_lookaside


def _check_grad(tensor: WrappedValue) -> Exception | None:
    """An input tensor's ``.grad`` read by the code: None (``if p.grad is None: continue``) is checked to stay None;
    a gradient is checked as a tensor (0.2.6 unpacks it without a check under constant values: a program traced
    with a gradient ran with None). The error for a gradient thunder dropped (of a tensor that does not require
    grad: thunder read None, either cache), else None."""
    grad = tensor.value.grad
    if isinstance(grad, TensorProxy):
        get_jit_ctx().add_constraint((clang.check_tensor_shape_and_metadata, grad))
        return None
    real = tensor.original_value
    if isinstance(real, torch.Tensor) and real.grad is not None:
        return NotImplementedError(
            f"{value_guards.describe(tensor.provenance) or tensor.value.name}.grad at "
            f"{guard_recorder.source_location()}: the tensor has a gradient but does not require grad, and thunder "
            "keeps the gradients of tensors that require grad only; pass the gradient as an argument, or set "
            "requires_grad"
        )
    if isinstance(real, torch.Tensor):
        _checked_answer(tensor, "no grad", None)
    return None


_ABSENT = object()


def absence_checked(lookaside):
    """``getattr`` that finds no attribute (returning the default, or raising AttributeError for code that catches
    it) has the prologue check the attribute still missing: setting it later would change what the code does."""

    def getattr_lookaside(obj, name, *default):
        if not default:
            result = lookaside(obj, name)
            if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED and isinstance(
                get_interpreterruntimectx().curexc, AttributeError
            ):
                _check_presence(obj, name, False)
            return result
        missing = wrap_const(_ABSENT)  # (the default itself may be the attribute's value)
        result = lookaside(obj, name, missing)
        if result is not missing:
            return result
        _check_presence(obj, name, False)
        return default[0]

    return getattr_lookaside


def presence_checked(lookaside):
    """``hasattr`` whose answer the prologue checks (the code may branch on it without reading the attribute)."""

    def hasattr_lookaside(obj, name):
        result = lookaside(obj, name)
        if isinstance(result, WrappedValue) and type(result.value) is bool:
            _check_presence(obj, name, result.value)
        return result

    return hasattr_lookaside


def vars_lookaside(*args):
    """``vars(obj)``: the object's ``__dict__``, read through the interpreter (0.2.6 called vars natively: what the
    code then read of the dict had no provenance and went unchecked) and its keys checked; ``vars()`` is
    ``locals()``."""
    if not args:
        return _interpret_call(locals)
    if len(args) > 1:
        return do_raise(TypeError(f"vars expected at most 1 argument, got {len(args)}"))
    namespace = _interpret_call(getattr, args[0], wrap_const("__dict__"))
    if namespace is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        if isinstance(get_interpreterruntimectx().curexc, AttributeError):
            return do_raise(TypeError("vars() argument must have __dict__ attribute"))
        return namespace
    value_guards.check_namespace_read(namespace, guard_recorder.source_location)
    return namespace


def member_names_checked(lookaside, method: str):
    """thunder's lookaside of ``Module.named_parameters`` or ``named_buffers`` (``parameters()`` and ``buffers()``
    call them), which lists the members natively: the prologue checks the names listed, or a parameter registered
    later was left out of the program's loop over them (0.2.6, either cache)."""

    def named_members(module, *args, **kwargs):
        result = lookaside(module, *args, **kwargs)
        if not isinstance(result, INTERPRETER_SIGNALS) and isinstance(module, WrappedValue):
            uargs, ukwargs = tuple(map(unwrap, args)), {unwrap(k): unwrap(v) for k, v in kwargs.items()}
            value_guards.check_member_names(module, method, uargs, ukwargs, guard_recorder.source_location)
        return result

    return named_members


def _check_presence(obj, name, answer: bool) -> None:
    """Have the prologue check that ``hasattr(obj, name)`` still answers ``answer``, unless the program itself
    assigned or deleted the name before asking (the answer is then the program's, not the input's)."""
    read, effects = value_guards.current(), side_effects.current()
    if (
        read is None
        or not isinstance(obj, WrappedValue)
        or effects is not None
        and effects.wrote(obj.value, unwrap(name))
    ):
        return
    found = read.presence(obj.value, obj.provenance, unwrap(name), answer, guard_recorder.source_location)
    if found is not None:
        read.check(value_guards.checked(obj.value, obj.provenance), found)


def _python_number_attribute(number: NumberProxy, name: Any) -> bool:
    """Whether ``name`` is an attribute of the Python number (``n.real``, ``n.bit_length``) the proxy lacks."""
    return (
        type(name) is str
        and not hasattr(type(number), name)
        and hasattr(number.python_type, name)
        and guard_recorder.user_code_is_calling()
    )


def _number_attribute(wrapped, name: str):
    """``n.real`` and ``n.numerator`` of a real number are the number itself, ``imag`` and ``denominator`` its
    constants; any other attribute (``bit_length``, ``is_integer``, ``hex``) reads the value, pinned."""
    number = unwrap(wrapped)
    real = number.python_type in (int, float)
    if name == "real" and real or name == "numerator" and number.python_type is int:
        return wrapped
    if name == "imag" and real or name == "denominator" and number.python_type is int:
        return wrap_const(getattr(number.python_type(), name) if name == "imag" else 1)
    return wrap_const(getattr(guard_recorder.python_value(number), name))


def _python_type(obj):
    """``type(n)`` in the user's code is the Python type of the number traced (guarded for number inputs), and
    torch's type for thunder's dtypes and devices."""
    if isinstance(obj, (NumberProxy, dtypes.dtype, devices.Device)) and guard_recorder.user_code_is_calling():
        return obj.python_type if isinstance(obj, NumberProxy) else type(_as_torch(obj))
    return type(obj)


_wrapped_python_type = interpreter_needs_wrap(_python_type)


def type_lookaside(*args, **kwargs):
    """``type(x)`` as eager Python answers it: a number's Python type, ``torch.Size`` for a size, and a tensor's
    class (an input's, checked; ``torch.Tensor`` for one the program computes). An object's type is read as
    ``x.__class__``: what the code reads of it (``type(self).scale``) is checked like any value."""
    if len(args) != 1 or kwargs or not isinstance(args[0], WrappedValue):
        return _wrapped_python_type(*args, **kwargs)
    (obj,) = args
    value = obj.value
    if isinstance(value, (NumberProxy, dtypes.dtype, devices.Device)) or not guard_recorder.user_code_is_calling():
        return _wrapped_python_type(obj)
    if sizes.is_size(obj):
        return wrap_const(torch.Size)
    if isinstance(value, TensorProxy):
        real = _eager_tensor(obj)
        if not isinstance(real, torch.Tensor):
            return wrap_const(real)
        _check_tensor_class(obj)
        return wrap_const(type(real))
    if isinstance(value, Proxy):
        return _wrapped_python_type(obj)
    # (a new wrapper: `wrap` would return the one of an earlier read of the class, of another provenance)
    read_as = ProvenanceRecord(PseudoInst.LOAD_ATTR, [obj.provenance, wrap_const("__class__").provenance])
    return WrappedValue(type(value), provenance=read_as)


def python_isinstance(lookaside):
    def isinstance_lookaside(obj, cls):
        uobj = unwrap(obj)
        if isinstance(uobj, NumberProxy) and guard_recorder.user_code_is_calling():
            result = lookaside(obj, cls)
            if unwrap(result) is False and issubclass(uobj.python_type, unwrap(cls)):
                return wrap(True, provenance=result.provenance)
            return result
        stands_for = torch.Size() if sizes.is_size(obj) else _as_torch(uobj)
        if stands_for is not uobj and guard_recorder.user_code_is_calling():
            result = lookaside(obj, cls)
            if isinstance(result, WrappedValue):  # (else an exception: cls is not a type)
                return wrap(isinstance(stands_for, unwrap(cls)), provenance=result.provenance)
            return result
        return lookaside(obj, cls)

    return isinstance_lookaside
