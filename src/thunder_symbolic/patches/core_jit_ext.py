"""Patches of ``thunder/core/jit_ext.py``: record guards while tracing and put them in the prologue."""

from __future__ import annotations

import builtins
import contextvars
import functools
import operator
import types
from functools import partial
from typing import Any

import torch
from thunder.core import compile_data, devices, dtypes
from thunder.core.interpreter import (
    INTERPRETER_CALLBACKS,
    INTERPRETER_SIGNALS,
    ProvenanceRecord,
    PseudoInst,
    WrappedValue,
    _interpret_call,
    default_lookaside,
    do_raise,
    get_interpreterruntimectx,
    interpreter_needs_wrap,
    unwrap,
    wrap,
    wrap_const,
)
from thunder.core.jit_ext import EXT_FLAG_IS_MODULE_MEMBER_DICT, get_jit_ctx
from thunder.core.proxies import IntegerProxy, NumberProxy, Proxy, TensorProxy, variableify
from thunder.core.symbol import Symbol
from thunder.core.utils import is_hashable
from thunder.torch.experimental.dtensor_proxy import is_dtensor_proxy
from torch.fx._lazy_graph_module import _LazyGraphModule

from thunder import clang
from thunder_symbolic.activation.registry import patch
from thunder_symbolic.autodiff.autograd_apply import BUILTIN_APPLY_KEY, builtin_apply_owner
from thunder_symbolic.guards import algebra, refusals
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.guards.prologue import check_dtensor_layout, check_symbolic_guards, dtensor_layout
from thunder_symbolic.runtime.cache_option import constant_values
from thunder_symbolic.semantics import hf_masks, module_calls, numpy_numbers, side_effects, sizes, tensor_methods
from thunder_symbolic.semantics.number_ops import apply_number_op, sym_sum
from thunder_symbolic.semantics.opaque import interpreted, is_opaque, opaque
from thunder_symbolic.semantics.torch_composites import COMPOSITES

UPSTREAM = "Lightning-AI/lightning-thunder#463"


class _LookasideMap(dict):
    """thunder's general-jit lookaside table, extended by the functions marked
    :func:`thunder_symbolic.semantics.opaque.opaque`
    and by torch's builtin ``Function.apply`` (torch >= 2.13; see :mod:`thunder_symbolic.autodiff.autograd_apply`);
    logging,
    ``warnings.warn`` and ``print`` are made by the epilogue on every call (see
    :mod:`thunder_symbolic.semantics.side_effects`);
    transformers' masks are traced without vmap (:mod:`thunder_symbolic.semantics.hf_masks`); a draw
    from a Python random number generator, seeding a torch one and a clock's reading are refused (see
    :mod:`thunder_symbolic.guards.refusals`), a read of process state is checked (value_guards.reads_state)."""

    def get(self, fn, default=None):
        if side_effects.deferred(fn):
            return partial(side_effects.defer_call, fn)
        if (instead := hf_masks.lookaside(fn)) is not None:
            return partial(_interpret_instead, instead)
        found = dict.get(self, fn, None)
        if found is None and is_opaque(fn):
            return interpreter_needs_wrap(fn)
        if found is None and (owner := builtin_apply_owner(fn)) is not None:
            return partial(dict.__getitem__(self, BUILTIN_APPLY_KEY), wrap_const(owner))
        if found is None and (refused := refusals.refusal(fn)) is not None:
            return partial(_refuse, refused)
        if found is None and value_guards.reads_state(fn):
            return partial(_checked_state_read, fn)
        return default if found is None else found


def _interpret_instead(replacement, *args, **kwargs):
    return _interpret_call(wrap_const(replacement), *args, **kwargs)


def _refuse(refused, *args, **kwargs):
    return do_raise(refused(guard_recorder.source_location()))


def _checked_state_read(fn, *args, **kwargs):
    """A call reading process state (``torch.get_num_threads()``, ``ContextVar.get``): made natively, as 0.2.6 did,
    and made again by the prologue, whose check fails when the answer changed (0.2.6 reused the first answer)."""
    uargs = tuple(map(unwrap, args))
    try:
        result = fn(*uargs, **{unwrap(k): unwrap(v) for k, v in kwargs.items()})
    except Exception as e:
        return do_raise(e)
    read = value_guards.current()
    if read is not None:  # (no such call takes keywords: with any, it raised above)
        error = read.state_read(fn, uargs, result, guard_recorder.source_location)
        if error is not None:
            return do_raise(error)
    return wrap_const(result)


