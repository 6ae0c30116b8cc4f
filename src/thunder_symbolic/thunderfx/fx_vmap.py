"""vmap regions of a Dynamo graph: where they are, and removing those whose results nothing reads.

Dynamo traces ``torch.vmap`` into calls that enter and leave a vmap level around the batched operations
(torch 2.9 and 2.10 trace the pre-dispatch functions of ``torch._functorch.predispatch``). FX counts those
calls as side effects, so Dynamo's dead-code elimination keeps a whole region where nothing reads its result:
transformers' mask functions build one such region in every step of the inference benchmark (a mask its
caller drops). thunderfx leaves a vmap region to Inductor, so the dead region was one more Inductor region
to compile and call, and it split thunder's region in two.
"""

from __future__ import annotations

import functools
import types

import torch
import torch.fx

__all__ = ["nesting_functions", "outermost_regions", "remove_unread_regions"]


def _predispatch() -> types.ModuleType | None:
    try:
        from torch._functorch import predispatch
    except ImportError:
        return None
    return predispatch


@functools.cache
def nesting_functions() -> tuple[frozenset, frozenset]:
    """The functions an FX graph calls to enter and leave a vmap level."""
    enter, leave = {torch._C._functorch._vmap_increment_nesting}, {torch._C._functorch._vmap_decrement_nesting}
    if (predispatch := _predispatch()) is not None:
        enter.add(predispatch._vmap_increment_nesting)
        leave.add(predispatch._vmap_decrement_nesting)
    return frozenset(enter), frozenset(leave)


@functools.cache
def _bookkeeping() -> frozenset:
    """What a vmap region calls besides its computation: entering and leaving levels, (un)batching tensors, and
    loading vmap's decompositions (once per process; the region that needed them is the one removed)."""
    enter, leave = nesting_functions()
    functions = enter | leave | {torch._C._functorch._add_batch_dim, torch._C._functorch._remove_batch_dim}
    if (predispatch := _predispatch()) is not None:
        functions |= {predispatch._add_batch_dim, predispatch._remove_batch_dim, predispatch.lazy_load_decompositions}
    return frozenset(functions)


def outermost_regions(graph: torch.fx.Graph) -> list[list[torch.fx.Node]] | None:
    """Each outermost vmap region's nodes, from the call entering it to the one leaving it; None where the
    graph enters and leaves levels unevenly."""
    enter, leave = nesting_functions()
    regions, depth = [], 0
    for node in graph.nodes:
        target = node.target if node.op == "call_function" else None
        if target in enter:
            if depth == 0:
                regions.append([])
            depth += 1
        if depth > 0:
            regions[-1].append(node)
        if target in leave:
            depth -= 1
            if depth < 0:
                return None
    return regions if depth == 0 else None


def _loads_decompositions(node: torch.fx.Node) -> bool:
    target = node.target if node.op == "call_function" else None
    return target in _bookkeeping() and getattr(target, "__name__", "") == "lazy_load_decompositions"


def _writes(node: torch.fx.Node) -> bool:
    """Whether ``node`` may change state that outlives the region: anything but a call of a function or method
    that is not in place and not a side effect for FX (vmap's own bookkeeping aside)."""
    if node.op == "call_function" and node.target in _bookkeeping():
        return False
    if node.op not in ("call_function", "call_method") or node.is_impure():
        return True
    name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def remove_unread_regions(gm: torch.fx.GraphModule) -> int:
    """Remove from ``gm`` each outermost vmap region that no node outside it reads and that writes nothing, with
    the loading of decompositions just before it and the computations that only it read; returns how many
    regions were removed.

    Not FX's dead-code elimination: it counts the pre-dispatch vmap functions as free of side effects and
    would remove the entering and leaving of the regions that stay."""
    regions = outermost_regions(gm.graph)
    if not regions:
        return 0
    removed = 0
    for nodes in regions:
        members = set(nodes)
        if any(user not in members for node in nodes for user in node.users):
            continue
        if any(_writes(node) for node in nodes):
            continue
        before = nodes[0].prev
        if _loads_decompositions(before) and not before.users:
            nodes.insert(0, before)
        read = {arg for node in nodes for arg in node.all_input_nodes} - members
        for node in reversed(nodes):
            gm.graph.erase_node(node)
        _remove_unread(gm.graph, read)
        removed += 1
    if removed:
        gm.recompile()
    return removed


def _remove_unread(graph: torch.fx.Graph, candidates: set) -> None:
    """Remove the computations among ``candidates`` that nothing reads, then those they alone read."""
    while candidates:
        node = candidates.pop()
        if node.users or node.op not in ("call_function", "call_method") or node.target in _bookkeeping():
            continue
        if _writes(node):
            continue
        candidates |= set(node.all_input_nodes)
        graph.erase_node(node)
