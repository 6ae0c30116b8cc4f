"""thunder's torch.compile executor under symbolic values: each fused region is compiled by Inductor once for
symbolic sizes and called without Dynamo (thunder_symbolic.fusion.inductor_regions). Against eager: outputs at every
size, one Inductor compile per region across sizes, another where a size breaks what the compiled code assumed (a
length of 1), and the unfused region where a call breaks a layout it assumed."""

import warnings

import pytest
import torch
from thunder.executors.torch_compile import torch_compile_ex

import thunder
from thunder_symbolic.fusion import inductor_regions


def executors():
    return [torch_compile_ex, *thunder.get_default_executors()]


@pytest.fixture
def compiles(monkeypatch):
    """Counts the fused regions Inductor compiled; a region left unfused fails the test."""
    made = []
    original = inductor_regions._compile

    def counted(*args):
        compiled = original(*args)
        made.append(args)
        return compiled

    monkeypatch.setattr(inductor_regions, "_compile", counted)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*runs unfused")
        yield made


def rms_norm(x, weight):
    y = x.float()
    y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
    return (y.to(x.dtype) * weight).sum(-1), torch.nn.functional.silu(x[:, 1:])


def rms_norm_across(lengths, cache="symbolic values"):
    """``rms_norm`` jitted with the torch.compile executor, held to eager at each length."""
    jfn = thunder.jit(rms_norm, cache=cache, executors=executors())
    weight = torch.randn(16)
    for length in lengths:
        x = torch.randn(2, length, 16)
        for mine, theirs in zip(jfn(x, weight), rms_norm(x, weight)):
            torch.testing.assert_close(mine, theirs)
    return jfn


def regions(jfn) -> list[str]:
    return [b.sym.name for b in thunder.last_traces(jfn)[-1].bound_symbols if b.sym.name.startswith("TorchCompile")]


def test_a_region_compiles_once_across_lengths(compiles):
    jfn = rms_norm_across((5, 8, 13, 6))
    assert regions(jfn) and thunder.cache_misses(jfn) == 1
    assert len(compiles) == len(regions(jfn))  # one Inductor compile per region, for every length


def test_a_size_that_breaks_an_assumption_gets_its_own_variant(compiles):
    """Compiled at length 5, the region assumes the sliced length (4) is not 1; length 2 slices to 1: a variant."""
    jfn = rms_norm_across((5, 2, 7, 2))
    assert thunder.cache_misses(jfn) == 1
    assert len(compiles) == 2 * len(regions(jfn))


def scaled(x, n):
    return (x[:, :n] * 2).sum(0) + n


def test_int_arguments_and_views_of_varying_strides(compiles):
    jfn = thunder.jit(scaled, cache="symbolic values", executors=executors())
    for rows, cols, n in ((4, 9, 3), (6, 12, 5), (3, 20, 7)):
        base = torch.randn(rows, cols)
        for x in (base, base.t().contiguous().t()):  # (contiguous, then a transposed view)
            torch.testing.assert_close(jfn(x, n), scaled(x, n))
    assert thunder.cache_misses(jfn) <= 2 and compiles


def test_a_region_inductor_cannot_compile_runs_unfused(monkeypatch):
    def failing(*args):
        raise RuntimeError("no C++ compiler")

    monkeypatch.setattr(inductor_regions, "_compile", failing)
    monkeypatch.setattr(inductor_regions, "_warned", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rms_norm_across((5, 8))
    assert any("runs unfused" in str(w.message) and "no C++ compiler" in str(w.message) for w in caught)


def test_constant_values_keep_thunders_torch_compile_regions():
    jfn = rms_norm_across((5,), cache="constant values")
    trace = thunder.last_traces(jfn)[-1]
    fused = [ctx for b in trace.bound_symbols if b.sym.name.startswith("TorchCompile") for ctx in b._call_ctx.values()]
    assert fused and not any(isinstance(fn, inductor_regions.InductorRegion) for fn in fused)


def positions(x):
    rows = x.reshape(-1, x.shape[-1])  # (the count of rows is read from this computed tensor)
    return (rows * 2).sum(-1) + torch.arange(rows.shape[0]).to(x.dtype)


def test_sizes_read_from_computed_tensors_do_not_cut_the_region(compiles):
    """The row count is read from ``rows``; computed from ``x``'s sizes instead, it no longer separates the fused
    operations before it from those after, and the ``arange`` made from it joins them: one region."""
    jfn = thunder.jit(positions, cache="symbolic values", executors=executors())
    for batch, length in ((2, 5), (3, 7), (4, 3)):
        x = torch.randn(batch, length, 8)
        torch.testing.assert_close(jfn(x), positions(x))
    assert regions(jfn) == ["TorchCompile0"]
    assert thunder.cache_misses(jfn) == 1 and len(compiles) == 1


def shifted(x, k):
    return x * 2 + k


def test_a_negative_int_argument_is_fused(compiles):
    """An int argument is a symbol with no sign assumed (a size's is never negative): a negative one fuses."""
    jfn = thunder.jit(shifted, cache="symbolic values", executors=executors())
    for length, k in ((5, -3), (7, 4), (6, -8)):
        x = torch.randn(length)
        torch.testing.assert_close(jfn(x, k), shifted(x, k))
    assert thunder.cache_misses(jfn) == 1 and len(compiles) == 1
