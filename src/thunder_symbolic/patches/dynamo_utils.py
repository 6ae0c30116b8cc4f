"""Patches of ``thunder/dynamo/utils.py``: which FX nodes the thunderfx splitter keeps away from thunder."""

from __future__ import annotations

import contextlib
import types
import weakref

import torch

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.semantics import sizes
from thunder_symbolic.thunderfx import fx_vmap, verdict_cache


@patch(
    "thunder.dynamo.utils:get_nodes_in_unsupported_ctx_regions",
    summary="nodes inside vmap regions (torch 2.9's pre-dispatch vmap too) are left to PyTorch; regions end",
    why=(
        "transformers' attention masks are built under torch.vmap; on torch 2.9 thunder 0.2.6 did not see "
        "those regions, so its splitter failed on them ('tree_flatten of type Tensor is not supported') for "
        "every thunderfx run of a Llama model; and its region counter never decremented."
    ),
    upstream="Lightning-AI/lightning-thunder#2732",
    replaces=True,
)
def _nodes_in_unsupported_regions(original):
    enter, leave = fx_vmap.nesting_functions()

    def get_nodes_in_unsupported_ctx_regions(gm: torch.fx.GraphModule) -> set[torch.fx.Node]:
        """Replaces upstream's function: its decrement branch could never match and it missed torch 2.9's
        pre-dispatch vmap functions; wrapping cannot fix a loop that never leaves a region."""
        depth, inside = 0, set()
        for node in gm.graph.nodes:
            target = node.target if node.op == "call_function" else None
            if target in enter:
                depth += 1
            elif target in leave:
                depth -= 1
            elif depth > 0:
                inside.add(node)
        return inside

    return get_nodes_in_unsupported_ctx_regions


def _script_object_input(node: torch.fx.Node) -> torch.fx.Node | None:
    """The first input of ``node`` whose example value holds a fake script object (a DeviceMesh, from torch 2.12)."""
    from torch._library.fake_class_registry import FakeScriptObject

    for arg in node.all_input_nodes:
        value = arg.meta.get("example_value")
        if any(isinstance(leaf, FakeScriptObject) for leaf in torch.utils._pytree.tree_leaves(value)):
            return arg
    return None