@patch(
    "thunder.core.jit_ext:_general_jit_lookaside_map",
    summary="guard recorders run natively, not interpreted; min/max of two numbers and torch.sym_max/min/sum stay "
    "symbolic; torch.eye is traced, and Tensor.unfold as thunder's primitive; isinstance(dtensor, DTensor) is True "
    "for DTensor proxies; setting an attribute of the jitted function or module itself, or of another object it "
    "was given that is not a module, is refused with an error naming the statement; in user code, type() and "
    "isinstance() of a symbolic number answer with its Python type, str/repr/format give its digits (pinned), in "
    "containers too; a shape (x.shape, x.size(), its slices and sums, torch.Size(...) of "
    "symbolic dims, which stays symbolic) is a torch.Size to type(), isinstance(), str/repr and .numel(); "
    "thunder's dtypes and devices are torch's to them too, and a tensor's dtype is torch's; "
    "torch.fx generates a lazy graph module's code natively; a custom Function's C apply (torch >= 2.13) "
    "reaches its lookaside, and Dynamo's autograd_function_apply its lookaside in torch >= 2.12's form; a "
    "tensor's methods (x.float()) are bound and called without interpreting thunder's lookup and partial call, "
    "a module without hooks is called as its forward and its members are read without interpreting torch's "
    "__getattr__ (thunder_symbolic.semantics.module_calls); "
    "a symbolic number has its Python type's attributes (n.real symbolic, n.bit_length() of the pinned value); "
    "vars(obj) reads obj.__dict__ through the interpreter and has its keys checked; type(obj) reads "
    "obj.__class__ (what is read of the class is checked); a draw from a Python random number generator is "
    "refused with SideEffectError; an lru_cache'd function runs the function it wraps, traced, and a "
    "cached_property is read from the object's cache or computed, traced, without storing it; the names "
    "named_parameters()/named_buffers() list are checked; torch's getters of process state "
    "(torch.get_num_threads()...) and ContextVar.get() are made again by the prologue and compared; reading a "
    "clock (time.time()) is refused with UncheckableValueError, seeding a torch generator (torch.manual_seed) "
    "with SideEffectError; a second store of an object's attribute in one trace is replayed by the epilogue; "
    "x.is_inference() is answered and checked; reversed() walks a ModuleList or Sequential by index; x.grad of a "
    "tensor with a gradient that does not require grad is refused; an input's x.stride() is answered and checked; "
    "torch.inference_mode() that changes the mode inside the function is refused; x.data is x.detach(); "
    "x.itemsize, x.element_size(), x.nbytes, x.is_cpu and x.is_meta are answered from the dtype, device and "
    "symbolic sizes, an input's x.layout and x.is_sparse answered and checked",
    why=(
        "Guard recorders run inside NumberProxy methods that traced code reaches; interpreting them would trace them. "
        "0.2.6's isinstance answers for a DTensor proxy as for a plain tensor, so code that unwraps DTensors "
        "(`w.to_local() if isinstance(w, DTensor) else w`) took the wrong branch and failed. And it applies `self.step "
        "+= 1` in the epilogue for submodules only: on the jitted module itself it was silently dropped (the epilogue "
        "has no handle on it), as on any other object (`cfg.seen = x.shape[0]` was done once, while tracing, leaving a "
        "proxy in `cfg.seen` under symbolic values). `isinstance(n, int)` was False and `str(x.shape[0])` the proxy's "
        "description: wrong branches and strings from the first call. A traced shape is a tuple: `isinstance(x.shape, "
        "torch.Size)` was False and `type(x.size())` tuple, under either cache option; and `torch.Size([x.shape[0], "
        "-1])` pinned the size (a compile per length). Dtypes and devices were thunder's objects: `x.dtype is "
        "torch.float32` and `isinstance(x.device, torch.device)` were False, `str(x.dtype)` 'thunder.dtypes.float32', "
        "`x.dtype.is_floating_point` an error. From torch 2.12 split_module (thunderfx) builds lazy graph modules "
        "whose first call generates their code: interpreted, that failed on every graph ('MappingKeysView' has no "
        "len()); and its autograd_function_apply lost `args_tensor_mask` (KeyError for any custom autograd.Function "
        "under thunderfx). 0.2.6 has no operator for torch.eye ('not yet supported'), and ran F.unfold for "
        "Tensor.unfold (see thunder_symbolic.semantics.torch_composites). Each tensor method call interpreted "
        "thunder's "
        "emulation of attribute lookup, TensorProxy.__getattr__ and a partial's call: about a fifth of a compile of "
        "the inference benchmark's prefill (see thunder_symbolic.semantics.tensor_methods); each module call "
        "interpreted torch's "
        "`Module.__call__` and its eight hook tests, a third of a small decoder's tracing, and each member read its "
        "`__getattr__`, whose membership tests had every attribute of the module checked. `n.real`, `n.bit_length()` "
        "or `s.is_integer()` of a symbolic number failed with AttributeError. `vars` ran natively: what the code read "
        "of the dict it returned went unchecked (`vars(cfg).get('bias')` answered for the first call), as did "
        "`type(o).scale`; `random.random()` was drawn once, while tracing, and returned on every call. `for p in "
        "self.parameters()` missed a parameter registered later, and `torch.get_num_threads()`, "
        "`torch.are_deterministic_algorithms_enabled()`, a ContextVar's value or `time.time()` answered for the first "
        "call; `torch.manual_seed(0)` failed in the epilogue (or crashed the interpreter). `if self.total is None: "
        "self.total = zeros` then `self.total = self.total + t` left zeros in `self.total` after the call. "
        "`x.is_inference()` was the first call's answer (constant values) or failed (symbolic values); "
        "`reversed(self.layers)` raised 'object is not reversible'. thunder drops the gradient of a tensor that does "
        "not require grad: `x.grad` read None (either cache). `x.stride()`, `x.itemsize`, `x.nbytes` and `x.layout` "
        "(with `is_sparse`, `is_cpu`, `is_meta`) were AttributeErrors, and `x.element_size()` a torch fallback at the "
        "first call's shape. `with torch.inference_mode():` inside the function was entered while tracing only: what "
        "it computed required grad and was no inference tensor (either cache)."
    ),
    upstream=UPSTREAM,
)
def _lookaside_map(original):
    lookasides = _LookasideMap(original)
    for fn, op in ((torch.sym_max, "sym_max"), (torch.sym_min, "sym_min")):
        lookasides[fn] = interpreter_needs_wrap(partial(apply_number_op, op))
    for fn, op in ((builtins.max, "max"), (builtins.min, "min")):
        lookasides[fn] = interpreter_needs_wrap(partial(_min_max_of_two_numbers, fn, op))
    lookasides[torch.sym_sum] = interpreter_needs_wrap(sym_sum)
    for fn, composite in COMPOSITES.items():
        lookasides[fn] = interpreter_needs_wrap(composite)
    for fn in (str, repr, ascii, format):
        lookasides[fn] = _text_lookaside(fn)
    lookasides[type] = _type_lookaside
    lookasides[torch.Size] = sizes.size_lookaside
    lookasides[getattr] = _absence_checked(_tensor_introspection(original[getattr]))
    lookasides[hasattr] = _presence_checked(original[hasattr])
    lookasides[vars] = _vars_lookaside
    lookasides[reversed] = _reversed_lookaside
    lookasides[torch.autograd.grad_mode.inference_mode.__enter__] = _entering_inference_mode
    for method in ("named_parameters", "named_buffers"):
        if (fn := getattr(torch.nn.Module, method)) in original:
            lookasides[fn] = _member_names_checked(original[fn], method)
    lookasides[functools._lru_cache_wrapper.__call__] = _uncached_call
    lookasides[functools.cached_property.__get__] = _cached_property_get
    lookasides[functools.partial.__call__] = tensor_methods.call
    lookasides[torch.nn.Module._wrapped_call_impl] = module_calls.call
    lookasides[torch.nn.Module.__getattr__] = module_calls.member
    if isinstance in original:
        answering = _tensor_class_checked(_dtensor_aware_isinstance(original[isinstance]))
        lookasides[isinstance] = _python_isinstance(answering)
    if object.__setattr__ in original:
        lookasides[object.__setattr__] = _assigning(original[object.__setattr__])
    if dict.__setitem__ in original:
        lookasides[dict.__setitem__] = _replaying_attribute_stores(original[dict.__setitem__])
    lookasides[setattr] = _recording_native_stores(original[setattr])  # (STORE_ATTR: `Cfg.scale = 2`)
    lookasides[_LazyGraphModule.real_recompile] = interpreter_needs_wrap(_LazyGraphModule.real_recompile)
    hop = torch.ops.higher_order.autograd_function_apply
    lookasides[hop] = _autograd_function_apply_without_ctx(original[hop])
    return lookasides


