"""A cached entry's prologue compiled into one function: the same checks, without the calls around them.

thunder runs a prologue as generated code that calls one Python function per check, reads the call's
state (default dtype and device, grad mode, aliasing) from a dict it publishes in a context variable,
and finds a module's ``ThunderModule`` through the compile data, another context variable. On a cache
hit of a small program these calls cost more than the checks. :func:`compile_prologue` turns the
prologue's trace into one function of ``(args, kwargs)``: every check of the trace, in its order,
inlined when it is one of thunder's plain comparisons and called otherwise (the guard operators of
:mod:`thunder_symbolic.guards`); the call's state is read where the trace reads it. It returns the
prologue's result, or None when a check fails (an exception also means "not this entry").

A trace holding anything else (a transform's own unpacking, cache information it does not know) is
not compiled: the caller runs thunder's prologue. Inlined checks are never weaker than thunder's; where
one is stricter (a NaN pinned by value), the caller's fallback to thunder's path decides.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy
from torch._C._dynamo.guards import TensorGuards

from thunder_symbolic.guards.prologue import compile_guards

__all__ = ["compile_prologue", "device_text"]

# What thunder publishes as cache information, as read here. Autocast and data-parallel gradient sync
# are False whenever the short call path runs (it leaves autocast and DDP/FSDP to thunder's path).
_CACHE_INFO = {
    "default_dtype": "_default_dtype()",
    "default_device": "_default_device()",
    "is_autocast_enabled": "False",
    "is_grad_enabled": "_is_grad_enabled()",
    "no_grad_sync": "False",
    "alias_tensor_indices": "_alias_groups(args, kwargs)",
}

_SKIPPED = {PrimIDs.COMMENT, PrimIDs.DEL}
_MODULE_READS = {PrimIDs.UNPACK_PARAMETER: "get_parameter", PrimIDs.UNPACK_SUBMODULE: "get_submodule",
                 PrimIDs.UNPACK_BUFFER: "get_buffer"}  # fmt: skip

# Inlined checks, as conditions on their rendered arguments (thunder's pythonex implementations, and
# the fast ones of patches/executors_pythonex that return at once when the check holds).
_INLINE_CHECKS = {
    "check_len": "len({0}) == {1}",
    "check_literal_like": "{0} == {1}",
    "check_string_value": "{0} == {1}",
    "check_none": "{0} is None",
    "check_tensor_metadata": (
        "isinstance({0}, _Tensor) and {0}.shape == {1} and {0}.dtype == {3} "
        "and {0}.requires_grad == {4} and _device_text({0}.device) == {2}"
    ),
}


class _Unsupported(Exception):
    """The trace holds something this compiler does not translate."""


def _holds_proxy(value) -> bool:
    if isinstance(value, Proxy):
        return True
    return type(value) in (tuple, list) and any(_holds_proxy(v) for v in value)


class _Writer:
    def __init__(self, namespace: dict[str, Any]):
        self.lines: list[str] = []
        self.namespace = namespace
        self.defined: set[str] = set()
        self.cache_info: str | None = None  # the name of the trace's cache information
        self.function_obj: str | None = None  # the name of the jitted function (or module) object
        self.thunder_module: tuple[str, Any] | None = None  # the name and object of its ThunderModule
        self.dims: dict[str, tuple[str, int]] = {}  # an int proxy unpacked from a shape: (tensor, dim)
        self.tensors: list[tuple[str, list, str]] = []  # checked together: (name, static sizes, condition)

    def constant(self, value) -> str:
        if value is None or type(value) in (bool, int) or (type(value) is str and len(value) < 64):
            return repr(value)
        name = f"_c{len(self.namespace)}"
        self.namespace[name] = value
        return name

    def render(self, value) -> str:
        """Code for ``value``: a proxy by its name, a container of proxies rebuilt, anything else a constant
        (the very object: checks that cache by their arguments' identity see the same one every call)."""
        if isinstance(value, Proxy):
            if value.name not in self.defined:
                raise _Unsupported(f"{value.name} is read before it is defined")
            return value.name
        if type(value) in (tuple, list) and _holds_proxy(value):
            items = "".join(f"{self.render(v)}, " for v in value)
            return f"({items})" if type(value) is tuple else f"[{items}]"
        return self.constant(value)

    def define(self, proxy, expression: str) -> None:
        if not isinstance(proxy, Proxy):
            raise _Unsupported(f"output {proxy!r}")
        self.defined.add(proxy.name)
        self.lines.append(f"{proxy.name} = {expression}")

    def check(self, condition: str) -> None:
        self.lines.append(f"if not ({condition}):\n        return None")


def _write(writer: _Writer, bsym, function_obj) -> None:
    sym_id, name, args = bsym.sym.id, bsym.sym.name, bsym.args
    if sym_id in _SKIPPED:
        return
    if sym_id == PrimIDs.UNPACK_TRIVIAL:
        if bsym.output.name not in ("args", "kwargs"):
            raise _Unsupported(f"unpack_trivial of {bsym.output.name}")
        writer.defined.add(bsym.output.name)
    elif sym_id == PrimIDs.UNPACK_FUNCTION_OBJ:
        writer.define(bsym.output, writer.constant(function_obj))
        writer.function_obj = bsym.output.name
    elif sym_id == PrimIDs.UNPACK_THUNDER_MODULE:
        if not (isinstance(args[0], Proxy) and args[0].name == writer.function_obj):
            raise _Unsupported("the ThunderModule of another object than the jitted one")
        from thunder.core.module import get_thunder_module  # reads the compile data the caller set

        thunder_module = get_thunder_module(function_obj)
        writer.define(bsym.output, writer.constant(thunder_module))
        writer.thunder_module = (bsym.output.name, thunder_module)
    elif sym_id == PrimIDs.UNPACK_CACHE_INFO:
        writer.cache_info = bsym.output.name
    elif sym_id == PrimIDs.UNPACK_GETITEM and isinstance(args[0], Proxy) and args[0].name == writer.cache_info:
        expression = _CACHE_INFO.get(args[1]) if type(args[1]) is str else None
        if expression is None:
            raise _Unsupported(f"cache information {args[1]!r}")
        writer.define(bsym.output, expression)
    elif sym_id == PrimIDs.UNPACK_GETITEM:
        writer.define(bsym.output, f"{writer.render(args[0])}[{writer.render(args[1])}]")
    elif sym_id == PrimIDs.UNPACK_ATTR:
        if not (type(args[1]) is str and args[1].isidentifier()):
            raise _Unsupported(f"attribute {args[1]!r}")
        writer.define(bsym.output, _attribute(writer, args[0], args[1]))
    elif sym_id in _MODULE_READS:
        writer.define(bsym.output, _module_read(writer, args[0], _MODULE_READS[sym_id], args[1]))
    elif name == "shape" and not bsym.kwargs:
        outputs = bsym.output
        if not isinstance(outputs, (tuple, list)):
            raise _Unsupported("shape with one output")
        targets = "".join(f"{o.name if isinstance(o, Proxy) else '_'}, " for o in outputs)  # thunder prints _ too
        writer.lines.append(f"({targets}) = {writer.render(args[0])}.shape")
        for dim, o in enumerate(outputs):
            if isinstance(o, Proxy):
                writer.defined.add(o.name)
                if isinstance(args[0], Proxy):
                    writer.dims[o.name] = (args[0].name, dim)
    elif name == "check_symbolic_guards":
        names, guards, *inputs = args
        check = writer.constant(compile_guards(names, guards))
        writer.lines.append(f"{check}({', '.join(writer.render(i) for i in inputs)})")
    elif name == "check_float_value" and type(args[1]) is float and args[1] == args[1] and args[1] != 0.0:
        # same_float, for a value that is neither a NaN nor a zero: equal floats are then the same bits
        number = writer.render(args[0])
        writer.check(f"type({number}) is float and {number} == {writer.constant(args[1])}")
    elif name == "check_number_type_and_value" and not bsym.kwargs:
        number, value = writer.render(args[0]), args[1]
        if type(value) is bool:
            writer.check(f"{number} is {value!r}")
        else:
            writer.check(f"type({number}) is {writer.constant(type(value))} and {number} == {writer.render(value)}")
    elif name in _INLINE_CHECKS and not bsym.kwargs:
        condition = _INLINE_CHECKS[name].format(*(writer.render(a) for a in args))
        sizes = _static_sizes(writer, *args[:2]) if name == "check_tensor_metadata" else None
        if sizes is None:
            writer.check(condition)
        else:
            writer.tensors.append((args[0].name, sizes, condition))
    elif sym_id == PrimIDs.RETURN:
        if writer.tensors:
            names = ", ".join(name for name, _, _ in writer.tensors)
            conditions = " and ".join(f"({condition})" for _, _, condition in writer.tensors)
            writer.lines.append(
                f"if not _tensors.check({names}):\n        if not ({conditions}):\n            return None\n"
                f"        _learn({names})"
            )
        writer.lines.append(f"return {writer.render(args[0] if len(args) == 1 else args)}")
    elif name.startswith("check_") and bsym.output is None and bsym._call_ctx and len(bsym._call_ctx) == 1:
        (fn,) = bsym._call_ctx.values()  # another check an executor registered: called, as thunder does
        rendered = [writer.render(a) for a in args] + [f"{k}={writer.render(v)}" for k, v in bsym.kwargs.items()]
        writer.lines.append(f"{writer.constant(fn)}({', '.join(rendered)})")
    else:
        raise _Unsupported(f"{name} ({sym_id})")


def _attribute(writer: _Writer, obj, name: str) -> str:
    """``obj.name``; on the ThunderModule, an attribute of the wrapped module is read from it directly.

    ``ThunderModule.__getattr__`` forwards such reads (``self.scale`` in ``forward``) to the wrapped module
    after the normal lookup failed, and each failed lookup raises an AttributeError inside Python, twice
    (``_model`` itself is found the same way): microseconds per read. The direct read applies while the
    ThunderModule does not hold the name itself, as the normal lookup would find it then."""
    if writer.thunder_module is None or not isinstance(obj, Proxy) or obj.name != writer.thunder_module[0]:
        return f"{writer.render(obj)}.{name}"
    from thunder.core.module import ThunderModule

    thunder_module = writer.thunder_module[1]
    if (
        type(thunder_module).__getattr__ is not ThunderModule.__getattr__
        or name in vars(thunder_module)
        or hasattr(type(thunder_module), name)
        or "_model" not in thunder_module._modules
    ):
        return f"{obj.name}.{name}"
    own, modules = writer.constant(vars(thunder_module)), writer.constant(thunder_module._modules)
    return f"({modules}['_model'].{name} if {name!r} not in {own} else {obj.name}.{name})"


# What ThunderModule's getters read first (its copies of the module's parameters, buffers and submodules).
_GETTER_DICTS = {"get_parameter": "_overrides_parameters", "get_buffer": "_overrides_buffers",
                 "get_submodule": "_module_cache"}  # fmt: skip


def _module_read(writer: _Writer, obj, getter: str, key: str) -> str:
    """``obj.getter(key)``; on the ThunderModule, a lookup in the dict its getter reads first (a getter
    call costs 0.2 µs a parameter): the dict, found again on every call, and the getter when it lacks
    the key, as the getter does. Only where the getter is thunder's own."""
    from thunder.core.module import ThunderModule

    call = f"{writer.render(obj)}.{getter}({writer.render(key)})"
    if writer.thunder_module is None or not isinstance(obj, Proxy) or obj.name != writer.thunder_module[0]:
        return call
    thunder_module = writer.thunder_module[1]
    if getattr(type(thunder_module), getter, None) is not getattr(ThunderModule, getter) or type(key) is not str:
        return call
    copies = f"_{_GETTER_DICTS[getter]}"
    if copies not in writer.defined:
        writer.lines.append(f"{copies} = {obj.name}.{_GETTER_DICTS[getter]}")
        writer.defined.add(copies)
    return f"({copies}[{key!r}] if {key!r} in {copies} else {call})"


def _static_sizes(writer: _Writer, tensor, shape) -> list | None:
    """The sizes a tensor check pins (None for a dim it takes from the tensor itself), or None when the
    check relates the tensor to another one (a dim unpacked from another tensor's shape)."""
    if not isinstance(tensor, Proxy) or type(shape) not in (tuple, list):
        return None
    sizes = []
    for dim, size in enumerate(shape):
        if isinstance(size, Proxy):
            if writer.dims.get(size.name) != (tensor.name, dim):
                return None
            sizes.append(None)
        elif type(size) is int:
            sizes.append(size)
        else:
            return None
    return sizes


class _TensorChecks:
    """The tensor checks of a prologue in one call of torch's own tensor guard (Dynamo's ``TensorGuards``,
    C++): type, dispatch keys, dtype, device, requires_grad, rank and the pinned sizes of every tensor.

    It is learned from the first tensors that pass the trace's checks, so it holds only for tensors
    like them: stricter than the trace (an inference tensor differs from a normal one), never weaker.
    Tensors it rejects are checked by the trace's own conditions and, if they pass, relearned (a few
    times: a program called alternately in and out of inference mode keeps the Python checks)."""

    RELEARN = 4

    def __init__(self, namespace: dict[str, Any], sizes: list[list]):
        self.namespace, self.sizes, self.learned = namespace, sizes, 0
        namespace["_tensors"], namespace["_learn"] = _NEVER, self.learn

    def learn(self, *tensors) -> None:
        if self.learned >= self.RELEARN:
            return
        self.learned += 1
        first: dict[int, int] = {}  # a tensor's id -> the first position it is at
        for position, tensor in enumerate(tensors):
            first.setdefault(id(tensor), position)
        kept = list(first.values())
        sizes = [self.sizes[position] for position in kept]
        guards = TensorGuards(
            *(tensors[position] for position in kept),
            dynamic_dims_sizes=sizes,
            dynamic_dims_strides=[[None] * len(s) for s in sizes],
        )
        if len(kept) < len(tensors):
            repeats = tuple((p, first[id(t)]) for p, t in enumerate(tensors) if first[id(t)] != p)
            guards = _OneTensorTwice(guards, tuple(kept), repeats)
        self.namespace["_tensors"] = guards


class _OneTensorTwice:
    """The tensor checks where the learned call passed one tensor at two places (a tied weight: GPT-2's
    ``lm_head.weight`` is ``wte.weight``), which TensorGuards rejects as an alias: it checks the distinct
    tensors, and that each repeat is again the same tensor as its first place."""

    __slots__ = ("guards", "kept", "repeats")

    def __init__(self, guards: TensorGuards, kept: tuple[int, ...], repeats: tuple[tuple[int, int], ...]):
        self.guards, self.kept, self.repeats = guards, kept, repeats

    def check(self, *tensors) -> bool:
        for position, first in self.repeats:
            if tensors[position] is not tensors[first]:
                return False
        return self.guards.check(*[tensors[position] for position in self.kept])


class _Never:
    @staticmethod
    def check(*tensors) -> bool:
        return False


_NEVER = _Never()


def _takes_args_and_kwargs(prologue) -> bool:
    parameters = list(inspect.signature(prologue).parameters.values())
    kinds = [(p.name, p.kind) for p in parameters]
    return kinds == [("args", inspect.Parameter.VAR_POSITIONAL), ("kwargs", inspect.Parameter.VAR_KEYWORD)]


def compile_prologue(trace, prologue, *, default_device, alias_groups):
    """One function ``accept(args, kwargs)`` doing what ``prologue`` (the callable of ``trace``) checks, or
    None when the trace holds something it does not translate. Call it with thunder's compile data set
    (a module's prologue finds its ThunderModule through it, once, here)."""
    if not _takes_args_and_kwargs(prologue) or "__function_obj" not in prologue.__globals__:
        return None
    namespace: dict[str, Any] = {
        "_Tensor": torch.Tensor,
        "_default_dtype": torch.get_default_dtype,
        "_default_device": default_device,
        "_is_grad_enabled": torch.is_grad_enabled,
        "_alias_groups": alias_groups,
        "_device_text": device_text,
    }
    writer = _Writer(namespace)
    try:
        for bsym in trace.bound_symbols:
            _write(writer, bsym, prologue.__globals__["__function_obj"])
    except _Unsupported:
        return None
    if not writer.lines or not writer.lines[-1].startswith("return "):
        return None
    if writer.tensors:
        _TensorChecks(namespace, [sizes for _, sizes, _ in writer.tensors])
    source = "def accept(args, kwargs):\n" + "".join(f"    {line}\n" for line in writer.lines)
    exec(compile(source, "<thunder_symbolic compiled prologue>", "exec"), namespace)  # noqa: S102
    accept = namespace["accept"]
    accept.source = source
    return accept


_DEVICE_TEXT: dict[torch.device, str] = {}


def device_text(device: torch.device) -> str:
    """``str(device)``, as thunder's tensor check compares it, cached (formatting a device costs 1 µs)."""
    text = _DEVICE_TEXT.get(device)
    if text is None:
        if len(_DEVICE_TEXT) > 64:
            _DEVICE_TEXT.clear()
        text = _DEVICE_TEXT[device] = str(device)
    return text
