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
    from thunder_symbolic.activation import registry as _registry
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
from thunder_symbolic.activation import registry as _registry
thunder_symbolic.revert()
_registry.patch({target!r}, summary="planted", why="a fault")({make})
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print("apply:", thunder_symbolic.apply())
report(caught)
"""


KEEP = "lambda original: original"
FAILS = "fails"  # (defined in the snippet: a setup that raises)


@pytest.mark.parametrize(
    "target, make, named",
    [
        # a missing target
        ("thunder.core.prims:no_such_function", KEEP, "AttributeError"),
        # a setup that raises (registered last, on thunder's last module: every other patch is applied first)
        ("thunder.core.utils:check", FAILS, "planted setup failure"),
        # a later module that does not exist, found out up front
        ("thunder.no_such_module:f", KEEP, "module thunder.no_such_module not found"),
    ],
    ids=["missing-target", "setup-raises", "later-module-missing"],
)
def test_a_patch_that_cannot_apply_reverts_every_patch_applied_before_it(target, make, named):
    out = run("def fails(original):\n    raise ValueError('planted setup failure')\n" + reapply_with(target, make))
    assert "apply: False" in out, out
    assert_upstream(out, target, named)


def test_a_patch_of_a_later_module_that_fails_at_its_import_reverts_the_whole_set():
    out = run(
        reapply_with("thunder.dynamo.utils:no_such_function", KEEP)
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


# --- Shared sums: a rank that dies ----------------------------------------------------------------------------

# One rank's program (launched without torchrun, whose agent would stop the others as soon as one dies). The last
# rank kills itself with SIGKILL at ``where``; rank 0 reports what its shared sums raised, and how soon.
RANK = """
import json, os, signal, sys, time
from datetime import timedelta
import torch, torch.distributed as dist
from thunder_symbolic.distributed import shared_sums

rank, world, where, store = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
dist.init_process_group(
    "gloo", init_method=f"file://{store}", rank=rank, world_size=world, timeout=timedelta(seconds=120)
)
victim = rank == world - 1
def die():
    os.kill(os.getpid(), signal.SIGKILL)

t, out = torch.full((4,), float(rank + 1)), torch.empty(4)
began, error = time.monotonic(), None
try:
    if where == "setup" and victim:
        die()
    sums = shared_sums.for_group(dist.group.WORLD, 64)
    assert sums is not None
    torch.testing.assert_close(sums.finish(sums.start(t, out)), torch.full((4,), world * (world + 1) / 2))
    if victim:
        if where == "mid-sum":
            sums.start(t, out)  # (published, never read)
        die()
    began = time.monotonic()
    for _ in range(2 * shared_sums.RING):
        sums.finish(sums.start(t, out))
except Exception as e:
    error = f"{type(e).__name__}: {e}"
if rank == 0:
    print(json.dumps({"error": error, "seconds": time.monotonic() - began, "pid": os.getpid()}), flush=True)
os._exit(0)
"""


def _launch_with_a_rank_killed(tmp_path, world: int, where: str) -> dict:
    import json
    import os
    import subprocess
    import sys

    program = tmp_path / "rank.py"
    program.write_text(RANK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(OMP_NUM_THREADS="1", THUNDER_SYMBOLIC_SHARED_SUMS="1")
    ranks = [
        subprocess.Popen(
            [sys.executable, str(program), str(rank), str(world), where, str(tmp_path / "store")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for rank in range(world)
    ]
    try:
        out, err = ranks[0].communicate(timeout=100)
    finally:
        for process in ranks:
            process.kill()
            process.wait()
    assert ranks[0].returncode == 0, err[-3000:]
    return json.loads(out.splitlines()[-1])


@pytest.mark.distributed
@pytest.mark.parametrize("world", [2, 4])
@pytest.mark.parametrize("where", ["setup", "mid-sum", "between-sums"])
def test_a_rank_that_dies_makes_shared_sums_raise_within_seconds_and_leaves_no_file(tmp_path, world, where):
    import os

    report = _launch_with_a_rank_killed(tmp_path, world, where)
    dead = world - 1
    assert report["error"] is not None
    if where == "setup":  # (the group's setting up is gloo's collective: gloo finds the peer gone)
        assert report["seconds"] < 30, report
    else:
        assert f"rank(s) [{dead}]" in report["error"] and "ended or stopped" in report["error"], report
        assert report["seconds"] < 5, report
    left = [n for n in os.listdir("/dev/shm") if n.startswith(f"thunder-symbolic-sums-{report['pid']}-")]
    assert left == []


def test_a_file_whose_rank_0_is_gone_is_removed_by_the_next_group(monkeypatch):
    """rank 0 killed between making the file and unlinking it: the file names its process, which is gone."""
    import os
    import subprocess
    import sys

    from thunder_symbolic.distributed import shared_sums

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(ended.stdout)
    stale = f"/dev/shm/thunder-symbolic-sums-{pid}-1-planted"
    mine = f"/dev/shm/thunder-symbolic-sums-{os.getpid()}-{shared_sums._identity()[1]}-live"
    for path in (stale, mine):
        with open(path, "wb") as f:
            f.write(b"\0" * 64)
    try:
        made = shared_sums._create(1 << 12)
        assert made is not None
        os.unlink(made[0])
        assert not os.path.exists(stale)
        assert os.path.exists(mine)  # (its process runs: a group that is setting up)
    finally:
        for path in (stale, mine):
            if os.path.exists(path):
                os.unlink(path)
