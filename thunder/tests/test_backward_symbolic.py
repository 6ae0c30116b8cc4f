"""Backwards under symbolic values: gradients equal eager's, one program across shapes where provable.

thunder builds the backward after the prologue. What it reads of a size there is either implied for
every input, checked after the prologue (a late guard), or the call falls back to exact shapes.
"""

import pytest
import torch
import torch.nn.functional as F
from thunder.core.prims import PrimIDs

import thunder
import thunder_symbolic
from thunder_symbolic.autodiff import grad_rules
from thunder_symbolic.validate import validate_traces_of

SHAPES = [(6, 4), (9, 4), (7, 6), (6, 4), (11, 8)]  # 4 distinct shapes, odd and even row counts


def check_gradients(fn, shapes, *, compiles, parameters=(), **jit_options):
    """Outputs and gradients (inputs and ``parameters``) equal eager's for a random cotangent each call."""
    jf = thunder.jit(fn, cache="symbolic values", **jit_options)
    for i, shape in enumerate(shapes):
        x = torch.randn(*shape, requires_grad=True)
        x_ref = x.detach().clone().requires_grad_()
        out, expected = jf(x), fn(x_ref)
        torch.testing.assert_close(out, expected, msg=lambda m: f"call {i} {shape} output: {m}")
        cotangent = torch.randn_like(expected)
        grads = torch.autograd.grad(out, [x, *parameters], cotangent)
        expected_grads = torch.autograd.grad(expected, [x_ref, *parameters], cotangent)
        for j, (g, e) in enumerate(zip(grads, expected_grads)):
            torch.testing.assert_close(g, e, msg=lambda m: f"call {i} {shape} gradient {j}: {m}")
        assert validate_traces_of(jf) == 3  # prologue, forward and backward traces
    assert thunder.cache_misses(jf) == compiles, thunder_symbolic.recompile_reasons(jf)
    return jf


def _complex_pairs(x):
    return torch.view_as_complex(x.reshape(x.shape[0], -1, 2))