def _entering_inference_mode(context):
    """``with torch.inference_mode(mode):`` in traced code: refused where it changes the mode (thunder entered it
    while tracing only); where it does not, entered, and the mode checked by the prologue as a state read."""
    mode = _interpret_call(getattr, context, wrap_const("mode"))  # (set by the interpreted __init__)
    if mode is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return mode
    mode = unwrap(mode)
    if mode != _inference_mode_read():
        return do_raise(refusals.inference_mode_refused(mode, guard_recorder.source_location()))
    return _interpret_call(wrap_const(_INFERENCE_MODE_ENTER), context)


# (interpreted: the context's attributes are the interpreter's)
_INFERENCE_MODE_ENTER = interpreted(torch.autograd.grad_mode.inference_mode.__enter__)


def _returns_output_tuple(graph: torch.fx.GraphModule) -> bool:
    """Whether the forward graph returns ``(outputs, saved)`` with ``outputs`` a tuple (torch >= 2.12 packs them)."""
    (output,) = graph.graph.find_nodes(op="output")
    returned = output.args[0]
    return isinstance(returned, (tuple, list)) and isinstance(returned[0], (tuple, list))


def _autograd_function_apply_without_ctx(lookaside):
    """thunder's lookaside for Dynamo's ``autograd_function_apply``, also for torch >= 2.12's form of it.

    Up to 2.11 the forward and backward graphs take a ``ctx`` first and the call says which arguments are
    tensors (``args_tensor_mask``); from 2.12 the graphs take no ``ctx`` and every argument is passed on.
    The newer form is put in the older one: graphs that accept and drop a ``ctx``, and a mask that keeps
    every argument."""

    def takes_ctx(wrapped_graph):
        """The graph as a function that accepts and drops a ``ctx``. Made here, it has a provenance of its own:
        with the graph module's, the prologue checked its identity (a new function per trace) on every call."""
        graph = unwrap(wrapped_graph)

        def with_ctx(ctx, *args):
            return graph(*args)

        return wrap(with_ctx, provenance=ProvenanceRecord(PseudoInst.OPAQUE, [wrapped_graph.provenance]))

    def autograd_function_apply(fwd, bwd, *fwd_args, **fwd_kwargs):
        if "args_tensor_mask" in fwd_kwargs:
            return lookaside(fwd, bwd, *fwd_args, **fwd_kwargs)
        fwd_kwargs["args_tensor_mask"] = wrap_const([True] * len(fwd_args))
        returns_tuple = _returns_output_tuple(unwrap(fwd))
        fwd, bwd = takes_ctx(fwd), takes_ctx(bwd)
        result = lookaside(fwd, bwd, *fwd_args, **fwd_kwargs)
        if result is INTERPRETER_SIGNALS.EXCEPTION_RAISED or not returns_tuple or isinstance(unwrap(result), tuple):
            return result
        # thunder's operator returns a lone output bare; the graph indexes the tuple the forward returned
        return wrap((unwrap(result),), provenance=result.provenance)

    return autograd_function_apply


