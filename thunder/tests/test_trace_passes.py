"""Passes that make fewer operations before thunder's executors run (thunder_symbolic.passes): the values, the
gradients and which tensors are the same object stay eager PyTorch's; only calls that do nothing go."""

import pytest
import torch

import thunder

CACHES = pytest.mark.parametrize("cache", ["constant values", "symbolic values"])


def conversions(x, w):
    same = x.to(torch.float32)  # (a float32 tensor: eager returns x)
    moved = x.to("cpu").type_as(w)  # (both return x)
    return same * 2, moved + 1, x.float(), x.to(torch.float32, copy=True), x.to(torch.bfloat16), w.double()


def executed(jfn) -> list[str]:
    """The names of the calls the last execution trace makes, conversions only."""
    trace = thunder.last_traces(jfn)[-1]
    return [b.sym.name for b in trace.bound_symbols if b.sym.name in ("to", "type_as", "float", "double")]


@CACHES
def test_conversions_that_return_their_input_are_not_executed(cache):
    jfn = thunder.jit(conversions, cache=cache)
    for n in (3, 5):
        x, w = torch.randn(n), torch.randn(2)
        expected, actual = conversions(x, w), jfn(x, w)
        for mine, theirs in zip(actual, expected):
            torch.testing.assert_close(mine, theirs)
            assert mine.dtype is theirs.dtype
        assert actual[2] is x and expected[2] is x  # the same object, as eager returns
        assert actual[3] is not x  # (copy=True copies)
    # the copy, the conversion to bfloat16 and w.double() run; the four conversions to what x already is do not
    assert executed(jfn) == ["to", "to", "to"]


def test_gradients_through_a_conversion_that_returns_its_input():
    def f(x, w):
        return x.to(torch.float32), (x.float() * w).sum()

    jfn = thunder.jit(f, cache="symbolic values")
    x, w = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
    x_, w_ = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    (a, s), (b, t) = jfn(x, w), f(x_, w_)
    (a.sum() + s).backward()
    (b.sum() + t).backward()
    torch.testing.assert_close(x.grad, x_.grad)
    torch.testing.assert_close(w.grad, w_.grad)
    assert a is x


def reads_computed_sizes(x, w):
    rows = (x * w).reshape(-1, x.shape[-1])  # (a computed tensor whose sizes are read)
    n, width = rows.shape
    middle = torch.cat([rows, rows], 1)
    half = middle.shape[1] // 2  # (twice the width, halved: the width itself)
    return rows.sum(-1) * n + torch.arange(n), middle[:, :half] - rows, width + half


def shape_reads_of_computed_tensors(jfn) -> list[str]:
    trace = thunder.last_traces(jfn)[-1]
    arguments = {a.name for a in trace.args if hasattr(a, "name")}
    return [b.args[0].name for b in trace.bound_symbols if b.sym.name == "shape" and b.args[0].name not in arguments]


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_sizes_of_computed_tensors_are_computed_from_the_inputs(cache):
    jfn = thunder.jit(reads_computed_sizes, cache=cache)  # (the default executors include a fusing one)
    for shape in ((2, 3, 4), (3, 5, 4), (4, 2, 6)):
        x, w = torch.randn(shape), torch.randn(shape[-1])
        for mine, theirs in zip(jfn(x, w), reads_computed_sizes(x, w)):
            torch.testing.assert_close(mine, theirs)
    assert shape_reads_of_computed_tensors(jfn) == []
    if cache == "symbolic values":
        assert thunder.cache_misses(jfn) == 1


def test_gradients_of_a_program_reading_computed_sizes():
    def f(x, w):
        rows = (x * w).reshape(-1, x.shape[-1])
        return (rows * rows.shape[0]).sum() + rows[: rows.shape[0] // 2].sum()

    jfn = thunder.jit(f, cache="symbolic values")
    for shape in ((2, 3, 4), (4, 5, 4)):
        x, w = torch.randn(shape, requires_grad=True), torch.randn(shape[-1], requires_grad=True)
        x_, w_ = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        jfn(x, w).backward()
        f(x_, w_).backward()
        torch.testing.assert_close(x.grad, x_.grad)
        torch.testing.assert_close(w.grad, w_.grad)
    assert thunder.cache_misses(jfn) == 1
