"""The grad rules this package gives thunder: one table, read through thunder's own.

thunder looks a symbol's grad rule up in ``thunder.core.transforms._grad_fn_map`` by the symbol's id.
``patches.core_transforms`` puts :class:`GradRules` in its place: our rules first, then thunder's. Rules
register here from any module (``grad_rule``), so that a rule lives next to what it differentiates (the
slice and cat rules in ``patches.core_transforms``, the DTensor rules in
:mod:`thunder_symbolic.distributed.dtensor_grads`)
and thunder's own table is never written to: reverting the patch set removes every rule.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, MutableMapping

from thunder.core import dtypes, prims
from thunder.core.langctxs import Languages, langctx
from thunder.core.utils import const_as

__all__ = ["GradRules", "RuleView", "grad_rule", "rules", "zero_padded"]

_RULES: dict[Hashable, Callable] = {}


def grad_rule(*symbol_ids: Hashable) -> Callable[[Callable], Callable]:
    """Register the decorated function as the grad rule of ``symbol_ids`` (in thunder's ``register_grad``
    form: it computes the forward, reads its gradient with ``get_grad`` and ``put_grad``s the inputs')."""

    def register(rule: Callable) -> Callable:
        for symbol_id in symbol_ids:
            _RULES[symbol_id] = langctx(Languages.TORCH)(rule)  # written in torch's language, as thunder's
        return rule

    return register


def zero_padded(g, padding: tuple):
    """``g`` padded with zeros by ``padding`` (``prims.pad``'s (low, high, interior) per dim). A complex
    ``g`` is padded as its real view: the torch executor hands the pad value to ``F.pad``, which takes no
    complex one."""
    import thunder.torch as ltorch

    if dtypes.is_complex_dtype(g.dtype):
        real = prims.pad(ltorch.view_as_real(g), 0.0, (*padding, (0, 0, 0)))
        return ltorch.view_as_complex(real)
    return prims.pad(g, const_as(0, g.dtype), padding)


def rules() -> dict[Hashable, Callable]:
    """The registered rules, by symbol id (a live view: rules registered later are seen)."""
    return _RULES


class GradRules(MutableMapping):
    """thunder's grad rule table seen through ours; registrations go to thunder's table."""

    def __init__(self, table: dict, replacements: dict):
        self.table, self.replacements = table, replacements

    def __getitem__(self, key):
        return self.replacements[key] if key in self.replacements else self.table[key]

    def __setitem__(self, key, value):
        self.replacements.pop(key, None)  # a later registration wins, as in thunder
        self.table[key] = value

    def __delitem__(self, key):
        self.replacements.pop(key, None)
        del self.table[key]

    def __iter__(self):
        return iter(self.table.keys() | self.replacements.keys())

    def __len__(self):
        return len(self.table.keys() | self.replacements.keys())


class RuleView(MutableMapping):
    """A table of rules by symbol id whose rules are read through :meth:`rule_for` (to check or adapt them);
    registrations go to the table."""

    def __init__(self, table: MutableMapping):
        self.table = table

    def rule_for(self, key: Hashable, rule: Callable) -> Callable:
        return rule

    def __getitem__(self, key):
        return self.rule_for(key, self.table[key])

    def __setitem__(self, key, value):
        self.table[key] = value

    def __delitem__(self, key):
        del self.table[key]

    def __iter__(self):
        return iter(self.table)

    def __len__(self):
        return len(self.table)
