"""Installation and activation: a plain ``import thunder`` runs patched, in any process, with an opt-out."""

import json
import re
import sys
from pathlib import Path

import pytest

import thunder
import thunder_symbolic
from thunder_symbolic.activation import registry as _registry
from thunder_symbolic.activation.compat import SUPPORTED_RANGE
from thunder_symbolic.testing import run_python, run_torchrun

REPO = Path(__file__).resolve().parents[2]

# nn.Linear under symbolic values: fails on upstream 0.2.6 (parameters get symbolic shapes), works patched.
LINEAR_UNDER_SYMBOLIC_VALUES = """
import sys, torch, thunder
m = torch.nn.Linear(8, 4)
jm = thunder.jit(m, cache="symbolic values")
try:
    for b in (3, 5):
        x = torch.randn(b, 8)
        torch.testing.assert_close(jm(x), m(x))
    outcome = "works"
except Exception as e:
    outcome = "fails: " + type(e).__name__
print("patched" if "thunder_symbolic" in sys.modules and sys.modules["thunder_symbolic"].is_active() else "unpatched", outcome)
"""


def test_plain_import_thunder_applies_the_patch_set():
    result = run_python(LINEAR_UNDER_SYMBOLIC_VALUES)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "patched works"


def test_opt_out_leaves_thunder_as_upstream():
    result = run_python(LINEAR_UNDER_SYMBOLIC_VALUES, env={"THUNDER_SYMBOLIC": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[-2] == "unpatched fails: NotImplementedError"


def test_both_torchrun_ranks_run_patched():
    code = """
    import os, thunder, thunder_symbolic
    print(f"rank {os.environ['RANK']} active={thunder_symbolic.is_active()}")
    """
    result = run_torchrun(code, nproc=2, timeout=240)
    assert result.returncode == 0, result.stderr
    # (the ranks write to one pipe: their lines may interleave, "rank 0 active=Truerank 1 active=True")
    assert sorted(re.findall(r"rank \d active=\w+", result.stdout)) == [
        "rank 0 active=True",
        "rank 1 active=True",
    ]


def test_apply_twice_is_a_no_op_and_revert_restores_upstream():
    from thunder.core import proxies

    patched = proxies.tensorproxy
    assert thunder_symbolic.apply() is True
    assert proxies.tensorproxy is patched
    originals = {a.patch.target: a.original for a in _registry.applied_patches()}
    try:
        thunder_symbolic.revert()
        assert not thunder_symbolic.is_active()
        assert proxies.tensorproxy is originals["thunder.core.proxies:tensorproxy"]
        assert "off" in thunder_symbolic.status().activation
    finally:
        thunder_symbolic.apply()
    assert proxies.tensorproxy is not originals["thunder.core.proxies:tensorproxy"]


def test_revert_removes_what_the_patch_set_added():
    from thunder.torch.experimental.dtensor_proxy import DTensorProxy

    added = [a for a in _registry.applied_patches() if a.patch.adds]
    assert any(a.patch.target.endswith("DTensorProxy.full_tensor") for a in added)
    try:
        thunder_symbolic.revert()
        assert not hasattr(DTensorProxy, "full_tensor")
    finally:
        thunder_symbolic.apply()
    assert callable(DTensorProxy.full_tensor)


def test_no_module_keeps_a_replaced_original():
    _registry.import_target_modules()
    originals = {
        id(a.original): a.patch.target
        for a in _registry.applied_patches()
        # an added attribute has no original; a patch that rebinds nothing leaves the original to the others
        if not isinstance(a.owner, type) and not a.patch.adds and a.patch.rebinds
    }
    stale = [
        f"{module.__name__}.{name} is the original of {originals[id(value)]}"
        for module in list(sys.modules.values())
        for name, value in list(getattr(module, "__dict__", {}).items())
        if id(value) in originals
    ]
    assert originals and not stale


def test_every_patch_is_applied_and_listed():
    _registry.import_target_modules()
    report = thunder_symbolic.status()
    assert report.active and report.activation == "on"
    at_import = {p.target for p in _registry.registered_import_patches()}
    assert {p.target for p in report.patches} == {p.target for p in _registry.registered_patches()} | at_import
    usable = {p.target for p in _registry.registered_patches() if p.is_available()}
    assert all(p.state == "applied" for p in report.patches if p.target in usable)
    assert all(p.state.startswith("unavailable: ") for p in report.patches if p.target not in usable | at_import)
    assert all(p.summary and p.why for p in report.patches)


def test_module_entry_point_prints_versions_and_patches():
    result = run_python("import runpy; runpy.run_module('thunder_symbolic', run_name='__main__')")
    assert result.returncode == 0, result.stderr
    assert f"lightning-thunder {thunder.__version__}" in result.stdout
    assert "activation: on" in result.stdout
    for p in _registry.registered_patches():
        assert p.target in result.stdout


def test_unsupported_thunder_version_is_refused_with_a_clear_message():
    code = """
    import warnings, thunder
    thunder.__version__ = "0.2.7"
    import thunder_symbolic
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        applied = thunder_symbolic.apply()
    print(applied, thunder_symbolic.is_active())
    print(caught[-1].message)
    print(thunder_symbolic.status().activation)
    """
    result = run_python(code, env={"THUNDER_SYMBOLIC": "0"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False False"
    assert "lightning-thunder 0.2.7" in lines[1] and SUPPORTED_RANGE in lines[1]
    assert lines[2].startswith("refused:")


@pytest.mark.parametrize("torch_version", ["2.15.0", "2.8.0", "3.0.0"])
def test_unsupported_torch_version_is_named(torch_version):
    from thunder_symbolic.activation.compat import unsupported_reason

    message = unsupported_reason("0.2.6", torch_version)
    assert f"torch {torch_version}" in message and SUPPORTED_RANGE in message


@pytest.mark.parametrize("torch_version", ["2.9.1+cu128", "2.10.0", "2.12.1", "2.13.0", "2.14.1+cu130"])
def test_supported_torch_versions_are_accepted(torch_version):
    from thunder_symbolic.activation.compat import unsupported_reason

    assert unsupported_reason("0.2.6", torch_version) is None


def test_installed_thunder_is_imported_from_the_repository_root():
    assert not (REPO / "thunder" / "__init__.py").exists()
    assert Path(thunder.__file__).resolve().parent != REPO / "thunder"
    result = run_python("import thunder; print(thunder.__file__)", cwd=str(REPO))
    assert result.returncode == 0, result.stderr
    assert "site-packages" in result.stdout and str(REPO / "thunder" / "__init__") not in result.stdout


def test_importing_the_package_first_applies_it_without_the_start_up_hook():
    # Without the hook of thunder_symbolic.pth (a `python -S` or a custom site), importing the package
    # installs the import patches before it imports thunder itself, then applies the patch set.
    code = """
    import json, sys
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_ThunderFinder"]
    import thunder_symbolic, thunder
    states = [p.state for p in thunder_symbolic.status().patches if p.kind == "at import"]
    print(json.dumps([thunder_symbolic.is_active(), states]))
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    active, states = json.loads(result.stdout.splitlines()[-1])
    assert active and states
    assert all(state == "applied at import" or state.startswith("not needed on torch") for state in states)


def test_opt_out_keeps_the_import_patches_only():
    code = """
    import thunder, thunder_symbolic
    print(thunder_symbolic.is_active(), thunder_symbolic.status().activation)
    """
    result = run_python(code, env={"THUNDER_SYMBOLIC": "0"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "False off (THUNDER_SYMBOLIC=0)"