@patch(
    "thunder.core.jit_ext:general_jit_lookaside",
    summary="a torch.device index is pinned; torch.topk, sort, max/min with a dim... "
    "return torch's named tuples; var/std's `unbiased` is their `correction`; torch._grouped_mm takes `offs=`; "
    "thunder's operators take numpy numbers as Python numbers, numpy functions pinned values of symbolic numbers",
    why=(
        "`torch.device('cuda', rank)` bakes the index into the trace, unguarded under symbolic values. thunder's "
        "operators return plain tuples: `torch.topk(x, 2).values` and `x.max(1).indices` failed (either cache), "
        "and take only `correction`: `x.var(1, unbiased=False)` failed. thunder's _grouped_mm names torch's `offs` "
        "and `out_dtype` `offsets` and `dtype`: `torch._grouped_mm(x, w, offs=offsets)` failed with a TypeError. "
        "`x * np.float32(0.5)`, `torch.full(shape, np.int64(3))` and `np.sqrt(d)` of a float argument failed (see "
        "thunder_symbolic.semantics.numpy_numbers)."
    ),
    upstream=UPSTREAM,
)
def _general_jit_lookaside(original):
    adapters = _adapters_by_id()

    def general_jit_lookaside(fn, *args, **kwargs):
        if (effects := side_effects.current()) is not None:
            effects.interpreting()
        if fn is torch.device:  # thunder bakes the index in (and pins it itself only under constant values)
            for arg in (*args, *kwargs.values()):
                guard_recorder.python_value(unwrap(arg))
        if numpy_numbers.is_numpy_function(fn) and any(isinstance(unwrap(a), NumberProxy) for a in args):
            return numpy_numbers.of_pinned_numbers(fn)
        lookaside = original(fn, *args, **kwargs)
        if callable(lookaside) and any(map(numpy_numbers.is_numpy_number, (*args, *kwargs.values()))):
            if _thunder_operator(fn):
                lookaside = numpy_numbers.taking_python_numbers(lookaside)
        known, adapt = adapters.get(id(fn), (None, None))
        return adapt(lookaside) if known is fn and callable(lookaside) else lookaside

    return general_jit_lookaside


def _thunder_operator(fn) -> bool:
    """Whether ``fn`` is thunder's operator or a torch function thunder maps to one."""
    from thunder.torch import _torch_to_thunder_function_map as thunder_operators

    return isinstance(fn, Symbol) or is_hashable(fn) and fn in thunder_operators


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
            return _inference_mode_read()
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


def _inference_mode_read() -> bool:
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


def _recording_native_stores(lookaside):
    """``setattr`` of a class the program was given or reads (``Cfg.scale = 2``, ``cls.FOO = True`` in a
    classmethod), or of an object whose type's ``__setattr__`` is C code (``types.SimpleNamespace``), is made
    natively, as thunder makes it (reads after it see it), and recorded for the replay (see
    :mod:`thunder_symbolic.semantics.side_effects`): put back when the trace ends, made again by every call's epilogue.
    Other objects' attributes go to thunder's copy of their ``__dict__`` (``object.__setattr__``'s lookaside), from
    which the replay takes them."""

    def setattr_lookaside(obj, name, value):
        effects, read = side_effects.current(), value_guards.current()
        if (
            effects is None
            or read is None
            or isinstance(obj.value, Proxy)
            or not _native_setattr(type(obj.value))
            or not read.reaches(obj.provenance)
        ):
            return lookaside(obj, name, value)
        uname = unwrap(name)
        effects.store("attr", obj, obj.provenance, uname, value)
        try:  # (made here: thunder's own call of the C setattr took a tensor value for an operator to trace)
            setattr(obj.value, uname, value.value)
        except Exception as e:
            return do_raise(e)
        obj.attribute_wrappers[uname] = value
        return wrap_const(None)

    return setattr_lookaside


def _native_setattr(cls: type) -> bool:
    setter = getattr(cls, "__setattr__", None)
    return isinstance(setter, types.WrapperDescriptorType) and setter is not object.__setattr__


_assigned: contextvars.ContextVar[WrappedValue | None] = contextvars.ContextVar(
    "thunder_symbolic_assigned", default=None
)


def _assigning(lookaside):
    """thunder's lookaside of ``object.__setattr__``, which stores through ``obj.__dict__.__setitem__``: the object
    being assigned to is published for :func:`_replaying_attribute_stores` and noted for the replay. thunder also
    gives the object's path a proxy, for its own epilogue store (which the replay replaces): left on the path, the
    prologue took it for one it had unpacked when it unpacked a value read through that object (KeyError)."""

    def object_setattr(obj, name, value):
        if (effects := side_effects.current()) is not None:
            effects.assigning(obj, unwrap(name))
        had_proxy = getattr(obj.provenance, "proxy", None) is not None
        token = _assigned.set(obj)
        try:
            return lookaside(obj, name, value)
        finally:
            _assigned.reset(token)
            if not had_proxy and getattr(obj.provenance, "proxy", None) is not None:
                obj.provenance.proxy = None

    return object_setattr


