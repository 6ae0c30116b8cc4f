"""The general-jit lookaside table: what traced code's calls of some Python and torch functions become.

thunder's table, extended (:func:`extended`) by: logging and warnings made by the epilogue on every call
(:mod:`thunder_symbolic.semantics.side_effects`); transformers' masks traced without vmap
(:mod:`thunder_symbolic.semantics.hf_masks`); functions marked :func:`thunder_symbolic.semantics.opaque.opaque`;
torch's builtin ``Function.apply``; refusals of what no check can make sound (:mod:`thunder_symbolic.guards.refusals`);
reads of process state, made again and compared by the prologue; ``min``/``max``/``torch.sym_*`` of numbers kept
symbolic; ``reversed`` of indexable modules; ``lru_cache`` and ``cached_property`` traced through; and the answers
of :mod:`~thunder_symbolic.semantics.introspection`, the stores of :mod:`~thunder_symbolic.semantics.stores`.
"""

from __future__ import annotations

import builtins
import functools
import operator
from functools import partial

import torch
from thunder.core.interpreter import (
    INTERPRETER_SIGNALS,
    WrappedValue,
    _interpret_call,
    default_lookaside,
    do_raise,
    interpreter_needs_wrap,
    unwrap,
    wrap_const,
)
from thunder.core.proxies import NumberProxy, Proxy
from torch.fx._lazy_graph_module import _LazyGraphModule

from thunder_symbolic.autodiff.autograd_apply import BUILTIN_APPLY_KEY, builtin_apply_owner
from thunder_symbolic.guards import algebra, refusals
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.semantics import (
    hf_masks,
    introspection,
    module_calls,
    operator_adapters,
    side_effects,
    sizes,
    stores,
    tensor_methods,
)
from thunder_symbolic.semantics.number_ops import apply_number_op, sym_sum
from thunder_symbolic.semantics.opaque import interpreted, is_opaque
from thunder_symbolic.semantics.torch_composites import COMPOSITES


class LookasideMap(dict):
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


def _entering_inference_mode(context):
    """``with torch.inference_mode(mode):`` in traced code: refused where it changes the mode (thunder entered it
    while tracing only); where it does not, entered, and the mode checked by the prologue as a state read."""
    mode = _interpret_call(getattr, context, wrap_const("mode"))  # (set by the interpreted __init__)
    if mode is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return mode
    mode = unwrap(mode)
    if mode != introspection.inference_mode_read():
        return do_raise(refusals.inference_mode_refused(mode, guard_recorder.source_location()))
    return _interpret_call(wrap_const(_INFERENCE_MODE_ENTER), context)


# (interpreted: the context's attributes are the interpreter's)
_INFERENCE_MODE_ENTER = interpreted(torch.autograd.grad_mode.inference_mode.__enter__)


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


def extended(original):
    """thunder's general-jit lookaside table ``original``, extended."""
    lookasides = LookasideMap(original)
    for fn, op in ((torch.sym_max, "sym_max"), (torch.sym_min, "sym_min")):
        lookasides[fn] = interpreter_needs_wrap(partial(apply_number_op, op))
    for fn, op in ((builtins.max, "max"), (builtins.min, "min")):
        lookasides[fn] = interpreter_needs_wrap(partial(_min_max_of_two_numbers, fn, op))
    lookasides[torch.sym_sum] = interpreter_needs_wrap(sym_sum)
    for fn, composite in COMPOSITES.items():
        lookasides[fn] = interpreter_needs_wrap(composite)
    for fn in (str, repr, ascii, format):
        lookasides[fn] = introspection.text_lookaside(fn)
    lookasides[type] = introspection.type_lookaside
    lookasides[torch.Size] = sizes.size_lookaside
    lookasides[getattr] = introspection.absence_checked(introspection.tensor_introspection(original[getattr]))
    lookasides[hasattr] = introspection.presence_checked(original[hasattr])
    lookasides[vars] = introspection.vars_lookaside
    lookasides[reversed] = _reversed_lookaside
    lookasides[torch.autograd.grad_mode.inference_mode.__enter__] = _entering_inference_mode
    for method in ("named_parameters", "named_buffers"):
        if (fn := getattr(torch.nn.Module, method)) in original:
            lookasides[fn] = introspection.member_names_checked(original[fn], method)
    lookasides[functools._lru_cache_wrapper.__call__] = _uncached_call
    lookasides[functools.cached_property.__get__] = _cached_property_get
    lookasides[functools.partial.__call__] = tensor_methods.call
    lookasides[torch.nn.Module._wrapped_call_impl] = module_calls.call
    lookasides[torch.nn.Module.__getattr__] = module_calls.member
    if isinstance in original:
        answering = introspection.tensor_class_checked(introspection.dtensor_aware_isinstance(original[isinstance]))
        lookasides[isinstance] = introspection.python_isinstance(answering)
    if object.__setattr__ in original:
        lookasides[object.__setattr__] = stores.assigning(original[object.__setattr__])
    if dict.__setitem__ in original:
        lookasides[dict.__setitem__] = stores.replaying_attribute_stores(original[dict.__setitem__])
    lookasides[setattr] = stores.recording_native_stores(original[setattr])  # (STORE_ATTR: `Cfg.scale = 2`)
    lookasides[_LazyGraphModule.real_recompile] = interpreter_needs_wrap(_LazyGraphModule.real_recompile)
    hop = torch.ops.higher_order.autograd_function_apply
    lookasides[hop] = operator_adapters.autograd_function_apply_without_ctx(original[hop])
    return lookasides
