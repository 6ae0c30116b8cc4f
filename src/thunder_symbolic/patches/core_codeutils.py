"""Patches of ``thunder/core/codeutils.py``: printing a trace is not an observation of the program, and torch's
named tuples, strings in containers and sizes print as Python that builds them."""

from __future__ import annotations

import functools

import torch

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards import recorder as guard_recorder

_OBSERVATION = dict(
    why=(
        "Generating a trace's Python source hashes and converts the numbers it prints; while a backward "
        "is built under symbolic values that looked like the backward depending on their values, and "
        "pinned the program to the first input's sizes."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)

patch("thunder.core.codeutils:is_printable", summary="is_printable runs with guard recording paused", **_OBSERVATION)(
    guard_recorder.unobserved
)


@patch(
    "thunder.core.codeutils:prettyprint",
    summary="prettyprint runs with guard recording paused; a torch.return_types named tuple prints as "
    "`torch.return_types.topk((t0, t1))`, and a string with a double quote or a backslash in a container as "
    "its repr",
    why=_OBSERVATION["why"] + " A named tuple (the result of torch.topk, sort, max with a dim...) printed as its repr, "
    "`torch.return_types.topk(values=t0, indices=t1)`, which is not how one is built: a trace passing or "
    "returning one failed with \"structseq() missing required argument 'sequence'\". And thunder prints a "
    "container by repr-ing its printed items once more: a string holding a double quote became invalid Python "
    "(`\\'c\"d\\'`; a prologue checking a dict keyed by \"it's\" failed to compile), one holding a backslash "
    "another string.",
    upstream=_OBSERVATION["upstream"],
)
def _prettyprint(original):
    unobserved = guard_recorder.unobserved(original)

    @functools.wraps(original)
    def prettyprint(x, **kwargs):
        if not _printed_here(x):
            return unobserved(x, **kwargs)
        return _print_containers(x, functools.partial(unobserved, **kwargs))

    return prettyprint


def _is_structseq(x) -> bool:
    return isinstance(x, tuple) and type(x).__module__ == "torch.return_types"


def _printed_here(x) -> bool:
    """Whether ``x`` is or holds (in tuples, lists and dict values) a named tuple, or a string that thunder's
    printing of containers mangles."""
    if _is_structseq(x) or type(x) is str and ('"' in x or "\\" in x):
        return True
    if type(x) in (tuple, list):
        return any(_printed_here(item) for item in x)
    return type(x) is dict and any(_printed_here(item) for item in x.values())


def _print_containers(x, print_leaf) -> str:
    """``x``'s source, the tuples, lists and dicts holding what is printed here printed here, the rest by thunder."""
    if not _printed_here(x) or type(x) is str:
        return print_leaf(x)
    if type(x) is dict:
        return "{" + ", ".join(f"{print_leaf(k)}: {_print_containers(v, print_leaf)}" for k, v in x.items()) + "}"
    items = ", ".join(_print_containers(item, print_leaf) for item in x)
    if type(x) is list:
        return f"[{items}]"
    tuple_source = f"({items},)" if len(x) == 1 else f"({items})"
    return f"torch.return_types.{type(x).__name__}({tuple_source})" if _is_structseq(x) else tuple_source


@patch(
    "thunder.core.codeutils:to_printable",
    summary="a torch.Size prints as the tuple it is",
    why=(
        "thunder prints a torch.Size as an object of the trace's context named after its type, `_torch.Size_0`, "
        "which is not a Python name: the generated code failed with NameError (\"name '_torch' is not defined\"). "
        "0.2.6 meets one where a transform passes a tensor's shape (ConstantFolding's `full`) and a max_pool's "
        "meta its kernel size; the patch set's traces keep more of them (sizes stay torch.Size to user code, and a "
        "bound symbol in which nothing is swapped keeps its arguments)."
    ),
)
def _to_printable(original):
    @functools.wraps(original)
    def to_printable(trace, x, *, import_ctx=None, object_ctx=None):
        if type(x) is torch.Size and trace is not None:  # (without a trace thunder returns it as it is)
            x = tuple(x)
        return original(trace, x, import_ctx=import_ctx, object_ctx=object_ctx)

    return to_printable