def _replaying_attribute_stores(lookaside):
    """thunder's lookaside of ``dict.__setitem__``, which has the epilogue replay a store into a dict flagged as an
    object's member dict. thunder's ``object.__setattr__`` flags the wrapper of ``obj.__dict__`` it reads, then
    stores through a bound method of the dict that wrapper holds (thunder's copy, after a first store), which the
    interpreter wraps anew, unflagged: a second assignment of a name in one trace (`if self.cache is None:
    self.cache = zeros; self.cache = self.cache + x`) was dropped, the epilogue setting the first value (0.2.6,
    either cache). Such a store goes to the flagged wrapper."""

    def dict_setitem(d, key, value):
        obj = _assigned.get()
        if obj is not None and not d.provenance.ext_flag & EXT_FLAG_IS_MODULE_MEMBER_DICT:
            members = _interpret_call(getattr, obj, wrap_const("__dict__"))
            if isinstance(members, WrappedValue) and unwrap(members) is unwrap(d):
                members.provenance.ext_flag |= EXT_FLAG_IS_MODULE_MEMBER_DICT
                d = members
        return lookaside(d, key, value)

    return dict_setitem


def _with_thunder_operators(fns) -> list:
    """``fns`` (torch functions and tensor methods) that thunder traces, and the thunder operators they map to."""
    from thunder.torch import _torch_to_thunder_function_map as thunder_operators

    return [key for fn in fns if fn in thunder_operators for key in (fn, thunder_operators[fn])]


def _adapters_by_id() -> dict[int, tuple[Any, Any]]:
    """``id -> (function, adapter of its lookaside)`` for the torch functions (and their thunder operators:
    thunder's symbols hash by their fields, hence ids) whose arguments or result thunder's operators take or
    give in another form: var/std's ``unbiased``, the named tuples of ``torch.return_types``
    (``torch.topk``, ``Tensor.sort``, ``torch.max`` with a dim...) and ``torch._grouped_mm``'s keywords."""
    adapters = {}
    for name in dir(torch.return_types):
        structseq = getattr(torch.return_types, name)
        if not (isinstance(structseq, type) and hasattr(structseq, "n_fields")):
            continue
        owner, attribute = (torch.linalg, name.removeprefix("linalg_")) if name.startswith("linalg_") else (torch, name)
        fns = (getattr(owner, attribute, None), getattr(torch.Tensor, name, None))
        for key in _with_thunder_operators(fn for fn in fns if fn is not None):
            adapters[id(key)] = (key, partial(_returning_structseq, structseq=structseq))
    names = ("var", "std", "var_mean", "std_mean")
    fns = (getattr(owner, name) for name in names for owner in (torch, torch.Tensor) if hasattr(owner, name))
    for key in _with_thunder_operators(fns):
        adapters[id(key)] = (key, _taking_unbiased)
    if hasattr(torch, "_grouped_mm"):
        for key in _with_thunder_operators([torch._grouped_mm]):
            adapters[id(key)] = (key, partial(_renaming_keywords, names={"offs": "offsets", "out_dtype": "dtype"}))
    return adapters


def _renaming_keywords(lookaside, names: dict[str, str]):
    """torch's keywords for arguments that thunder's operator names otherwise (``torch._grouped_mm``'s ``offs``
    is its ``offsets``)."""

    def renamed_lookaside(*args, **kwargs):
        return lookaside(*args, **{names.get(name, name): value for name, value in kwargs.items()})

    return renamed_lookaside


def _taking_unbiased(lookaside):
    def unbiased_lookaside(*args, **kwargs):
        args, kwargs = _unbiased_as_correction(args, kwargs)
        return lookaside(*args, **kwargs)

    return unbiased_lookaside


def _unbiased_as_correction(args, kwargs) -> tuple[tuple, dict]:
    """torch's older forms of var/std (``var(x, unbiased)``, ``var(x, dim, unbiased, keepdim)``,
    ``unbiased=``) in the form thunder's operators take (``correction=``)."""

    def is_bool(wrapped) -> bool:
        return algebra.python_type(unwrap(wrapped)) is bool

    if "unbiased" in kwargs:
        kwargs = dict(kwargs)
        unbiased = kwargs.pop("unbiased")
    elif len(args) == 2 and is_bool(args[1]):
        args, unbiased = args[:1], args[1]
    elif len(args) in (3, 4) and is_bool(args[2]):
        if len(args) == 4:
            kwargs = {**kwargs, "keepdim": args[3]}
        args, unbiased = args[:2], args[2]
    else:
        return args, kwargs
    return args, {**kwargs, "correction": wrap_const(int(guard_recorder.python_value(unwrap(unbiased))))}


def _returning_structseq(lookaside, structseq):
    """thunder's operators return plain tuples: ``torch.topk(x, 2).values`` failed ('tuple' object has no
    attribute 'values'); the tuple becomes the named tuple eager returns."""

    def structseq_lookaside(*args, **kwargs):
        result = lookaside(*args, **kwargs)
        value = unwrap(result)
        if type(value) is tuple and len(value) == structseq.n_fields:
            return wrap(structseq(value), provenance=result.provenance)
        return result

    return structseq_lookaside


def _dtensor_aware_isinstance(lookaside):
    def isinstance_lookaside(obj, cls):
        result = lookaside(obj, cls)
        if unwrap(result) is False and is_dtensor_proxy(unwrap(obj)):
            from torch.distributed.tensor import DTensor

            if issubclass(DTensor, unwrap(cls)):
                return wrap(True, provenance=result.provenance)
        return result

    return isinstance_lookaside


def _tensor_class_checked(lookaside):
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