@patch(
    "thunder.dynamo.utils:is_node_supported_by_thunder",
    summary="a node taking a script object (a DeviceMesh) or calling a method torch.Tensor lacks (a DTensor's "
    "redistribute) is left to PyTorch with a split reason; fallback ops with symbolic shapes, torch.sym_sum and "
    "torch.Size stay in thunder; a node's verdict is computed once, and a node supported like an earlier one (the "
    "same operation on inputs of the same kinds, shapes and types: the next layer's) shares its verdict, and a kind "
    "found supported is kept across processes (thunder_symbolic.thunderfx.verdict_cache)",
    why=(
        "From torch 2.12 Dynamo puts the DeviceMesh of tensor-parallel code in the graph as a fake script object and "
        "keeps DTensor methods as method calls: thunderfx failed on such graphs ('tree_flatten of type "
        "FakeScriptObject is not supported', then the assertion 'Failed to find method redistribute') instead of "
        "splitting them off. 0.2.6 leaves every fallback op to PyTorch: the rotary embedding's view_as_complex, "
        "view_as_real and polar split each attention block into four thunder programs; those of "
        "thunder_symbolic.semantics.fallback_shapes keep symbolic sizes and now run in thunder. 0.2.6 has no mapping "
        "for torch.sym_sum, which Dynamo writes for the length of a growing KV cache: every attention block was split "
        "around it (a decode step of the inference benchmark ran 6 thunder programs and 3 Inductor graphs of one "
        "addition each), nor for torch.Size, which Dynamo writes for `x.shape[:-1] + (-1,)` with dynamic sizes. "
        "torch's split_module asks for the verdict of a node up to three times in a graph that sets grad mode or "
        "autocast (more in nested autocast regions), and each time thunder ran the node's symbol on fake tensors "
        "again: a twentieth of the inference benchmark's prefill compile. Running every node's symbol on fake tensors "
        "was a seventh of the benchmark's first generation (3.3 s of 23 s), for layers that repeat the same operations "
        "on the same kinds of inputs. A process's first graph still computed every kind: 110 for the benchmark's "
        "prefill, 0.3 s of its first token."
    ),
)
def _is_node_supported_by_thunder(original):
    from thunder.dynamo.utils import SplitReason, SplitReasonType, try_execute_thunder_symbol

    from thunder_symbolic.semantics.fallback_shapes import torch_functions
    from thunder_symbolic.semantics.number_ops import sym_sum

    kept_in_thunder = torch_functions() | {torch.sym_sum: sym_sum, torch.Size: sizes.size_of}  # -> what thunder runs

    verdicts = weakref.WeakKeyDictionary()  # node -> (what the verdict was given for, the verdict)
    supported = _BoundedSet(4096)  # what the node was, for nodes found supported (see _node_kind)

    def is_node_supported_by_thunder(node, thunder_options):
        asked = (node.op, node.target, node.args, node.kwargs, dict(thunder_options))
        known = verdicts.get(node)
        if known is not None and _same(known[0], asked):
            return known[1]
        kind = _node_kind(node, thunder_options)
        if kind is not None and kind in supported:
            verdict = (True, None)
        elif kind is not None and (stable := verdict_cache.stable_key(kind)) is not None:
            if verdict_cache.is_known(stable):
                verdict = (True, None)
            elif (verdict := decide(node, thunder_options))[0]:
                verdict_cache.remember(stable)
        else:
            verdict = decide(node, thunder_options)
        if kind is not None and verdict[0]:
            supported.add(kind)
        verdicts[node] = (asked, verdict)
        return verdict

    def decide(node, thunder_options):
        if (mesh := _script_object_input(node)) is not None:
            info = f"node {node.name} ({node.target}) takes {mesh.name}, a script object (such as a DeviceMesh)"
            return False, SplitReason(SplitReasonType.UNSUPPORTED_NODE, info=info)
        if node.op == "call_method" and not hasattr(torch.Tensor, node.target):
            info = f"node {node.name} calls {node.target}, which is not a torch.Tensor method"
            return False, SplitReason(SplitReasonType.UNSUPPORTED_NODE, info=info)
        target = getattr(torch.Tensor, node.target) if node.op == "call_method" else node.target
        if node.op in ("call_function", "call_method") and target in kept_in_thunder:
            return try_execute_thunder_symbol(kept_in_thunder[target], node, thunder_options)
        return original(node, thunder_options)

    return is_node_supported_by_thunder


class _Unkeyed(Exception):
    """A node input this module cannot describe by value: its verdict is computed."""


def _node_kind(node, thunder_options) -> tuple | None:
    """What decides whether thunder runs ``node`` (see ``try_execute_thunder_symbol``): its operation, its constant
    arguments, and for each input node the kind, shape (a symbolic size by expression and hint), dtype, device,
    grad requirement and DTensor layout of its example value; with the options and defaults the check reads.
    None when an input is something else (a script object, an opaque value)."""
    try:
        arguments = _described((node.args, node.kwargs))
    except _Unkeyed:
        return None
    defaults = (torch.get_default_dtype(), torch.get_default_device(), thunder_options.get("disable_torch_autograd"))
    return node.op, node.target, arguments, defaults


_CONSTANTS = (type(None), bool, int, float, complex, str, slice, type(Ellipsis), torch.dtype, torch.device)


