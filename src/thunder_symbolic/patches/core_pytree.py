"""Patches of ``thunder/core/pytree.py``: flattening the containers bound symbols hold skips work whose result is
already known.

thunder flattens every bound symbol's arguments and output, often several times per symbol (its flat arguments,
each swap of its proxies, at every depth of its subsymbols): about 50,000 flattens, 30,000 of them with
dataclasses, in a compile of the inference benchmark's prefill.
"""

from __future__ import annotations

import functools

import optree
from thunder.core import pytree

from thunder_symbolic.activation.registry import patch

# Containers 0.2.6's tree_flatten accepts: its check of the argument's type is decided for them.
_CONTAINERS = frozenset({tuple, list, dict})


@patch(
    "thunder.core.pytree:tree_flatten",
    summary="a tuple, list or dict is flattened without checking its type against the supported ones",
    why=(
        "0.2.6 builds the set of types it supports (thirty, some from torch.distributed) at every call, a third "
        "of a call's time, and the bound symbols' containers are almost always a tuple, list or dict."
    ),
)
def _tree_flatten(original):
    @functools.wraps(original)
    def tree_flatten(args, namespace=pytree.OPTREE_NAMESPACE):
        if type(args) in _CONTAINERS:
            return optree.tree_flatten(args, none_is_leaf=True, namespace=namespace)
        return original(args, namespace)

    return tree_flatten


@patch(
    "thunder.core.pytree:tree_flatten_with_dataclass",
    summary="flattens once, and only where a leaf is a dataclass not registered yet maps the tree first",
    why=(
        "0.2.6 rebuilds the whole tree with a Python callback per leaf (to register the dataclasses among them) "
        "before flattening it: two thirds of the call's time, for a registration that happens once per "
        "dataclass."
    ),
)
def _tree_flatten_with_dataclass(original):
    @functools.wraps(original)
    def tree_flatten_with_dataclass(tree):
        """The same leaves, and a spec that unflattens to the same values (0.2.6's rebuilt tree has a tuple where
        a torch.Size was)."""
        if type(tree) not in _CONTAINERS:
            return original(tree)
        leaves, spec = optree.tree_flatten(tree, none_is_leaf=True, namespace=pytree.OPTREE_NAMESPACE)
        for leaf in leaves:
            if hasattr(type(leaf), "__dataclass_fields__") and pytree._maybe_register_dataclass(leaf):
                return original(tree)  # (registers its class)
        return leaves, spec

    return tree_flatten_with_dataclass