def _min_max_of_two_numbers(builtin, op, *args, **kwargs):
    """``min(a, b)``/``max(a, b)`` of numbers stays symbolic (``min(k, 3)``, not a guard on ``k < 3``).

    Of an int and a float, Python returns one of the operands, whose type then depends on the values
    (``max(n, 2.5)`` is an int for n = 3, a float for n = 2): the comparison that decides is guarded.
    """
    numbers = (int, float, NumberProxy)
    if len(args) == 2 and not kwargs and all(isinstance(a, numbers) for a in args):
        a, b = args
        if algebra.python_type(a) is bool or algebra.python_type(b) is bool:
            return builtin(*args, **kwargs)
        if algebra.python_type(a) is not algebra.python_type(b):
            return b if bool(b > a if op == "max" else b < a) else a
        return apply_number_op(op, *args)
    return builtin(*args, **kwargs)


def _text_lookaside(builtin):
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


def _tensor_introspection(lookaside):
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


def _absence_checked(lookaside):
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


def _presence_checked(lookaside):
    """``hasattr`` whose answer the prologue checks (the code may branch on it without reading the attribute)."""

    def hasattr_lookaside(obj, name):
        result = lookaside(obj, name)
        if isinstance(result, WrappedValue) and type(result.value) is bool:
            _check_presence(obj, name, result.value)
        return result

    return hasattr_lookaside


def _vars_lookaside(*args):
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


def _member_names_checked(lookaside, method: str):
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


def _reversed_lookaside(seq):
    """``reversed`` of an object that has ``__len__`` and ``__getitem__`` but neither ``__reversed__`` nor a place among
    ``collections.abc.Sequence`` (a ModuleList, a Sequential): Python walks it backwards by index, and so does this
    (its length read once, as Python does); 0.2.6 raised "object is not reversible" (either cache). Anything else
    goes to thunder's lookaside."""
    kind = type(unwrap(seq))
    if hasattr(kind, "__reversed__") or not (hasattr(kind, "__len__") and hasattr(kind, "__getitem__")):
        return default_lookaside(reversed)(seq)
    return _interpret_call(_walked_backwards, seq)


def _walked_backwards(seq):
    length = len(seq)

    def items():
        for i in range(length - 1, -1, -1):
            yield seq[i]

    return items()


def _uncached_call(wrapper, *args, **kwargs):
    """A ``functools.lru_cache``/``functools.cache`` function called in traced code runs the function it wraps,
    traced (as torch.compile does; caching promises a pure function): 0.2.6 called the cache natively, and a
    tensor it returned for a size (`causal_mask(x.shape[0])`) failed in the prologue ('Exception occured
    unpacking object')."""
    wrapped = _interpret_call(getattr, wrapper, wrap_const("__wrapped__"))
    if wrapped is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return wrapped
    return _interpret_call(wrapped, *args, **kwargs)


def _cached_property_get(prop, instance, owner=None):
    """A ``functools.cached_property`` read in traced code: the value the object has cached, or the function's value,
    traced and not stored (0.2.6 stored the traced value in the object: a proxy under symbolic values, which eager
    code then read). A plain value is read through the attribute, which the prologue reads again natively on each
    call and checks, as any property's: eager's value, cached or not (and cached as eager does). A value the
    program computes (a proxy) is not read again: the prologue checks that the object still lacks the name
    instead, so that a value eager caches later is the one read."""
    if unwrap(instance) is None:
        return prop
    namespace = _interpret_call(getattr, instance, wrap_const("__dict__"))
    if namespace is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return namespace
    name = wrap_const(unwrap(prop).attrname)
    if name.value in namespace.value:
        return _interpret_call(operator.getitem, namespace, name)
    result = _interpret_call(wrap_const(unwrap(prop).func), instance)
    read = value_guards.current()
    if read is not None and isinstance(result, WrappedValue) and isinstance(result.value, Proxy):
        if (found := read.not_cached(namespace.provenance, name.value, guard_recorder.source_location)) is not None:
            read.check(value_guards.checked(namespace.value, namespace.provenance), found)
    return result


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


def _type_lookaside(*args, **kwargs):
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


def _python_isinstance(lookaside):
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


def _generate_lazy_graph_code(fn) -> None:
    """From torch 2.12 thunderfx's graph modules generate their code on their first call. Generated while
    tracing, the trace would have read the lazy ``forward`` (and guarded it); generated now, it reads the real one."""
    module = fn if isinstance(fn, torch.nn.Module) else getattr(fn, "__self__", None)
    if isinstance(module, torch.nn.Module):
        for submodule in module.modules():
            _LazyGraphModule.force_recompile(submodule)


@patch(
    "thunder.core.jit_ext:thunder_general_jit",
    summary="traces under a guard recorder when the cache option is symbolic values, under a recorder of "
    "the Python values read and of the side effects (both cache options); what tracing changed natively in "
    "pre-existing state is put back when it ends (the epilogue replays it); refuses a trace that read a value "
    "natively that no check can prove unchanged (an iterator); lazy "
    "graph modules (thunderfx on torch >= 2.12) generate their code before tracing",
    why=(
        "The recorder collects what the trace observed of symbolic numbers, to be re-checked by the prologue. "
        "A function that appends to a global list or fills a global dict changed it once, while tracing: "
        "the cached program never did it again (0.2.6 left proxies in a memo dict, failing the next trace)."
    ),
    upstream=UPSTREAM,
)
def _thunder_general_jit(original):
    def thunder_general_jit(fn, args, kwargs, /, **options):
        name = getattr(fn, "__qualname__", type(fn).__name__)
        _generate_lazy_graph_code(fn)
        with value_guards.recording_values(fn) as read, side_effects.recording():
            try:
                if compile_data.using_symbolic_values():
                    with guard_recorder.recording():
                        result = original(fn, args, kwargs, **options)
                else:
                    result = original(fn, args, kwargs, **options)
            finally:
                read.restore_containers()  # (the replay makes their changes, on every call)
            read.check_checkable(name)
        return result

    return thunder_general_jit