def _described(value):
    """``value`` (a node argument, or an input node's example value) as a key; _Unkeyed where it cannot be one."""
    if isinstance(value, torch.fx.Node):
        if "example_value" not in value.meta:
            raise _Unkeyed
        return ("input", _described(value.meta["example_value"]))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        if value.node.hint is None:  # (an unbacked size)
            raise _Unkeyed
        return type(value), str(value), value.node.hint
    if isinstance(value, torch.Tensor):
        spec = getattr(value, "_spec", None)  # a DTensor's
        layout = None if spec is None else (spec.mesh, spec.placements)
        shape = tuple(map(_described, value.shape))
        return type(value), shape, value.dtype, value.device, value.requires_grad, layout
    if isinstance(value, (tuple, list)):  # (fx's immutable_list and immutable_dict too)
        return type(value), tuple(map(_described, value))
    if isinstance(value, dict):
        return dict, tuple((key, _described(item)) for key, item in value.items())
    if isinstance(value, (torch.layout, torch.memory_format)) or type(value) in _CONSTANTS:
        return type(value), value
    raise _Unkeyed


class _BoundedSet:
    """A set that forgets its oldest members past ``size`` (the kinds of nodes of every graph a process compiles)."""

    def __init__(self, size: int):
        self.size, self.members = size, {}

    def __contains__(self, item) -> bool:
        try:
            return item in self.members
        except TypeError:  # (an unhashable constant)
            return False

    def add(self, item) -> None:
        try:
            self.members[item] = None
        except TypeError:
            return
        if len(self.members) > self.size:
            del self.members[next(iter(self.members))]


