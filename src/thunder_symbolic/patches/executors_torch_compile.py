"""Patches of ``thunder/executors/torch_compile.py``: the torch.compile executor under symbolic values, and no
fusion pass where an executor that fuses only around some operations finds none of them."""

from __future__ import annotations

import torch
from thunder.core.compile_data import using_symbolic_values
from thunder.core.prims import PrimIDs
from thunder.core.proxies import Proxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.extend import ImplInfo
from thunder.torch.experimental.dtensor_proxy import is_dtensor_proxy

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.fusion.inductor_regions import InductorRegion


@patch(
    "thunder.executors.torch_compile:torch_compile_ex._implmap",
    summary="prims.shape, number-only operations, alias updates and DTensor operations stay outside torch.compile "
    "fusions; the DTensor local executor's operations on local tensors and tensors made from numbers (arange, full, "
    "ones, zeros) join them",
    why=(
        "A trace may produce a dim in several prims.shape calls (each .shape access binds one), and DCE "
        "writes the repeated outputs as ints: inside a fusion region that failed with 'name i0 already "
        "used' or \"'int' object has no attribute 'name'\". A region holding update_aliases receives "
        "several inputs that share memory, which torch.compile fails on once their sizes change "
        "(`AssertionError: s35 ... not in {...}`, pytorch/pytorch#90665); split at the update, each "
        "region sees one of them. A region making or reading a DTensor failed (a DTensor returned by "
        "torch.compile has no storage to compare, Dynamo cannot wrap a DTensorSpec): any tensor-parallel "
        "program with this executor failed; the torch executor and the DTensor local executor run them."
    ),
    upstream="Lightning-AI/lightning-thunder#2730, #2746, #2760",
)
def _implmap(original):
    left_out = {PrimIDs.SHAPE, PrimIDs.UPDATE_ALIASES} | {op for op in original if _is_dtensor_operation(op)}
    implmap = {
        op: ImplInfo() if op in _FACTORIES else ImplInfo(checker=_involves_plain_tensors)
        for op in original
        if op not in left_out
    }
    if torch.distributed.is_available():
        from thunder_symbolic.distributed.dtensor_local import FUSIBLE, executor

        implmap |= {executor.opmap[name].id: ImplInfo() for name in FUSIBLE}
    return implmap


def _is_dtensor_operation(op) -> bool:
    from thunder.torch.experimental.dtensor_torch_and_prims import DTensorPrimIDs

    return isinstance(op, DTensorPrimIDs) or str(op).startswith("dtensor_")


# Operations making a tensor from numbers alone (no operand to check), deterministically: the positions and masks
# of a decoder (``torch.arange(past, past + length)``) join the fusion that reads them instead of cutting it.
_FACTORIES = frozenset({"torch.arange", "torch.full", "torch.ones", "torch.zeros"})


def _involves_plain_tensors(*args, **kwargs) -> bool:
    """Number-only operations (size arithmetic) run in Python: a torch.compile region cannot run them. A
    DTensor operand is left to the torch executor and the DTensor local executor."""
    tensors = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, TensorProxy)]
    return bool(tensors) and not any(is_dtensor_proxy(t) for t in tensors)


def _without_int_shape_outputs(bsym):
    """``bsym`` without the prims.shape subsymbols whose outputs DCE turned into ints (repeated producers)."""
    kept = [
        sub
        for sub in bsym.subsymbols
        if not (sub.sym.id == PrimIDs.SHAPE and any(not isinstance(out, Proxy) for out in sub.flat_outs))
    ]
    return bsym if len(kept) == len(bsym.subsymbols) else bsym.from_bsym(subsymbols=kept)


def _region_callable(compiled):
    """The region as torch calls (the function make_compiled hands to ``torch.compile``), else None."""
    seen = set()
    fn = compiled
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        if (region := getattr(fn, "_torchdynamo_orig_callable", None)) is not None:
            return region
        cells = [c.cell_contents for c in getattr(fn, "__closure__", None) or () if callable(c.cell_contents)]
        fn = getattr(fn, "__wrapped__", None) or (cells[0] if len(cells) == 1 else None)
    return None


