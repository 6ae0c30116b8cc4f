"""Patches of ``thunder/core/module.py``: a jitted module sees parameters, buffers and submodules replaced later.

``ThunderModule`` copies the module's parameters, buffers and submodules into dicts when it is built
(one lookup per call instead of a walk of the module tree), and the prologue reads them from there. A
parameter replaced afterwards (``m.lin.weight = nn.Parameter(...)``), a buffer reassigned or a submodule
swapped, set to None or deleted was never seen: the program kept using the old ones, in both cache options.
Each call checks that every member the dicts were filled from is still in its module (one identity test per
member; torch calls no registration hook when a parameter is set to None or a member deleted). A call that
finds a change refreshes what was replaced (entries a transform put there itself are kept) and drops what is
gone, which the prologue then reads from the module (and fails to find, for a new trace). A member added
later is not in the dicts: the ThunderModule reads it from the module.
"""

from __future__ import annotations

import functools
import operator
import sys
import types
import weakref

from thunder_symbolic.activation.registry import patch

_SEEN = "_thunder_symbolic_seen"  # on a ThunderModule: what its dicts were filled from, by name
_MEMBERS = "_thunder_symbolic_members"  # on a ThunderModule: (members dicts, names, values) of the members seen


def _current(thunder_module) -> tuple[dict, dict, dict]:
    model = thunder_module._model
    return dict(model.named_parameters()), dict(model.named_buffers()), dict(model.named_modules())


def _members(model) -> tuple[tuple[dict, ...], tuple[str, ...], tuple[object, ...]]:
    """Every member of ``model``'s modules as (its members dicts, its names, its values), for :func:`_gone`."""
    found = [
        (members, name, value)
        for module in model.modules()
        for members in (module._parameters, module._buffers, module._modules)
        for name, value in members.items()
        if value is not None
    ]
    return tuple(zip(*found)) if found else ((), (), ())


def _gone(thunder_module) -> bool:
    """Whether a member seen is no longer in its module (set to None, deleted, replaced): one identity test each,
    in C (about 30 ns a member)."""
    dicts, names, values = thunder_module.__dict__[_MEMBERS]
    return not all(map(operator.is_, map(dict.get, dicts, names), values))


def _refresh(thunder_module) -> None:
    """Take over what was replaced on the wrapped module since the ThunderModule last looked."""
    seen = thunder_module.__dict__[_SEEN]
    targets = (thunder_module._overrides_parameters, thunder_module._overrides_buffers, thunder_module._module_cache)
    for target, last, now in zip(targets, seen, _current(thunder_module)):
        for name, value in now.items():
            if value is not last.get(name) and target.get(name) is last.get(name):
                target[name] = value
        for name in last.keys() - now.keys():  # set to None (`m.act = None`) or deleted: read from the module
            if target.get(name) is last[name]:
                del target[name]
        last.clear()
        last.update(now)
    thunder_module.__dict__[_MEMBERS] = _members(thunder_module._model)


@patch(
    "thunder.core.module:ThunderModule.__init__",
    summary="remembers what its parameter, buffer and submodule dicts were filled from; the ThunderModule of a "
    "transformers model takes the model's forward signature (`inspect.signature(jm.forward)`)",
    why=(
        "To tell a parameter the user replaced on the wrapped module from one a transform overrode. And "
        "transformers' generate passes `logits_to_keep=1` only to a forward whose signature names it: bound to the "
        "ThunderModule (see its __getattr__), it read thunder's `forward(*args, **kwargs)` and passed None, which "
        "Phi-3's model takes as an index (logits of another rank: generation failed)."
    ),
    upstream="Lightning-AI/lightning-thunder#396",
)
def _init(original):
    def __init__(self, model, compiled_model_call):
        original(self, model, compiled_model_call)
        self.__dict__[_SEEN] = _current(self)
        self.__dict__[_MEMBERS] = _members(model)
        if _generation_method(getattr(type(model), "generate", None)):
            # (an instance attribute, which the module's call runs: it calls the ThunderModule's own forward)
            self.__dict__["forward"] = functools.wraps(model.forward)(_OwnForward(self))

    return __init__


@patch(
    "thunder.core.module:ThunderModule.forward",
    summary="takes over parameters, buffers and submodules replaced on the wrapped module since the last call, "
    "and forgets those set to None or deleted",
    why=(
        "0.2.6 copies them once, when the module is jitted: `m.lin.weight = nn.Parameter(...)`, a reassigned "
        "buffer, `m.act = None` or `m.lin.bias = None` was silently ignored afterwards (both cache options), the "
        "program using the old ones."
    ),
    upstream="Lightning-AI/lightning-thunder#396",
)
def _forward(original):
    def forward(self, *args, **kwargs):
        if _MEMBERS in self.__dict__ and _gone(self):
            _refresh(self)
        return original(self, *args, **kwargs)

    return forward


class _OwnForward:
    """A ThunderModule's own forward, called through a weak reference to it: kept on the instance, a bound method
    would make a reference cycle, and the module would outlive its last reference until a garbage collection."""

    def __init__(self, module):
        self._module = weakref.ref(module)

    def __call__(self, *args, **kwargs):
        module = self._module()
        return type(module).forward(module, *args, **kwargs)


def _generation_method(function) -> bool:
    """Whether ``function`` is one of transformers' generation methods (``generate``, ``_sample``...), as
    ``GenerationMixin`` defines it (a model's override may call ``super()``, which needs the model itself)."""
    generation = sys.modules.get("transformers.generation.utils")
    mixin = getattr(generation, "GenerationMixin", None)
    name = getattr(function, "__name__", None)
    return mixin is not None and name is not None and vars(mixin).get(name) is function


@patch(
    "thunder.core.module:ThunderModule.__getattr__",
    summary="a transformers model's generation methods (generate, _sample...) read from its ThunderModule are bound to "
    "the ThunderModule, so that the steps they run call the compiled forward",
    why=(
        "ThunderModule forwards an attribute it lacks to the wrapped model, bound to the model: "
        "`thunder.jit(model).generate(ids)` decoded with the eager model, every step. thunder's hf-transformers recipe "
        "rebinds `generate` and `_sample` itself; under thunder.jit nothing did."
    ),
)
def _thunder_module_getattr(original):
    def __getattr__(self, name: str):
        value = original(self, name)
        if (
            isinstance(value, types.MethodType)
            and value.__self__ is self._modules.get("_model")
            and _generation_method(value.__func__)
        ):
            return types.MethodType(value.__func__, self)
        return value

    return __getattr__
