"""Patches of ``thunder/core/transform_common.py``: the safety net for dims nothing produces, no DCE of what DCE
just made, DCE's cleaning of subsymbols in one walk, and no loss of a kept bound symbol without outputs."""

from __future__ import annotations

import weakref

from thunder.core import compile_data
from thunder.core.proxies import NumberProxy, TensorProxy
from thunder.core.pytree import tree_flatten
from thunder.core.trace import TraceProvenance, from_trace
from thunder.executors import torchex

from thunder_symbolic.activation.registry import patch


def ensure_dims_produced(trace):
    """Bind ``prims.shape`` of an available tensor before the first use of any dim nothing produced yet."""
    produced = {
        p.name for p in tree_flatten((trace.args, trace.kwargs))[0] if isinstance(p, (NumberProxy, TensorProxy))
    }
    owners: dict[str, TensorProxy] = {}

    def note(tensor):
        for dim in tensor._shape:
            if isinstance(dim, NumberProxy):
                owners.setdefault(dim.name, tensor)

    for arg in tree_flatten((trace.args, trace.kwargs))[0]:
        if isinstance(arg, TensorProxy):
            note(arg)
    bound, changed = [], False
    for bsym in trace.bound_symbols:
        for p in bsym.flat_proxy_args:
            owner = owners.get(p.name) if isinstance(p, NumberProxy) and p.name not in produced else None
            if owner is not None and owner.name in produced:
                dims = tuple(
                    d if isinstance(d, NumberProxy) and d.name not in produced else getattr(d, "value", d)
                    for d in owner._shape
                )
                bound.append(torchex.shape.bind(owner, output=dims))  # executable in any trace, as is
                produced.update(d.name for d in dims if isinstance(d, NumberProxy))
                changed = True
        bound.append(bsym)
        for out in bsym.flat_proxy_outs:
            produced.add(out.name)
            if isinstance(out, TensorProxy):
                note(out)
    if not changed:
        return trace
    fixed = from_trace(trace)
    fixed.bound_symbols = bound
    fixed.set_provenance(TraceProvenance("Dims produced before their first use"))
    return fixed


@patch(
    "thunder.core.transform_common:dce",
    summary="under symbolic values, a dim used before any producer gets prims.shape of a tensor holding it; a "
    "trace that DCE made and no pass changed since is not walked again",
    why=(
        "Every pass ends with DCE. A pass that builds operations out of existing dims (0.2.6's alias updates "
        "reshaped one input to another's shape) left the dims without a producer, and the generated code "
        "failed ('cannot access local variable i6'). Symbol calls produce dims as they are traced; this "
        "catches what later passes add. thunder.jit runs DCE on the computation trace, then "
        "transform_for_execution runs it twice more before its executors' pass on the same bound symbols: "
        "DCE keeps every bound symbol of a trace it made, so the two walks found nothing to remove, at a "
        "thirtieth of a second each for the inference benchmark's prefill."
    ),
    upstream="Lightning-AI/lightning-thunder#2746",
)
def _dce(original):
    made = weakref.WeakKeyDictionary()  # trace DCE made -> its bound symbols then (its output is its return's)

    def dce(trace, needed_proxies=None):
        if needed_proxies is None and _same_objects(made.get(trace), trace.bound_symbols):
            result = from_trace(trace)
            result.bound_symbols = list(trace.bound_symbols)
            result.set_provenance(TraceProvenance("Dead Code Elimination (nothing to remove: DCE made the trace)"))
        else:
            result = original(trace, needed_proxies)
        if compile_data.using_symbolic_values():
            result = ensure_dims_produced(result)
        made[result] = list(result.bound_symbols)  # (thunder does not change a bound symbol in place)
        return result

    return dce


def _same_objects(kept: list | None, current: list) -> bool:
    return kept is not None and len(kept) == len(current) and all(a is b for a, b in zip(kept, current))


@patch(
    "thunder.core.transform_common:_remove_noop_subsymbols",
    summary="DCE's removal of no-op subsymbols reads once, not once per subsymbol, whether the bound symbol "
    "holds a symbol DCE must keep",
    why=(
        "0.2.6 gathers the tags of the bound symbol's whole tree for each of its subsymbols, and again at "
        "each level: quadratic in the subsymbols, of which symbolic values record many (size reads, "
        "broadcasting checks). Every DCE cleans every kept bound symbol: a tenth of thunder's transforms of "
        "the inference benchmark's prefill."
    ),
)
def _remove_noop_subsymbols(original):
    from thunder.core.prims import OpTags
    from thunder.core.symbol import has_tags

    def remove_noop_subsymbols(bsym) -> None:
        if has_tags(bsym, {OpTags.DONT_DCE}):
            return original(bsym)  # whether a subsymbol goes then depends on those removed before it
        _drop_noops(bsym)

    return remove_noop_subsymbols


def _drop_noops(bsym) -> None:
    """What 0.2.6's removal does to a tree that holds no DONT_DCE tag (removing subsymbols adds none): drops, at
    every depth, the subsymbols without subsymbols that are not prims and those whose outputs are no proxies."""
    kept = []
    for sub in bsym.subsymbols:
        if (sub.subsymbols or sub.sym.is_prim) and any(o is not None for o in sub.flat_proxy_outs):
            _drop_noops(sub)
            kept.append(sub)
    bsym.subsymbols = kept


@patch(
    "thunder.core.transform_common:remove_duplicate_number_proxies",
    summary="DCE keeps a bound symbol without outputs that it decided to keep (a fused in-place update)",
    why=(
        "This step of DCE drops a bound symbol whose outputs are all number proxies seen before, which `all()` "
        "holds of a bound symbol without outputs: a fusion that only updates a tensor in place (DONT_DCE, so kept "
        "by DCE's own walk) was dropped here, and the update never happened (`y = x.view(3, 2); y[0][0] = 0; "
        "return x` with the torch.compile executor, whose regions the patch set splits at alias updates)."
    ),
    upstream="Lightning-AI/lightning-thunder#2746",
)
def _remove_duplicate_number_proxies(original):
    def remove_duplicate_number_proxies(bsyms):
        if all(bsym.flat_outs for bsym in bsyms):
            return original(bsyms)
        # The others go through thunder's step; each one it keeps is a copy with the same symbol and arguments.
        kept = iter(original([bsym for bsym in bsyms if bsym.flat_outs]))
        result, pending = [], next(kept, None)
        for bsym in bsyms:
            if not bsym.flat_outs:
                result.append(bsym)
            elif pending is not None and pending.sym is bsym.sym and pending.args is bsym.args:
                result.append(pending)
                pending = next(kept, None)
        return result

    return remove_duplicate_number_proxies
