"""Faults injected the way they happen: the patch set applies all or nothing.

Each case runs in a fresh interpreter (activation happens at ``import thunder``). A failure leaves thunder exactly
upstream's: no binding of a thunder module, no class member and no patched target holds this package's code, one
``ThunderSymbolicWarning`` names the patch and the error, ``is_active()`` is False, ``thunder.jit`` runs, and
``python -m thunder_symbolic`` says so with a non-zero exit status.
"""

import pytest

from thunder_symbolic.testing import run_python

# What the snippets share: the check that thunder is upstream's, and a jitted call checked against eager.
PRELUDE = """
import sys, types, warnings
import torch

def patched_bindings():
    from thunder_symbolic import _registry
    found = []
    for name, module in list(sys.modules.items()):
        if not (name == "thunder" or name.startswith("thunder.")):
            continue
        for key, value in list(vars(module).items()):
            if key.startswith("__"):  # (thunder's loader is the start-up hook's, also with the patch set off)
                continue
            members = vars(value).items() if isinstance(value, type) and value.__module__.startswith("thunder") else ()
            for where, item in [(f"{name}.{key}", value), *((f"{name}.{key}.{k}", v) for k, v in members)]:
                item = getattr(item, "__func__", item)
                if str(getattr(item, "__module__", "")).startswith("thunder_symbolic"):
                    found.append(where)
    for p in _registry.registered_patches():
        if p.trigger_module in sys.modules:
            try:
                owner, attribute = _registry._resolve_owner(p, sys.modules[p.module_name])
                value = _registry._raw_attribute(owner, attribute)
            except (AttributeError, KeyError):
                continue
            value = getattr(value, "__func__", value)
            if str(getattr(value, "__module__", "")).startswith("thunder_symbolic"):
                found.append(p.target)
    return sorted(set(found))

def jit_runs():
    import thunder
    def f(x):
        return x.sin() * 2
    x = torch.randn(3)
    torch.testing.assert_close(thunder.jit(f)(x), f(x))
    return "jit runs"

def report(caught):
    import thunder_symbolic
    ours = [str(w.message) for w in caught if issubclass(w.category, thunder_symbolic.ThunderSymbolicWarning)]
    print("warnings:", len(ours))
    for message in ours:
        print("warning:", message)
    print("active:", thunder_symbolic.is_active())
    print("patched:", patched_bindings())
    print(jit_runs())
"""


def run(snippet: str, **kwargs):
    result = run_python(PRELUDE + snippet, **kwargs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def assert_upstream(out: str, *named: str):
    assert "warnings: 1" in out, out
    warning = next(line for line in out.splitlines() if line.startswith("warning:"))
    assert all(n in warning for n in named), warning
    assert "thunder runs unpatched" in warning, warning
    assert "active: False" in out, out
    assert "patched: []" in out, out
    assert "jit runs" in out, out


def test_the_check_of_upstream_bindings_sees_the_patch_set():
    """The probe the other tests rely on finds this package's code in thunder when it is applied."""
    out = run("""
import thunder
print("patched count:", len(patched_bindings()) > 100)
""")
    assert "patched count: True" in out, out


# A patch module that cannot be imported: a finder planted before thunder's import fails it.
FAILING_PATCH_MODULE = """
import importlib.abc, importlib.util

class Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name == "thunder_symbolic.patches.core_prims":
            return importlib.util.spec_from_loader(name, self)
    def exec_module(self, module):  # (the error raised by the module's own code)
        exec(compile("raise RuntimeError('planted import failure')", "core_prims.py", "exec"), vars(module))
sys.meta_path.insert(0, Broken())
"""


def test_a_patch_module_that_fails_to_import_leaves_thunder_upstream():
    out = run(
        FAILING_PATCH_MODULE
        + """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder
report(caught)
import importlib, thunder
importlib.import_module("thunder")
print(jit_runs(), "again")
"""
    )
    assert_upstream(out, "thunder_symbolic.patches.core_prims", "planted import failure")
    assert "jit runs again" in out


def test_the_status_report_names_a_failure_and_exits_non_zero():
    result = run_python(
        "import sys, runpy\n" + FAILING_PATCH_MODULE + "runpy.run_module('thunder_symbolic', run_name='__main__')\n"
    )
    assert result.returncode == 1, result.stderr[-3000:]
    assert "activation: refused: thunder_symbolic.patches.core_prims failed to import" in result.stdout, result.stdout


def test_the_status_report_exits_zero_when_active_or_switched_off():
    for env in ({}, {"THUNDER_SYMBOLIC": "0"}):
        result = run_python("import runpy; runpy.run_module('thunder_symbolic', run_name='__main__')", env=env)
        assert result.returncode == 0, (env, result.stderr[-3000:])


# After a revert (thunder imported, patched, then restored), a patch registered for the next apply.
def reapply_with(target: str, make: str) -> str:
    return f"""
import thunder, thunder_symbolic
from thunder_symbolic import _registry
thunder_symbolic.revert()
_registry.patch({target!r}, summary="planted", why="a fault")({make})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("apply:", thunder_symbolic.apply())
report(caught)
"""


def test_a_missing_target_reverts_every_patch_applied_before_it():
    out = run(reapply_with("thunder.core.prims:no_such_function", "lambda original: original"))
    assert "apply: False" in out, out
    assert_upstream(out, "thunder.core.prims:no_such_function", "AttributeError")


def test_a_patch_whose_setup_raises_reverts_every_patch_applied_before_it():
    # (registered last, on thunder's last module: every other patch of the imported modules is applied first)
    out = run(
        "def fails(original):\n    raise ValueError('planted setup failure')\n"
        + reapply_with("thunder.core.utils:check", "fails")
    )
    assert "apply: False" in out, out
    assert_upstream(out, "thunder.core.utils:check", "planted setup failure")


def test_a_later_module_that_does_not_exist_is_found_out_up_front():
    out = run(reapply_with("thunder.no_such_module:f", "lambda original: original"))
    assert "apply: False" in out, out
    assert_upstream(out, "thunder.no_such_module:f", "module thunder.no_such_module not found")


def test_a_patch_of_a_later_module_that_fails_at_its_import_reverts_the_whole_set():
    out = run(
        reapply_with("thunder.dynamo.utils:no_such_function", "lambda original: original")
        + """
print("before the import:", thunder_symbolic.is_active(), len(patched_bindings()) > 100)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder.dynamo
report(caught)
"""
    )
    assert "apply: True" in out, out
    assert "before the import: True True" in out, out
    after = out.split("before the import:")[1]
    assert_upstream(after, "thunder.dynamo.utils:no_such_function", "AttributeError")


@pytest.mark.parametrize("switch", ["0", "off"])
def test_switched_off_thunder_is_upstream(switch):
    out = run(
        """
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import thunder
print("patched:", patched_bindings())
print(jit_runs())
""",
        env={"THUNDER_SYMBOLIC": switch},
    )
    assert "patched: []" in out and "jit runs" in out, out