@patch(
    "thunder.core.jit_ext:general_jit_callbacks",
    summary="every None, dtype, callable, enum, container or object read from the arguments, globals, closures, "
    "module attributes or Python modules holding state gets a prologue check (identity; type and length; dict "
    "keys; an object's type)",
    why=(
        "0.2.6 checks only tensors and numbers: a program traced with `mask=None`, `dtype=torch.float64`, "
        "`act=torch.relu`, a tuple of 2 sizes, a dict without a 'bias' key or an object of another class was "
        "reused when they changed (both cache options): silently wrong results."
    ),
    upstream="Lightning-AI/lightning-thunder#2779",
)
def _general_jit_callbacks(original):
    wrap_callback = original[INTERPRETER_CALLBACKS.WRAP_CALLBACK]

    def guarding_wrap_callback(value):
        result = wrap_callback(value)
        read = value_guards.current()
        if read is not None and not isinstance(result, INTERPRETER_SIGNALS):  # (a sharp edge returns the value)
            uvalue = value.value
            if uvalue is None and (as_attribute := value_guards.none_member_read(value.provenance)) is not None:
                value.provenance = as_attribute
            found = read.guard(uvalue, value.provenance, guard_recorder.source_location)
            if found is not None:
                read.check(value_guards.checked(uvalue, value.provenance), found)
                if type(uvalue) in (tuple, list, dict) and value.original_value is value.nothing and _keyed(uvalue):
                    # Builtins (sum, max, sorted, torch.tensor) receive the container itself: give them one of
                    # proxies, as thunder does for a symbol's arguments, or they compute with unchecked values.
                    value.track_items()
                    items = value.item_wrappers.values() if type(uvalue) is dict else value.item_wrappers
                    for item in items:
                        guarding_wrap_callback(item)  # as if read: tensors and numbers become proxies
                    get_jit_ctx().proxify(value)
                    read.watch_copy(uvalue, value)
        return result

    return {**original, INTERPRETER_CALLBACKS.WRAP_CALLBACK: guarding_wrap_callback}


def _keyed(container) -> bool:
    """Whether the prologue can read each item of ``container`` by its key: a dict's keys must be ints or strs (the
    only constants thunder's unpacking takes); an item read by another key (`d[h]`, a user object) keeps the path
    of that key's own read."""
    return type(container) is not dict or all(type(key) in (int, str) for key in container)


@patch(
    "thunder.core.jit_ext:JitCtx.proxify",
    summary="number arguments become guard leaves; module number attributes and str inputs are pinned by value "
    "(a str stays a str to the traced code); DTensor inputs have their spec checked",
    why=(
        "0.2.6 registers number and str inputs under symbolic values without any check, so a float "
        "reused an int trace and a different str reused a trace branching on the old one; its str proxy "
        "failed `int(s)`, `s + '!'`, `s * 2`, `s < 'b'` and made `repr(s)` \"<StringProxy '2'>\"; and it checks "
        "a DTensor input's mesh and placements only under constant values (a wrong result when they change)."
    ),
    upstream=f"{UPSTREAM}, #2779, #2795",
)
def _proxify(original):
    def proxify(self, value):
        if compile_data.using_symbolic_values() and (
            isinstance(value.value, (int, float, complex))
            and not _rooted_in_arguments(value.provenance)
            or _looked_at_by_python(value.value)
        ):
            # A number attribute of the module (a layer index, a config value): constant, as
            # torch.compile treats module attributes, and pinned by value in the prologue. So are bools
            # (`flag is True` needs the real object), int enums, slices and strs: Python looks at what they are.
            with constant_values():
                return original(self, value)
        p = original(self, value)
        if compile_data.using_symbolic_values() and is_dtensor_proxy(p):
            # 0.2.6 checks a DTensor input's spec (mesh, placements) under constant values only: a program
            # traced for Shard(0) was reused for a Replicate input of the same shape. Its check compares the
            # spec's repr, sizes included, and unpacks the local tensor again under a fresh name, which can
            # shadow the local tensor the guards read: the sizes are left to the tensor checks and guards.
            self.add_constraint((check_dtensor_layout, p, dtensor_layout(p.spec._o)))
        recorder = guard_recorder.current()
        if recorder is None or algebra.is_symbolic(p) or getattr(p, "history", None) is None:
            return p
        if isinstance(p, NumberProxy):
            recorder.add_number_input(p)
        return p

    return proxify


def _looked_at_by_python(value) -> bool:
    """Bools, int/float subclasses (enums), slices and strs: Python code tests their identity, type, fields or
    text (a str proxy in user code failed `int(s)`, `s + "!"`, `s < "b"` and gave its own `repr`)."""
    numbers = (int, float, complex)
    return isinstance(value, (bool, slice, str)) or isinstance(value, numbers) and type(value) not in numbers


