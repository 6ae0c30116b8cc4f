"""Patches of ``thunder/core/vjp_utils.py``: its cache of forward and backward functions per operation."""

from __future__ import annotations

from thunder.core.proxies import Proxy

from thunder_symbolic.activation.registry import patch


def _holds_proxy(key) -> bool:
    if isinstance(key, Proxy):
        return True
    return isinstance(key, tuple) and any(map(_holds_proxy, key))


class _ConcreteEntriesOnly(dict):
    """The forward and backward functions of an operation, kept for operands of concrete sizes only.

    thunder keys them by the operands' sizes, which under symbolic values are proxies: a proxy compares equal to
    its value, so an operation on sizes ``(i0, i3)`` found the functions traced for ``(3, 2)`` by a constant-values
    program, and its gradient kept those sizes. Functions traced on proxies belong to their trace: not kept."""

    def get(self, key, default=None):
        return default if _holds_proxy(key) else super().get(key, default)

    def __setitem__(self, key, value) -> None:
        if not _holds_proxy(key):
            super().__setitem__(key, value)


@patch(
    "thunder.core.vjp_utils:_cache",
    summary="the forward and backward functions of an operation are reused for operands of concrete sizes only",
    why=(
        "Its key holds the operands' sizes, proxies under symbolic values, which compare equal to their values: "
        "`grad(thunder.jit(f, cache='symbolic values'))` after a constant-values grad of any function on the same "
        "shapes took that program's backward of a reduction, with its sizes, and failed at the next shape."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _cache(original):
    return _ConcreteEntriesOnly(original)
