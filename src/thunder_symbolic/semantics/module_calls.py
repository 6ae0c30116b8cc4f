"""A call of a ``torch.nn.Module`` without hooks traced as a call of its ``forward``, and its parameters, buffers
and submodules read without interpreting torch's ``Module.__getattr__``.

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

:func:`member` is the lookaside for ``Module.__getattr__`` (a parameter, buffer or submodule: ``self.linear``).
torch's code tests ``"_parameters" in self.__dict__`` and ``name in _parameters`` (and so on for buffers and
submodules) before reading them; interpreted, each test wrapped every item of the dict, and the prologue then
checked every plain attribute of the module (``training``, ``num_embeddings``...), read by the program or not.
The tests are made natively; the reads go through the interpreter as torch's code makes them (``__dict__``,
then the table, then the name), so the member has the same wrapped value and provenance. What the program
reads stays checked where it reads it: a small decoder's prologue makes 48 checks where it made 96.
"""

from __future__ import annotations

import torch
from thunder.core.interpreter import INTERPRETER_SIGNALS, _interpret_call, unwrap, wrap_const
from torch.nn.modules import module as torch_module

from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards import values as value_guards
from thunder_symbolic.semantics import subscripts
from thunder_symbolic.semantics.opaque import interpreted

__all__ = ["call", "member"]

_HOOKS = ("_backward_hooks", "_backward_pre_hooks", "_forward_hooks", "_forward_pre_hooks")
_GLOBAL_HOOKS = (
    "_global_backward_pre_hooks",
    "_global_backward_hooks",
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
)

_WRAPPED_CALL_IMPL = interpreted(torch.nn.Module._wrapped_call_impl)  # (where the shortcut does not apply)


def _calls_only_forward(module: object) -> bool:
    """Whether torch's ``module(...)`` is ``module.forward(...)`` now."""
    if not isinstance(module, torch.nn.Module) or torch._C._get_tracing_state():
        return False
    instance = vars(module)
    if "_call_impl" in instance or type(module)._call_impl is not torch.nn.Module._call_impl:
        return False
    if getattr(module, "_compiled_call_impl", None) is not None:
        return False
    return not any(instance.get(name, True) for name in _HOOKS) and not any(  # (missing: torch's code raises)
        getattr(torch_module, name) for name in _GLOBAL_HOOKS
    )


def call(module, *args, **kwargs):
    """``module(*args, **kwargs)`` in traced code."""
    if not _calls_only_forward(unwrap(module)):
        return _interpret_call(wrap_const(_WRAPPED_CALL_IMPL), module, *args, **kwargs)
    forward = _interpret_call(getattr, module, wrap_const("forward"))
    if forward is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
        return forward
    return _interpret_call(forward, *args, **kwargs)


_MEMBERS = ("_parameters", "_buffers", "_modules")

_MODULE_GETATTR = interpreted(torch.nn.Module.__getattr__)


def member(module, name):
    """``Module.__getattr__``: a parameter, buffer or submodule read as torch's code reads it (``__dict__``, then
    its table, then the name: the same wrapped values and provenance), without interpreting the code's membership
    tests; a name none of them holds runs torch's code (its AttributeError)."""
    namespace, attr = vars(unwrap(module)), unwrap(name)
    if type(attr) is str:
        for table_name in _MEMBERS:
            table = namespace.get(table_name)
            if type(table) is dict and attr in table:
                held = _interpret_call(getattr, module, wrap_const("__dict__"))
                if held is INTERPRETER_SIGNALS.EXCEPTION_RAISED:
                    return held
                value_guards.check_namespace_read(held, guard_recorder.source_location)
                table = subscripts.subscript(held, wrap_const(table_name))
                return table if table is INTERPRETER_SIGNALS.EXCEPTION_RAISED else subscripts.subscript(table, name)
    return _interpret_call(wrap_const(_MODULE_GETATTR), module, name)