def _rooted_in_arguments(provenance) -> bool:
    """Whether a value comes from the call's arguments (rather than from the jitted module itself)."""
    while provenance.inputs:
        provenance = provenance.inputs[0]
    return provenance.inst in (PseudoInst.INPUT_ARGS, PseudoInst.INPUT_KWARGS)


@patch(
    "thunder.core.jit_ext:propagate_constraints",
    summary="under symbolic values, turns the recorded guards into one prologue check instead of value pins",
    why=(
        "0.2.6 pins the exact value of int inputs that reach a branch (one compile per value) and "
        "cannot reach tensor dims at all (its walk stops at prims.shape), so size branches went unguarded."
    ),
    upstream=UPSTREAM,
    replaces=True,
)
def _propagate_constraints(original):
    def propagate_constraints(ctx, inputs, intermediates, computation_trace):
        """Replaces ``jit_ext.propagate_constraints`` under symbolic values (the original runs otherwise).

        Wrapping cannot work: the original turns every branch into exact-value pins of number inputs,
        which is what must not happen for predicate guards. The checks of Python values (both cache
        options: 0.2.6 checks none) join the prologue here too, in one call.
        """
        read = value_guards.current()
        for constraint in read.constraints() if read is not None else ():
            ctx.add_constraint(constraint)
        recorder = guard_recorder.current()
        if recorder is None:
            return original(ctx, inputs, intermediates, computation_trace)
        inputs_by_id = {id(p): p for p in (*recorder.tensor_inputs, *recorder.number_inputs)}
        recorder.final_names = {i: ctx._proxy_swapmap.get(variableify(p), p).name for i, p in inputs_by_id.items()}
        guards = recorder.conditions()
        if not guards:
            return None
        params = list({id(leaf): leaf for g in guards for leaf in g.condition.leaves()}.values())
        final = {id(p): ctx._proxy_swapmap.get(variableify(p), p).name for p in params}
        names = tuple(final[id(p)] for p in params)
        rendered = tuple((g.condition.render(lambda p: final[id(p)]), g.where) for g in guards)
        ctx.add_constraint((check_symbolic_guards, names, rendered, *params))
        return None

    return propagate_constraints


@patch(
    "thunder.core.jit_ext:process_recorded_modifications",
    summary="the epilogue replays every change the trace made to Python state that existed before the call "
    "(thunder_symbolic.semantics.side_effects): attributes of any object (the jitted module itself, plain objects, "
    "classes), lists, dicts and sets read from the inputs, globals and closure cells, new objects stored there, "
    "logging and warnings; module buffers stay thunder's; a module the program makes keeps its own buffers",
    why=(
        "0.2.6 applies stores to the attributes of submodules only (of values it can print), drops those to the "
        "jitted module and to other objects, and leaves list and dict changes, globals and `nonlocal`s made once, "
        "while tracing, with proxies in them: `self.step += 1`, `G.append(t)` or transformers' DynamicCache (its "
        "layers list grows in `update`) were wrong on every later call. torch.compile replays them (Dynamo's "
        "side_effects.py)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _process_recorded_modifications(original):
    def process_recorded_modifications(ctx, epilogue_trace):
        read, effects = value_guards.current(), side_effects.current()
        member_stores = {}
        for members in list(ctx._additional_outputs):
            record = members.provenance
            if record.inst is not PseudoInst.LOAD_ATTR or len(record.inputs) != 2:
                continue
            if record.inputs[1].value == "__dict__":
                stores = ctx._additional_outputs.pop(members)
                member_stores[members] = [(unwrap(key), value) for _, _, key, value in stores]
            elif read is not None and not read.existed(record.inputs[0]):
                # A module the program made (`loss = nn.CrossEntropyLoss()` registers its buffers): its own state,
                # which thunder failed on (AssertionError: it looked for the module among the jitted one's).
                del ctx._additional_outputs[members]
        original(ctx, epilogue_trace)
        if read is None or effects is None:
            return
        builder = side_effects.Builder(read, effects.known)
        side_effects.collect(builder, effects, read.watched, member_stores)
        side_effects.emit(builder, epilogue_trace)

    return guard_recorder.unobserved(process_recorded_modifications)


@patch(
    "thunder.core.jit_ext:build_value_from_wrapped",
    summary="an object the program made and returns (a class defined in Python, not a dataclass) is made anew by the "
    "epilogue on every call, with the call's values (thunder_symbolic.semantics.side_effects.made_anew); runs with "
    "guard "
    "recording paused",
    why=(
        '0.2.6 cannot return such an object ("unhandled value of type DynamicCache": any transformers model called '
        "with its default use_cache=True). It runs after the user's program was traced: what it does with the "
        "proxies is not an observation of that program."
    ),
    upstream=UPSTREAM,
)
def _build_value_from_wrapped(original):
    def build_value_from_wrapped(wrapped):
        read, effects = value_guards.current(), side_effects.current()
        if (
            read is not None
            and effects is not None
            and not hasattr(wrapped, "anyproxy")
            and side_effects.returnable(wrapped.value, wrapped.provenance)
        ):
            return side_effects.made_anew(wrapped, read, effects)
        return original(wrapped)

    return guard_recorder.unobserved(build_value_from_wrapped)


patch(
    "thunder.core.jit_ext:unpack_inputs",
    summary="unpack_inputs runs with guard recording paused",
    why=(
        "It runs after the user's program was traced (building the prologue); what it does with the proxies "
        "(hashing them, say) is not an observation of that program."
    ),
    upstream=UPSTREAM,
)(guard_recorder.unobserved)
