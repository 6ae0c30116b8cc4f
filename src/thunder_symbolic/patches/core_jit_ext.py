"""Patches of ``thunder/core/jit_ext.py``: the wiring of the general jit to this package's mechanisms (the lookaside
table of :mod:`thunder_symbolic.semantics.lookasides`, the guard, value and side-effect recorders around tracing,
the prologue's checks and the epilogue's replay)."""

from __future__ import annotations

import torch
from thunder.core import compile_data
from thunder.core.interpreter import (
    INTERPRETER_CALLBACKS,
    INTERPRETER_SIGNALS,
    PseudoInst,
    unwrap,
)
from thunder.core.jit_ext import get_jit_ctx
from thunder.core.proxies import NumberProxy, variableify
from thunder.torch.experimental.dtensor_proxy import is_dtensor_proxy
from torch.fx._lazy_graph_module import _LazyGraphModule

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards import algebra
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.guards.prologue import check_dtensor_layout, check_symbolic_guards, dtensor_layout
from thunder_symbolic.runtime.cache_option import constant_values
from thunder_symbolic.semantics import lookasides, numpy_numbers, operator_adapters, side_effects

UPSTREAM = "Lightning-AI/lightning-thunder#463"


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
        "thunder's emulation of attribute lookup, TensorProxy.__getattr__ and a partial's call: about a fifth of a "
        "compile of the inference benchmark's prefill (see thunder_symbolic.semantics.tensor_methods); each module "
        "call interpreted torch's `Module.__call__` and its eight hook tests, a third of a small decoder's tracing, "
        "and each member read its `__getattr__`, whose membership tests had every attribute of the module checked. "
        "`n.real`, `n.bit_length()` or `s.is_integer()` of a symbolic number failed with AttributeError. `vars` ran "
        "natively: what the code read of the dict it returned went unchecked (`vars(cfg).get('bias')` answered for the "
        "first call), as did `type(o).scale`; `random.random()` was drawn once, while tracing, and returned on every "
        "call. `for p in self.parameters()` missed a parameter registered later, and `torch.get_num_threads()`, "
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
    return lookasides.extended(original)


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
    adapters = operator_adapters.adapters_by_id()

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
            if operator_adapters.thunder_operator(fn):
                lookaside = numpy_numbers.taking_python_numbers(lookaside)
        known, adapt = adapters.get(id(fn), (None, None))
        return adapt(lookaside) if known is fn and callable(lookaside) else lookaside

    return general_jit_lookaside


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
    "guard recording paused",
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
