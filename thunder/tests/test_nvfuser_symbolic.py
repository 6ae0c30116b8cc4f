"""Shape-taking operations nvFuser fuses (full, reshape, broadcast_in_dim, pad, uniform, iota, slice) under
symbolic values: outputs equal eager over several shapes with one compile.

On CUDA (``scripts/gpu_checks.sh`` runs these on a GPU) each operation must also run inside an nvFuser
fusion; on CPU the same programs run through the torch executor.
"""

import pytest
import torch
import torch.nn.functional as F

import thunder
from thunder.executors.nvfuserex import nvfuser_available
from thunder_symbolic.testing import check_against_eager


# nvFuser has wheels for some torch series only (requirements/torch-*.txt): without it a GPU has nothing to fuse.
_CUDA_SKIP = (
    "needs CUDA"
    if not torch.cuda.is_available()
    else None if nvfuser_available() else f"needs nvFuser (no wheel installed for torch {torch.__version__})"
)


@pytest.fixture(
    params=["cpu", pytest.param("cuda", marks=pytest.mark.skipif(_CUDA_SKIP is not None, reason=str(_CUDA_SKIP)))]
)
def device(request):
    return request.param


SIZES = (5, 9, 16, 33)


def fusions_of(jf) -> list:
    """The nvFuser regions of the last execution trace."""
    trace = thunder.last_traces(jf)[-1]
    return [b for b in trace.bound_symbols if b.sym.name.startswith("nvFusion")]


def assert_fused(jf, device, *prim_names):
    """On CUDA: each of ``prim_names`` ran inside an nvFuser fusion ("a|b": either of them)."""
    if device != "cuda":
        return
    fusions = fusions_of(jf)
    assert fusions, f"no nvFuser fusion in\n{thunder.last_traces(jf)[-1]}"
    fused = {sub.sym.name for f in fusions for sub in f.subsymbols}
    missing = [p for p in prim_names if not fused & set(p.split("|"))]
    assert not missing, f"{missing} not fused (fused: {sorted(fused)})"


def rows(device, *sizes, cols=4):
    return [(torch.randn(n, cols, device=device),) for n in sizes]


def test_full_of_a_symbolic_shape(device):
    def f(x):
        return torch.zeros(x.shape[0], 4, device=x.device) + x * 2

    jf = check_against_eager(f, rows(device, *SIZES), compiles=1)
    assert_fused(jf, device, "full")


def test_reshape_with_symbolic_extents(device):
    def f(x):
        return (x + 1).reshape(x.shape[0] * 2, 2).sum(-1)

    jf = check_against_eager(f, rows(device, *SIZES), compiles=1)
    assert_fused(jf, device, "reshape")


def test_broadcast_in_dim_to_a_symbolic_shape(device):
    def f(x, bias):
        return bias.expand(x.shape[0], 4) * x

    args = [(x, torch.randn(1, 4, device=device)) for (x,) in rows(device, *SIZES)]
    jf = check_against_eager(f, args, compiles=1)
    assert_fused(jf, device, "broadcast_in_dim")


def test_pad_by_a_symbolic_width(device):
    def f(x, n):
        return F.pad(x * 3, (0, 0, 0, n))

    args = [(x, n) for (x,), n in zip(rows(device, *SIZES), (1, 2, 3, 4))]
    jf = check_against_eager(f, args, compiles=1)
    assert_fused(jf, device, "pad")


def test_uniform_of_a_symbolic_shape(device):
    def f(x):
        return torch.rand(x.shape[0], 4, device=x.device) + x

    jf = thunder.jit(f, cache="symbolic values")
    for (x,) in rows(device, *SIZES):
        noise = jf(x) - x
        assert noise.shape == x.shape
        assert bool(((noise >= 0) & (noise < 1)).all())
    assert thunder.cache_misses(jf) == 1
    assert_fused(jf, device, "uniform|uniform_philox")


def test_iota_and_slice_of_symbolic_lengths(device):
    def f(x):
        positions = torch.arange(x.shape[0], device=x.device)
        return x[1:] * positions[1:, None]

    jf = check_against_eager(f, rows(device, *SIZES), compiles=1)
    assert_fused(jf, device, "iota")


def test_kv_cache_decode_step(device):
    def step(q, k_cache, v_cache, k, v):
        k_all, v_all = torch.cat([k_cache, k], dim=2), torch.cat([v_cache, v], dim=2)
        return F.scaled_dot_product_attention(q, k_all, v_all), k_all, v_all

    def args(length):
        shape = (1, 2, length, 8)
        return (
            torch.randn(1, 2, 1, 8, device=device),
            torch.randn(shape, device=device),
            torch.randn(shape, device=device),
            torch.randn(1, 2, 1, 8, device=device),
            torch.randn(1, 2, 1, 8, device=device),
        )

    check_against_eager(step, [args(n) for n in SIZES], compiles=1, rtol=1e-4, atol=1e-4)