GRADIENT_PROGRAMS = {
    # 0.2.6's slice rule baked its pad widths in, and its cat rule could not be built from symbolic
    # sizes: each of these needed one program per input shape.
    "slice scaled by a size": lambda x: x[1:] * x.shape[0],
    "slice of half the rows": lambda x: x[: x.shape[0] // 2] * 2,
    "strided slices": lambda x: x[1::3, ::2].exp(),
    "two overlapping slices": lambda x: x[1:] + x[:-1],
    "expand of a row": lambda x: x[:1].expand(x.shape[0], -1) * x,
    "reshape then slice": lambda x: x.reshape(-1)[: x.numel() // 2],
    "cat": lambda x: torch.cat([x, x]) * 2,
    "cat of three along columns": lambda x: torch.cat([x, x[:, :2], x * 2], 1).sin(),
    "rotate halves (RoPE)": lambda x: torch.cat([-x[..., x.shape[-1] // 2 :], x[..., : x.shape[-1] // 2]], -1) * x,
    "stack": lambda x: torch.stack([x, x * 2]).sum(0),
    "pad": lambda x: F.pad(x, (1, 2)) * x.shape[1],
    "softmax": lambda x: torch.softmax(x, -1) * x,
    "layer norm": lambda x: F.layer_norm(x, x.shape[-1:]),
    "transpose matmul": lambda x: x.t() @ x,
    "cross entropy": lambda x: F.cross_entropy(x, torch.zeros(x.shape[0], dtype=torch.long)),
    # Fallback ops: 0.2.6's backward of each is a fake run of torch's vjp on the traced sizes, and the torch
    # executor's operator re-ran the forward's fake run while the backward was built.
    "new_full and new_zeros": lambda x: x.new_full((x.shape[0], 2), 0.5) + x.new_zeros(x.shape[0], 1) + x[:, :2],
    "narrow to the second half": lambda x: torch.narrow(x, 0, x.shape[0] // 2, x.shape[0] - x.shape[0] // 2) * 2,
    "narrow from the end": lambda x: torch.narrow(x, 1, -2, 2).exp(),
    "complex views": lambda x: (
        torch.view_as_real(torch.view_as_complex(x.reshape(x.shape[0], -1, 2)).resolve_conj()).flatten(1).sin()
    ),
    "polar": lambda x: torch.view_as_real(torch.polar(x.abs(), x)).sum(-1),
    # Complex products: 0.2.6's gradient of a product was the other factor's, not its conjugate's (either cache).
    "complex rotary embedding": lambda x: torch.view_as_real(
        _complex_pairs(x) * torch.polar(torch.ones(x.shape[1] // 2), torch.arange(x.shape[1] // 2) * 0.5)
    ).flatten(1),
    "complex square": lambda x: torch.view_as_real(_complex_pairs(x) * _complex_pairs(x)).flatten(1),
    "complex times its conjugate": lambda x: torch.view_as_real(_complex_pairs(x).conj() * _complex_pairs(x) * 2j),
    # The gradient of a slice or narrow pads with zeros; the torch executor's pad takes no complex zero.
    "slice of a complex tensor": lambda x: torch.view_as_real(_complex_pairs(x)[1:] * 2).flatten(1),
    "narrow of a complex tensor": lambda x: torch.view_as_real(torch.narrow(_complex_pairs(x), 0, 1, 2)).exp(),
    # A 0-d CPU tensor is broadcast as a number would be; 0.2.6 gave it the other operand's gradient: a failed
    # backward, or a wrong gradient where the shapes matched (either cache).
    "plus its sum": lambda x: x + x.sum(),
    "zeros plus its sum": lambda x: torch.zeros(x.shape[0], 3) + x.sum(),
    "divided by its norm": lambda x: x / (x.abs().sum() + 1),
    "times an element": lambda x: x * x[0, 0],
    "where with its mean": lambda x: torch.where(x > 0, x, x.mean()),
    "atan2 with its norm": lambda x: torch.atan2(x, x.abs().sum() + 1),
    "fmod by its sum": lambda x: torch.fmod(x * 7, x.sum().abs() + 0.5),
    # No grad rule in 0.2.6 ("Failed to find a gradient transform").
    "minimum of flipped rows": lambda x: torch.minimum(x, x.flip(0) * 0.5),
    "minimum with ties": lambda x: torch.minimum(x, x.clamp(max=0)),
    "remainder": lambda x: torch.remainder(x * 7, x.abs() + 0.5),
    "lerp with broadcast operands": lambda x: torch.lerp(x, x[:1] * 2, x[:, :1].sigmoid()),
    # 0.2.6 paired index_put's gradients with (x, indices): the values' gradient was dropped (either cache).
    "index_put of a row": lambda x: x.index_put((torch.tensor([0, 2]),), x[1] * 3),
    # Tensor.unfold ran F.unfold (im2col) in 0.2.6, whose gradient it took too; its primitive had no gradient.
    "overlapping windows": lambda x: x.unfold(0, 3, 1).exp().sum(-1),
    "windows with gaps between them": lambda x: x.unfold(0, 2, 3) * torch.arange(2.0),
    "windows of the last dim": lambda x: x.unfold(-1, 2, 2).flatten(1).sin(),
    # 0.2.6's nll_loss backward failed: an unresolved ignore_index, a float64 total weight, a 3-D gradient made 4-D.
    "nll loss": lambda x: F.nll_loss(torch.log_softmax(x, -1), torch.arange(x.shape[0]) % x.shape[1]),
    "nll loss, weighted sum ignoring a class": lambda x: F.nll_loss(
        x, torch.arange(x.shape[0]) % x.shape[1], weight=torch.ones(x.shape[1]), ignore_index=1, reduction="sum"
    ),
    "nll loss of a 3-D input": lambda x: F.nll_loss(torch.stack([x, x * 2], -1), torch.zeros(x.shape[0], 2).long()),
}


DETACHED_READS = {
    "detached": lambda t, w: (t * w.detach()).exp(),
    "its data": lambda t, w: t * w.data + 1,
    "detached and not": lambda t, w: t * w.detach() + t * w * 3,
    "a detached product": lambda t, w: (t * w).detach() * t + w.data.sum(),
}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("name", DETACHED_READS)
def test_a_parameter_read_detached_gets_no_gradient(name, cache):
    """0.2.6's gradient of ``detach`` (a fake run of torch's vjp) was zeros: a parameter read only detached got a
    zero ``.grad`` where eager leaves it None (an optimizer then steps it: weight decay, momentum), and an output
    computed only from it required grad, either cache."""
    fn = DETACHED_READS[name]
    jf = thunder.jit(fn, cache=cache)
    for rows in (3, 5):
        t = torch.randn(rows, 4, requires_grad=True)
        w = torch.nn.Parameter(torch.randn(4))
        t_ref, w_ref = t.detach().clone().requires_grad_(), torch.nn.Parameter(w.detach().clone())
        out, expected = jf(t, w), fn(t_ref, w_ref)
        torch.testing.assert_close(out, expected)
        cotangent = torch.randn_like(expected)
        out.backward(cotangent)
        expected.backward(cotangent)
        torch.testing.assert_close(t.grad, t_ref.grad)
        assert (w.grad is None) == (w_ref.grad is None), (w.grad, w_ref.grad)
        if w_ref.grad is not None:
            torch.testing.assert_close(w.grad, w_ref.grad)
    w = torch.nn.Parameter(torch.randn(4))
    assert not thunder.jit(lambda t: t * w.detach(), cache=cache)(torch.randn(3, 4)).requires_grad
    assert thunder.cache_misses(jf) == (1 if cache == "symbolic values" else 2)


def test_a_broadcasting_polar_gets_eager_gradients():
    """Its forward is the fake run (one program per shape); its gradient sums over the broadcast dim."""
    check_gradients(lambda x: torch.view_as_real(torch.polar(x[:1].abs(), x)), SHAPES, compiles=len(set(SHAPES)))


COMPLEX_GRADIENTS_THUNDER_GETS_WRONG = {
    "DIV": lambda x: torch.view_as_real(_complex_pairs(x) / (_complex_pairs(x) + 2)),
    "EXP": lambda x: torch.view_as_real(_complex_pairs(x).exp()),
    "MATMUL": lambda x: torch.view_as_real(_complex_pairs(x).t() @ _complex_pairs(x)),
    "SQRT": lambda x: torch.view_as_real(_complex_pairs(x).sqrt()),  # an augmented forward, not a grad rule
}


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("op", COMPLEX_GRADIENTS_THUNDER_GETS_WRONG)
def test_a_gradient_thunder_gets_wrong_for_complex_tensors_is_refused(op, cache):
    """0.2.6's rules never conjugate: these gradients differed from eager's, silently, under either cache."""
    fn = COMPLEX_GRADIENTS_THUNDER_GETS_WRONG[op]
    x = torch.randn(4, 6, requires_grad=True)
    with pytest.raises(NotImplementedError, match=f"thunder's gradient of {op} is not the conjugate"):
        thunder.jit(fn, cache=cache)(x)
    with torch.no_grad():  # without a backward the forward is right, and runs
        torch.testing.assert_close(thunder.jit(fn, cache=cache)(x), fn(x))


LISTED_TENSORS = {
    "vstack": lambda x: torch.vstack([x, x * 2]) * 3 + x.sum(),
    "column_stack": lambda x: torch.column_stack([x.exp(), x]),
}


@pytest.mark.parametrize("name", LISTED_TENSORS)
def test_a_fallback_op_s_listed_tensors_get_their_gradients(name):
    """0.2.6 paired a fallback op's gradients with its arguments one level deep: those of tensors in a list
    were dropped, silently (either cache). Its fake run pins the sizes: one program per shape."""
    check_gradients(LISTED_TENSORS[name], SHAPES, compiles=len(set(SHAPES)))


@pytest.mark.parametrize("executor", ["torch", "torch.compile"])
@pytest.mark.parametrize("name", GRADIENT_PROGRAMS)
def test_gradients_equal_eager_across_shapes_from_one_program(name, executor):
    from thunder.executors.torch_compile import torch_compile_ex

    options = {"executors": [torch_compile_ex]} if executor == "torch.compile" else {}
    check_gradients(GRADIENT_PROGRAMS[name], SHAPES, compiles=1, **options)


def test_module_parameters_get_eager_gradients_from_one_program():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    shapes = [(6, 5), (9, 5), (2, 5), (6, 5)]
    check_gradients(model, shapes, compiles=1, parameters=list(model.parameters()))


def test_a_size_the_backward_reads_is_checked_after_the_prologue():
    # var_mean's grad rule branches on numel != 0 after the prologue is built: the empty batch must not
    # reuse the program built for a non-empty one.
    jf = check_gradients(lambda x: F.layer_norm(x, (5,)) * 2, [(6, 5), (8, 5), (0, 5), (5, 5)], compiles=2)
    (miss,) = thunder_symbolic.recompile_reasons(jf)
    assert "!= 0) failed (recorded at transforms.py" in str(miss) and "(building the backward)" in str(miss)


@pytest.fixture
def upstream_slice_rule():
    """thunder 0.2.6's own slice grad rule, which converts its pad widths to ints, for one test."""
    ours = grad_rules.rules().pop(PrimIDs.SLICE)
    try:
        yield thunder.core.transforms._grad_fn_map[PrimIDs.SLICE]
    finally:
        grad_rules.rules()[PrimIDs.SLICE] = ours


def test_a_size_baked_into_the_backward_is_pinned(upstream_slice_rule):
    # The pad width rows - rows // 2 becomes a late guard: 6 and 5 rows share the width 3, 8 and 7 the
    # width 4. Unwatched, the first program served every shape (wrong gradient shapes).
    jf = check_gradients(GRADIENT_PROGRAMS["slice of half the rows"], [(6, 3), (8, 3), (5, 3), (7, 3)], compiles=2)
    assert "(x.shape[0] == ((x.shape[0] // 2) + 3)) failed" in str(thunder_symbolic.recompile_reasons(jf)[0])


def test_a_backward_thunder_cannot_build_symbolically_is_compiled_with_exact_shapes(upstream_slice_rule):
    def rule_refusing_symbolic_sizes(a, *args):
        if not all(isinstance(d, int) for d in a.shape):
            raise RuntimeError("this rule needs static shapes")
        return upstream_slice_rule(a, *args)

    grad_rules.rules()[PrimIDs.SLICE] = rule_refusing_symbolic_sizes
    check_gradients(GRADIENT_PROGRAMS["slice of half the rows"], SHAPES, compiles=len(set(SHAPES)))


def test_training_and_inference_calls_keep_their_own_programs():
    fn = GRADIENT_PROGRAMS["slice of half the rows"]
    jf = thunder.jit(fn, cache="symbolic values")
    for rows in (6, 9, 7):
        with torch.no_grad():
            torch.testing.assert_close(jf(torch.randn(rows, 3)).shape, torch.Size([rows // 2, 3]))
        x = torch.randn(rows, 3, requires_grad=True)
        jf(x).sum().backward()
        torch.testing.assert_close(x.grad, (torch.arange(rows) < rows // 2).float()[:, None].expand(rows, 3) * 2)
    assert thunder.cache_misses(jf) == 2


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_an_empty_slice_keeps_its_input_s_gradient(cache):
    """0.2.6 made a slice starting past the end (the chunks of 0 rows) a new tensor: no gradient flowed to x,
    and the loss could not be backpropagated."""
    fn = lambda x: (x.chunk(2)[0] * 2).sum()  # noqa: E731
    jf = thunder.jit(fn, cache=cache)
    for shape in [(0, 3), (0, 5), (4, 3)]:
        x = torch.randn(*shape, requires_grad=True)
        loss = jf(x)
        assert loss.requires_grad
        loss.backward()
        torch.testing.assert_close(x.grad, torch.func.grad(fn)(x.detach()))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_relu_of_nan_in_grad_mode(cache):
    """0.2.6 differentiated relu's decomposition ``where(a > 0, a, 0)``: in grad mode ``relu(nan)`` was 0
    (the fuzzer's ``act(y)`` after a std of one row); torch gives NaN, and passes NaN's gradient on."""
    fn = lambda x: torch.relu(x) * 3  # noqa: E731
    jf = thunder.jit(fn, cache=cache)
    for values in ([float("nan"), -1.0, 2.0, 0.0], [1.0, float("nan"), -2.0]):
        x, expected_x = (torch.tensor(values, requires_grad=True) for _ in range(2))
        out, expected = jf(x), fn(expected_x)
        torch.testing.assert_close(out, expected, equal_nan=True)
        out.backward(torch.ones_like(out))
        expected.backward(torch.ones_like(expected))
        torch.testing.assert_close(x.grad, expected_x.grad, equal_nan=True)


def test_numbers_computed_from_a_float_argument_get_no_gradient():
    # A power of a float argument is a python_number_op, which had no grad rule: the program was compiled
    # with exact values instead, once per float.
    jf = thunder.jit(lambda x, scale: x * scale**0.5, cache="symbolic values")
    for scale in (4.0, 6.0, 9.0):
        x = torch.randn(3, 2, requires_grad=True)
        jf(x, scale).sum().backward()
        torch.testing.assert_close(x.grad, torch.full_like(x, scale**0.5))
    assert thunder.cache_misses(jf) == 1, thunder_symbolic.recompile_reasons(jf)