def _allocated_outputs(bsyms, outputs) -> list[int]:
    """Positions of the region's outputs that eager PyTorch allocates: produced by an operation that
    returns no view (``z * 1``), so never an input or a view of one."""
    import thunder.torch as ltorch

    view_ops = set(ltorch._syms_returning_views) | set(ltorch._syms_that_may_return_views)
    producer = {out.name: bsym for bsym in bsyms for out in bsym.flat_proxy_outs}
    return [
        i
        for i, out in enumerate(outputs)
        if isinstance(out, TensorProxy) and out.name in producer and producer[out.name].sym not in view_ops
    ]


def _storages(tensors) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if isinstance(t, torch.Tensor)}


@patch(
    "thunder.executors.torch_compile:make_compiled",
    summary="repeated prims.shape subsymbols (outputs rewritten as ints by DCE) are dropped from fused regions; "
    "an output eager allocates is never returned sharing an input's memory; under symbolic values a region is "
    "compiled by Inductor once for symbolic sizes and called without Dynamo (thunder_symbolic.fusion)",
    why=(
        "make_compiled names every output of every subsymbol; an int output failed with \"'int' object has no "
        "attribute 'name'\" (expand, factories of sizes under symbolic values). The dims keep their first producer. "
        "torch 2.14's Inductor returns the input itself for `z * 1`: with regions split at alias updates, "
        "`before = z * 1; z.add_(1)` returned the updated values (a silent wrong result). Each call of a "
        "torch.compile'd region went through Dynamo (7 to 14 µs of overhead a region), which also compiled it "
        "again at its second size: with the executor a tiny Llama's forward took 1.08 ms against 0.99 without it; "
        "with regions compiled for symbolic sizes, 0.39 ms."
    ),
    upstream="Lightning-AI/lightning-thunder#2746, #2728",
)
def _make_compiled(original):
    def make_compiled(bsyms, sorted_unique_inputs, sorted_unique_outputs, **kwargs):
        bsyms = [_without_int_shape_outputs(b) for b in bsyms]
        compiled = original(bsyms, sorted_unique_inputs, sorted_unique_outputs, **kwargs)
        allocated = _allocated_outputs(bsyms, sorted_unique_outputs)
        if using_symbolic_values() and kwargs.get("mode") is None and (region := _region_callable(compiled)):
            name = f"{len(bsyms)} operations"
            return InductorRegion(region, sorted_unique_inputs, name=name, fresh_outputs=allocated)
        if not allocated:
            return compiled

        def compiled_without_input_aliases(*args):
            outs = compiled(*args)
            inputs = None
            for i in allocated:
                out = outs[i]
                if out.numel() == 0:
                    continue
                inputs = _storages(args) if inputs is None else inputs
                if out.untyped_storage().data_ptr() in inputs:
                    outs = list(outs)
                    outs[i] = out.clone()
            return outs

        return compiled_without_input_aliases

    return make_compiled


@patch(
    "thunder.executors.torch_compile:TorchCompileExecutor.fusion_pass",
    summary="an executor that fuses only regions holding one of its required operations (torchcompile_cat, "
    "torchcompile_xentropy) returns a trace holding none of them as it is",
    why=(
        "0.2.6 partitions the whole trace into fusible groups, fuses none of them (each group needs a required "
        "operation, and a group holds only the trace's own bound symbols), then rematerializes and runs DCE on "
        "the result: a reordered copy of the same program. torchcompile_xentropy is a default executor on CPU; "
        "its pass over a trace without a cross entropy took a thirtieth of a second of the inference "
        "benchmark's prefill compile."
    ),
)
def _fusion_pass(original):
    def fusion_pass(self, trace):
        required = self.required_ops
        if required is not None and not any(bsym.sym.id in required for bsym in trace.bound_symbols):
            return trace
        return original(self, trace)

    return fusion_pass