@patch(
    "thunder.dynamo.utils:get_proxy_inputs_from_node",
    summary="a DTensor input with symbolic sizes gets its proxy from a DTensor of its sizes' hints, as other "
    "tensors do; an input that is a size (a tuple of ints) is passed as its sizes' hints",
    why=(
        "thunderfx's splitter runs each node's thunder symbol on proxies of its inputs, made by `new_ones` of the "
        "example value at the sizes' hints; on a DTensor with symbolic sizes (Dynamo's graph for a second "
        "sequence length) `new_ones` fails in DTensor's sharding propagation ('unhashable type: non-nested "
        "SymInt'), so every DTensor operation of such a graph was left to PyTorch: the tensor-parallel model's "
        "prefill of a second prompt length ran its linears, silu and mul through Inductor, between 21 thunder "
        "regions. A size input (`x.view(size)`, size a torch.Size of the graph) failed in `new_ones` ('int' "
        "object has no attribute 'new_ones'): the view was left to PyTorch, splitting the region around it (the "
        "tensor-parallel model's prefill of a second prompt length: 5 thunder regions where the first has 3)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _get_proxy_inputs_from_node(original):
    def get_proxy_inputs_from_node(node):
        with _dtensor_examples_at_hints(node):
            return original(_with_sizes_at_hints(node))

    return get_proxy_inputs_from_node


def _with_sizes_at_hints(node):
    """``node``, or what upstream reads of it (its args and kwargs) with each input whose example value is a size
    replaced by its sizes' hints (upstream proxies a tuple example value as a tuple of tensors)."""
    hints = {arg: at_hints for arg in node.all_input_nodes if (at_hints := _size_at_hints(arg)) is not None}
    if not hints:
        return node
    args, kwargs = torch.fx.map_arg((node.args, node.kwargs), lambda arg: hints.get(arg, arg))
    return types.SimpleNamespace(args=args, kwargs=kwargs)


def _size_at_hints(arg: torch.fx.Node) -> tuple[int, ...] | None:
    example = arg.meta.get("example_value")
    if not isinstance(example, tuple) or not all(isinstance(d, (int, torch.SymInt)) for d in example):
        return None
    from thunder.dynamo.utils import _concrete_value

    at_hints = tuple(_concrete_value(example))
    return None if None in at_hints else at_hints


@contextlib.contextmanager
def _dtensor_examples_at_hints(node):
    """Meanwhile, the example value of each of ``node``'s inputs that is a DTensor with symbolic sizes is one of
    the same mesh and placements at the sizes' hints (its local tensor still fake)."""
    swapped = []
    for arg in node.all_input_nodes:
        example = arg.meta.get("example_value")
        at_hints = _at_hints(example)
        if at_hints is not None:
            swapped.append((arg, example))
            arg.meta["example_value"] = at_hints
    try:
        yield
    finally:
        for arg, example in swapped:
            arg.meta["example_value"] = example


def _at_hints(example):
    """``example`` at its sizes' hints, if it is a DTensor with symbolic sizes that all have one; else None."""
    if not isinstance(example, torch.Tensor) or not torch.distributed.is_available():
        return None
    from torch.distributed.tensor import DTensor

    if not isinstance(example, DTensor) or not any(isinstance(d, torch.SymInt) for d in example.shape):
        return None
    from thunder.dynamo.utils import _concrete_value  # thunderfx's own: a size's hint

    local = example._local_tensor
    local_shape, shape, stride = (_concrete_value(sizes) for sizes in (local.shape, example.shape, example.stride()))
    if None in (*local_shape, *shape, *stride):
        return None  # an unbacked size: no hint to use
    ones = local.new_ones(local_shape)  # a fake tensor, as the local one is
    mesh, placements = example.device_mesh, example.placements
    return DTensor.from_local(ones, mesh, placements, run_check=False, shape=shape, stride=stride)


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an argument whose == is elementwise (a tensor constant): ask again
        return False


@patch(
    "thunder.dynamo.utils:make_fake_arguments",
    summary="a split-off graph whose DTensor example inputs cannot be made fake runs eagerly instead of failing",
    why=(
        "Converting a DTensor example value that requires grad and has dynamic sizes into a fake tensor "
        "fails in torch ('unhashable type: non-nested SymInt', from DTensor's sharding propagation of "
        "detach): the tensor-parallel attention under thunderfx failed in grad mode from its second "
        "sequence length. Without example values thunderfx runs the graph with PyTorch, as it does when "
        "Dynamo gives none."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _make_fake_arguments(original):
    def make_fake_arguments(gm):
        try:
            return original(gm)
        except RuntimeError:
            from torch.distributed.tensor import DTensor  # the failure needs a DTensor, so distributed is there

            examples = (node.meta.get("example_value") for node in gm.graph.nodes if node.op == "placeholder")
            if any(isinstance(example, DTensor) for example in examples):
                return None
            raise

    return make_fake_arguments


def _redistribute_arguments(target) -> dict | None:
    """The mesh, placements and async_op a Dynamo ``prim_redistribute`` closure passes to
    ``DTensor.redistribute``, however they were given; None when it passes anything else."""
    import inspect

    from torch.distributed.tensor import DTensor

    try:
        captured = inspect.getclosurevars(target).nonlocals
        bound = inspect.signature(DTensor.redistribute).bind(
            None, *captured["args_as_value"], **captured["kwargs_as_value"]
        )
    except (KeyError, TypeError, ValueError):
        return None
    arguments = dict(bound.arguments)
    arguments.pop("self")
    if set(arguments) - {"device_mesh", "placements", "async_op"}:
        return None
    return arguments


@patch(
    "thunder.dynamo.utils:translate_dtensor_ops",
    summary="a DTensor redistribute whose mesh and placements Dynamo captured positionally is thunder's too",
    why=(
        "0.2.6 translates Dynamo's prim_redistribute nodes into thunder's redistribute only when the placements "
        "were a keyword argument; `d.redistribute(mesh, [Replicate()])` (the MoE experts' row-parallel sum) "
        "was left to PyTorch, splitting the tensor-parallel block into two thunder programs with a Partial "
        "DTensor between them."
    ),
    upstream="Lightning-AI/lightning-thunder#2794",
)
def _translate_dtensor_ops(original):
    def translate_dtensor_ops(gm: torch.fx.GraphModule) -> None:
        original(gm)
        from thunder.torch.experimental.dtensor_torch_and_prims import dtensor_redistribute_prim

        for node in gm.graph.nodes:
            target = node.target
            if node.op != "call_function" or getattr(target, "__name__", None) != "prim_redistribute":
                continue
            if getattr(target, "thunder_supported", False) or (arguments := _redistribute_arguments(target)) is None:
                continue

            def redistribute(x, arguments=arguments):
                return dtensor_redistribute_prim(x, **arguments)

            redistribute.thunder_supported = True
            node.target = redistribute

    return translate_dtensor_ops
