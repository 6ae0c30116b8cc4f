"""What each supported torch (2.9 to 2.14) needs from the patch set, checked against eager PyTorch.

Every lane runs this file (``TORCH=2.14 make test``): thunderfx (lazily generated graph modules from
torch 2.12), custom ``autograd.Function``s under thunder.jit and thunderfx (a C ``apply`` from 2.13, a
new ``autograd_function_apply`` form from 2.12) and the import patches that let thunder 0.2.6 import on
2.13+. DTensor placements built in traced code and tensor-parallel thunderfx are cases of
``dtensor_programs.py``; torch.compile outputs that alias an input are in ``test_dynamic_shapes.py``.
"""

from __future__ import annotations

import sys

import pytest
import thunder.dynamo
import torch
from program_generator import Scale  # a non-tensor argument: Dynamo's two autograd_function_apply forms differ

import thunder
import thunder_symbolic
from thunder_symbolic.activation import registry as _registry
from thunder_symbolic.autodiff.autograd_apply import BUILTIN_APPLY_KEY
from thunder_symbolic.import_patches import torch_default_torch_ops
from thunder_symbolic.testing import assert_same, check_against_eager

SIZES = (3, 5, 8)


class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 + x * 0


def double_then_sin(x):
    return Double.apply(x).sin()


def scale_then_square(x):
    return Scale.apply(x, 3.0) ** 2


def _outputs_and_grads(fn, x):
    x = x.detach().clone().requires_grad_()
    out = fn(x)
    out.sum().backward()
    return out.detach(), x.grad


@pytest.mark.parametrize("fn", [double_then_sin, scale_then_square], ids=lambda f: f.__name__)
def test_custom_autograd_function_under_jit_matches_eager_with_one_compile(fn):
    jfn = thunder.jit(fn, cache="symbolic values")
    for n in SIZES:
        x = torch.randn(n, 4)
        assert_same(_outputs_and_grads(jfn, x), _outputs_and_grads(fn, x), path=f"{fn.__name__}({n})")
    assert thunder.cache_misses(jfn) == 1


@pytest.mark.parametrize("fn", [double_then_sin, scale_then_square], ids=lambda f: f.__name__)
def test_custom_autograd_function_under_thunderfx_matches_eager(fn):
    torch._dynamo.reset()
    compiled = thunder.dynamo.thunderfx(fn, cache="symbolic values")
    for n in SIZES:
        x = torch.randn(n, 4)
        assert_same(_outputs_and_grads(compiled, x), _outputs_and_grads(fn, x), path=f"{fn.__name__}({n})")
    programs = [f for info in compiled._backend.subgraph_infos for f in info.thunder_compiled_fns]
    assert programs, "the custom Function should run in a thunder program, not be split off"


def test_thunderfx_of_a_plain_function_matches_eager():
    def f(x, y):
        return (x.sin() * y).softmax(-1) + x.shape[0]

    torch._dynamo.reset()
    compiled = thunder.dynamo.thunderfx(f, cache="symbolic values")
    for n in SIZES:
        x, y = torch.randn(n, 6), torch.randn(6)
        assert_same(compiled(x, y), f(x, y), path=f"f({n})")
    assert compiled._backend.subgraph_infos and all(
        info.thunder_compiled_fns for info in compiled._backend.subgraph_infos
    )


def test_thunder_jit_of_a_builtin_classmethod_argument_is_checked_by_equality():
    # On torch >= 2.13 `Double.apply` is a new object on every read: checked with ==, it is one program.
    check_against_eager(double_then_sin, [torch.randn(n) for n in SIZES], compiles=1)


MODULE_NEEDING_A_PATCH = """
import torch
TABLE = {torch.Tensor: [torch.Tensor.add, torch.Tensor.tsym_removed_method]}
VIEWS = [torch.Tensor.tsym_removed_method]
"""


@pytest.fixture
def module_reading_a_removed_method(tmp_path, monkeypatch):
    (tmp_path / "tsym_reads_removed.py").write_text(MODULE_NEEDING_A_PATCH)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(torch_default_torch_ops, "REMOVED_TENSOR_METHODS", ("tsym_removed_method",))
    yield "tsym_reads_removed"
    sys.modules.pop("tsym_reads_removed", None)


def test_import_patch_lets_a_module_that_reads_a_removed_method_execute(module_reading_a_removed_method):
    name = module_reading_a_removed_method
    with pytest.raises(AttributeError, match="tsym_removed_method"):
        __import__(name)  # what thunder's table of torch methods does on torch >= 2.13 unpatched
    sys.modules.pop(name, None)

    _registry.import_patch(
        name,
        summary="test",
        why="test",
        needed=lambda: True,
    )(torch_default_torch_ops.leave_out_removed_methods)
    try:
        assert name not in _registry.install_import_patches()
        module = __import__(name)
    finally:
        _registry._import_patches[:] = [p for p in _registry._import_patches if p.module_name != name]
    assert module.TABLE == {torch.Tensor: [torch.Tensor.add]} and module.VIEWS == []
    assert not hasattr(torch.Tensor, "tsym_removed_method")
    assert _registry.import_patched(name)


def test_every_import_patch_is_listed_with_its_state_on_this_torch():
    report = {p.target: p for p in thunder_symbolic.status().patches}
    for p in _registry.registered_import_patches():
        info = report[p.target]
        expected = "applied at import" if p.needed() else f"not needed on torch {torch.__version__}"
        assert (info.kind, info.state) == ("at import", expected)
        assert info.summary and info.why


def test_torch_and_thunder_keep_no_stand_in_of_the_import_patches():
    from thunder.torch.default_torch_ops import torch_auto_registered_ops

    def stand_in(fn):
        return getattr(fn, "__module__", None) == torch_default_torch_ops.__name__

    assert not [n for n in torch_default_torch_ops.REMOVED_TENSOR_METHODS if stand_in(getattr(torch.Tensor, n, None))]
    assert not [fn for fns in torch_auto_registered_ops.values() for fn in fns if stand_in(fn)]
    assert getattr(torch.autograd.Function.__dict__["apply"], "__func__", None) is not BUILTIN_APPLY_KEY
