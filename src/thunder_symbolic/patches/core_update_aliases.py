"""Patches of ``thunder/core/update_aliases.py``: in-place updates of inputs that alias each other."""

from __future__ import annotations

from thunder.core import compile_data
from thunder.core.proxies import TensorProxy
from thunder.core.pytree import tree_flatten

from thunder_symbolic._registry import patch
from thunder_symbolic.patches.core_symbol import ensure_dims_produced


@patch(
    "thunder.core.update_aliases:insert_alias_updates",
    summary="under symbolic values, the dims used by the reshapes it inserts are produced first",
    why=(
        "Updating aliased inputs reshapes one view to another's shape; the dims of that shape had no "
        "producer in the trace and the generated code failed ('cannot access local variable i6')."
    ),
    upstream="Lightning-AI/lightning-thunder#2764, #2746",
)
def _insert_alias_updates(original):
    def insert_alias_updates(computation_trace, alias_tensor_indices):
        updated = original(computation_trace, alias_tensor_indices)
        if updated is computation_trace or not compile_data.using_symbolic_values():
            return updated
        return ensure_dims_produced(updated)

    return insert_alias_updates


def _numel(t: TensorProxy) -> int:
    size = 1
    for d in t.shape:
        size *= int(getattr(d, "value", d))  # the traced values: no guard is recorded here
    return size


@patch(
    "thunder.core.update_aliases:replace_args_with_alias_map",
    summary="aliased inputs of different numbers of elements get a clear error instead of an impossible reshape",
    why=(
        "thunder stands in for every input of an alias group with a reshape of the first one, which cannot "
        "express views of different sizes (`base.view(2, 3)` and `base[:3]`): 0.2.6 failed with "
        "'Attempting to reshape a.shape=(2, 3) to shape=(3,)', in both cache modes."
    ),
    upstream="Lightning-AI/lightning-thunder#2760",
)
def _replace_args_with_alias_map(original):
    def replace_args_with_alias_map(computation_trace, alias_tensor_indices):
        flat_args = tree_flatten((computation_trace.args, computation_trace.kwargs))[0]
        for group in alias_tensor_indices or ():
            tensors = [flat_args[i] for i in group if i < len(flat_args) and isinstance(flat_args[i], TensorProxy)]
            sizes = {t.name: _numel(t) for t in tensors}
            if len(set(sizes.values())) > 1:
                described = ", ".join(f"{name} ({size} elements)" for name, size in sizes.items())
                raise NotImplementedError(
                    f"the inputs {described} are views of the same memory with different numbers of elements, "
                    "and the program updates one of them in place: thunder can only treat aliased inputs of "
                    "the same size. Pass a copy (e.g. `.clone()`) of one of them."
                )
        return original(computation_trace, alias_tensor_indices)

    return replace_args_with_alias_map
