"""A call of a ``torch.nn.Module`` without hooks traced as a call of its ``forward``.

thunder's interpreter runs ``Module.__call__`` (``_wrapped_call_impl`` then ``_call_impl``) line by line at each
module call: reading eight hook dicts and testing each with an interpreted ``bool`` (itself an interpreted
``len``), about 15 ms a call. A decoder of 24 module calls spent about a third of its tracing there.

:func:`call` is the lookaside for ``Module._wrapped_call_impl``. Where the module has no compiled call, no hook
of its own, no global hook and torch's JIT tracer is off, torch's own code calls ``self.forward(*args,
**kwargs)`` and nothing else; so does this, through the interpreter (``self.forward`` is read as the interpreted
code reads it). Anything else runs torch's code, interpreted as before. Hooks are torch's bookkeeping, which
the prologue does not check either way (as torch.compile's ``skip_nnmodule_hook_guards``); with the shortcut it no
longer checks either what torch's code read besides (a submodule's ``_compiled_call_impl`` still None, the top
module's ``_call_impl``): ``m.compile()`` computes what ``forward`` does, and replacing ``_call_impl`` is as
much torch's bookkeeping as a hook. ``forward`` itself stays checked.
"""

from __future__ import annotations

import types

import torch
from thunder.core.interpreter import INTERPRETER_SIGNALS, _interpret_call, unwrap, wrap_const
from torch.nn.modules import module as torch_module

__all__ = ["call"]

_HOOKS = ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks")
_GLOBAL_HOOKS = (
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
)

# Module._wrapped_call_impl as a function of its own, interpreted where the shortcut does not apply (the lookaside
# is keyed by the original function).
_WRAPPED_CALL_IMPL = types.FunctionType(
    torch.nn.Module._wrapped_call_impl.__code__, torch_module.__dict__, "_wrapped_call_impl"
)


def _calls_only_forward(module: torch.nn.Module) -> bool:
    """Whether torch's ``module(...)`` is ``module.forward(...)`` now."""
    instance = vars(module)
    if "_call_impl" in instance or type(module)._call_impl is not torch.nn.Module._call_impl:
        return False
    if torch._C._get_tracing_state():
        return False
    if getattr(module, "_compiled_call_impl", None) is not None:
        return False
    return not any(instance.get(name, True) for name in _HOOKS) and not any(  # (missing: torch's code raises)
        getattr(torch_module, name) for name in _GLOBAL_HOOKS
    )


def call(module, *args, **kwargs):
    """``module(*args, **kwargs)`` in traced code."""
    if not isinstance(unwrap(module), torch.nn.Module) or not _calls_only_forward(unwrap(module)):
        return _interpret_call(wrap_const(_WRAPPED_CALL_IMPL), module, *args, **kwargs)
    forward = _interpret_call(getattr, module, wrap_const("forward"))
    if forward is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return forward
    return _interpret_call(forward, *args, **kwargs)
