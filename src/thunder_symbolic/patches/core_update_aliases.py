"""Patches of ``thunder/core/update_aliases.py``: in-place updates of inputs that share memory.

thunder knows only *that* two inputs share a storage (the cache key groups them), not which elements
they share. 0.2.6 stood in for every other input of a group with a reshape of the first one, i.e. it
assumed they hold the same elements: disjoint views of one storage (``base[:3]`` and ``base[3:]``) got
silently wrong results and views of different sizes failed. Here each other input stays itself and is
only *ordered* after the group's in-place updates: an ``input_alias`` marker makes it a view of the
first input for thunder's alias analysis, which then routes it through ``update_aliases`` (identity at
run time) after every in-place update of the group, as it does for views made inside the program.
"""

from __future__ import annotations

import functools

from thunder.core.proxies import TensorProxy, variableify
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceProvenance, from_trace, tracectx
from thunder.executors import torchex

from thunder_symbolic.activation.registry import patch


def _input_alias_meta(first: TensorProxy, alias: TensorProxy, /) -> TensorProxy:
    return TensorProxy(like=alias, requires_grad=alias.requires_grad)


def _input_alias_impl(first, alias, /):
    return alias


@functools.cache
def input_alias():
    """``input_alias(first, other) -> other``: marks ``other`` as sharing memory with ``first``.

    Registered once with the torch executor (always present); at run time it returns ``other`` itself.
    """
    return torchex.ex.register_operator("input_alias", meta=_input_alias_meta, fn=_input_alias_impl)


@patch(
    "thunder.executors.torchex:input_alias",
    summary="input_alias(first, other) -> other: the torch executor's marker of inputs sharing memory",
    why="The alias patches below need an operation that links two inputs in the trace and is free at run time.",
    upstream="Lightning-AI/lightning-thunder#2760",
    adds=True,
)
def _input_alias_operator(original):
    return input_alias()


@patch(
    "thunder.core.update_aliases:replace_args_with_alias_map",
    summary="inputs sharing memory keep their own values; an input_alias marker links them for ordering",
    why=(
        "thunder replaced every other input of an alias group with a reshape of the first, as if they held "
        "the same elements: disjoint views (`base[:3]`, `base[3:]`) gave silently wrong results and views of "
        "different sizes (`base.view(2, 3)`, `base[:3]`) failed with an impossible reshape, in both cache modes."
    ),
    upstream="Lightning-AI/lightning-thunder#2760, #2764",
    replaces=True,
)
def _replace_args_with_alias_map(original):
    def replace_args_with_alias_map(computation_trace, alias_tensor_indices):
        """Replaces ``thunder.core.update_aliases.replace_args_with_alias_map``.

        Wrapping cannot help: the original's stand-in (a reshape of the first input) is wrong whenever
        the inputs do not hold the same elements, and the trace cannot know whether they do. Returns the
        trace with each other input of a group replaced, from its first use on, by ``input_alias(first,
        input)``, and the map from the replaced inputs to their stand-ins.
        """
        if not alias_tensor_indices:
            return computation_trace, {}
        flat_args = tree_flatten((computation_trace.args, computation_trace.kwargs))[0]
        first_of = {}
        for group in alias_tensor_indices:
            members = [flat_args[i] for i in group if i < len(flat_args) and isinstance(flat_args[i], TensorProxy)]
            for member in members[1:]:
                first_of[variableify(member)] = members[0]

        marker, swap_map, bsyms = input_alias(), {}, []
        for bsym in computation_trace.bound_symbols:
            touched = False
            for arg in bsym.flat_proxy_args:
                key = variableify(arg) if isinstance(arg, TensorProxy) else None
                if key not in first_of:
                    continue
                touched = True
                if key not in swap_map:
                    with tracectx(computation_trace):
                        stand_in = marker.meta(first_of[key], arg)
                        bsyms.append(marker.bind(first_of[key], arg, output=stand_in))
                    swap_map[key] = stand_in
            bsyms.append(bsym.from_bsym_swap_proxies(swap_map, skip_output=True) if touched else bsym)

        trace = from_trace(computation_trace)
        trace.bound_symbols = bsyms
        links = ", ".join(f"{k.proxy.name} with {first_of[k].name}" for k in swap_map)
        trace.set_provenance(TraceProvenance(f"Inputs sharing memory, linked by input_alias: {links}"))
        return trace, swap_map

    return replace_args_with_alias_map


@patch(
    "thunder.core.update_aliases:_is_view_creation_op",
    summary="input_alias counts as a view of the first input of its alias group",
    why=(
        "thunder's alias analysis groups tensors through the view-creating operations of the trace; the "
        "input_alias marker must join them for in-place updates of one input to order reads of the others."
    ),
    upstream="Lightning-AI/lightning-thunder#2760",
)
def _is_view_creation_op(original):
    def _is_view_creation_op(bsym):
        return bsym.sym is input_alias() or original(bsym)

    return _is_view_creation_op
