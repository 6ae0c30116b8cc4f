"""Patches of ``thunder/core/transforms.py``: grad rules that keep symbolic sizes symbolic, and missing ones;
the choice of an executor's gradient transform is marked for the checkers that answer it."""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

from thunder.clang import full
from thunder.core import dtypes, prims
from thunder.core.compile_data import using_symbolic_values
from thunder.core.prims import PrimIDs, get_grad, put_grad
from thunder.core.proxies import NumberProxy, Proxy, TensorProxy
from thunder.core.pytree import tree_map
from thunder.core.transforms import augmented_forward_pass, backward_pass, put_grads, sum_to, vjp

from thunder_symbolic import controls
from thunder_symbolic.activation.registry import patch
from thunder_symbolic.autodiff import gradient_choice
from thunder_symbolic.autodiff.complex_grads import RealOnlyRules
from thunder_symbolic.autodiff.fallback_grads import FallbackGradsFlattened
from thunder_symbolic.autodiff.grad_rules import GradRules, grad_rule, rules, zero_padded
from thunder_symbolic.autodiff.scalar_grads import ScalarGradsSummed
from thunder_symbolic.semantics import number_ops


@grad_rule(PrimIDs.SLICE)
def _slice_grad(a, start_indices, end_indices, strides=None):
    """The gradient of a slice: the slice's gradient padded back to ``a``'s shape.

    The pad widths are computed from the (possibly symbolic) sizes as they are, so under symbolic values
    the backward computes them per call instead of baking in those of the first input.
    """
    result = prims.slice_prim(a, start_indices, end_indices, strides)
    g = get_grad(result)
    steps = strides if strides is not None else (1,) * len(start_indices)
    padding = []
    for start, end, step, length, sliced in zip(start_indices, end_indices, steps, a.shape, g.shape):
        if step == 1:
            padding.append((start, length - end, 0))
        else:  # the last element read is start + (sliced - 1) * step; the step's gaps are interior padding
            stop = start + (sliced - 1) * step + 1 if sliced != 0 else start
            padding.append((start, length - stop, step - 1))
    put_grad(a, zero_padded(g, tuple(padding)))
    return result


@grad_rule(PrimIDs.CAT)
def _cat_grad(tensors, dim):
    """The gradient of a cat: each input's slice of the cat's gradient.

    The slice bounds are the running sums of the inputs' (possibly symbolic) lengths; the gradient's own
    length along ``dim`` is never read, since that would produce a second proxy for the same dim in the
    joint trace (0.2.6's executor pass then failed with "Detected a cycle while swapping").
    """
    result = prims.cat(tensors, dim)
    g = get_grad(result)
    start = 0
    for t in tensors:
        stop = start + t.shape[dim]
        starts, stops = [0] * t.ndim, list(t.shape)  # the other dims of every input are the cat's
        starts[dim], stops[dim] = start, stop
        put_grad(t, prims.slice_prim(g, starts, stops))
        start = stop
    return result


def _conjugate(factor):
    if isinstance(factor, TensorProxy):
        import thunder.torch as ltorch

        return ltorch.conj_physical(factor) if dtypes.is_complex_dtype(factor.dtype) else factor
    return factor.conjugate() if isinstance(factor, complex) else factor


@grad_rule(PrimIDs.MUL)
def _mul_grad(a, b):
    """PyTorch's rule: each factor's gradient is the product's gradient times the *conjugate* of the other
    factor. 0.2.6 multiplies by the factor itself, wrong for complex numbers: the gradients of Llama 4's
    complex rotary embedding differed from eager's under either cache option. For real factors it is the same."""
    result = prims.mul(a, b)
    g = get_grad(result)
    put_grads((a, b), (g * _conjugate(b), g * _conjugate(a)))
    return result


@grad_rule(PrimIDs.ATAN2)
def _atan2_grad(a, b):
    """PyTorch's rule, ``g * b / (a² + b²)`` and ``-g * a / (a² + b²)``, as a grad rule: 0.2.6's is an
    augmented forward, whose gradients bypass the table (:mod:`thunder_symbolic.autodiff.scalar_grads` sums those of
    a 0-d operand only for the table's rules)."""
    result = prims.atan2(a, b)
    g = get_grad(result)
    scale = g / (a * a + b * b)
    put_grads((a, b), (scale * b, -scale * a))
    return result


def _modulo_grad(prim, rounding):
    """PyTorch's rule for ``a`` modulo ``b``, ``g`` and ``-g * rounding(a / b)``: ``trunc`` for fmod, ``floor``
    for remainder. 0.2.6 has none for remainder, and fmod's is an augmented forward (as ``_atan2_grad``)."""

    def modulo_grad(a, b):
        result = prim(a, b)
        g = get_grad(result)
        put_grads((a, b), (g, -g * rounding(a / b)))
        return result

    return modulo_grad


grad_rule(PrimIDs.FMOD)(_modulo_grad(prims.fmod, prims.trunc))
grad_rule(PrimIDs.REMAINDER)(_modulo_grad(prims.remainder, prims.floor))


@grad_rule(PrimIDs.FLIP)
def _flip_grad(a, dims):
    """The gradient flipped back (0.2.6 has no rule, so ``torch.flip`` failed in grad mode)."""
    result = prims.flip(a, dims)
    put_grad(a, prims.flip(get_grad(result), dims))
    return result


@grad_rule(PrimIDs.MINIMUM)
def _minimum_grad(a, b):
    """PyTorch's rule (0.2.6 has none, so ``torch.minimum`` failed in grad mode): the gradient goes to the
    smaller operand, split evenly where they tie; a NaN takes it whole on both sides, as in PyTorch."""
    result = prims.minimum(a, b)
    g = get_grad(result)
    shared = prims.where(prims.eq(a, b), g / 2, g)
    put_grads((a, b), (prims.where(prims.gt(a, b), 0.0, shared), prims.where(prims.lt(a, b), 0.0, shared)))
    return result


@grad_rule("torch.relu")
def _relu_grad(a, inplace=False):
    """``torch.relu`` itself forward (NaN stays NaN), and PyTorch's rule back (``threshold_backward``): no
    gradient where the result is at most 0. 0.2.6 has no rule, so grad mode differentiated its decomposition
    ``where(a > 0, a, 0)``, whose forward is 0 for NaN: `relu(nan)` was 0 in grad mode only (either cache)."""
    import thunder.torch as ltorch

    result = ltorch.relu(a, inplace)
    put_grad(a, prims.where(prims.le(result, 0.0), 0.0, get_grad(result)))  # (NaN passes it on, as torch's)
    return result


@grad_rule("torch.lerp")
def _lerp_grad(start, end, weight):
    """PyTorch's rule, ``g * (1 - weight)``, ``g * weight`` and ``g * (end - start)``, each summed to its
    operand's shape (0.2.6 has none; the torch executor runs ``torch.lerp``, not the prim)."""
    import thunder.torch as ltorch

    result = ltorch.lerp(start, end, weight)
    g = get_grad(result)
    operands, grads = (start, end, weight), (g * (1 - weight), g * weight, g * (end - start))
    summed = [sum_to(d, t.shape) if isinstance(t, TensorProxy) else d for d, t in zip(grads, operands)]
    put_grads(operands, tuple(summed))
    return result


@grad_rule("torch.index_put")
def _index_put_grad(a, indices, values, accumulate=False):
    """PyTorch's rule as a grad rule. 0.2.6's is an augmented forward whose two gradients thunder's autodiff
    pairs with the first two arguments, ``a`` and the *indices*: the gradient of ``values`` was dropped, a
    silently wrong gradient under either cache."""
    import thunder.torch as ltorch

    result = ltorch.index_put(a, indices, values, accumulate)
    g = get_grad(result)
    indices = tuple(indices)
    g_values = sum_to(g[indices], values.shape)
    g_a = g if accumulate else ltorch.index_put(g, indices, ltorch.zeros_like(values), False)
    put_grads((a, values), (g_a, g_values))
    return result


@grad_rule("torch.nn.functional.nll_loss")
def _nll_loss_grad(a, target, weight=None, ignore_index=None, reduction="mean"):
    """thunder's own forward and backward of nll_loss, with ``ignore_index`` resolved as ``ltorch.nll_loss``
    resolves it and a total weight of ``a``'s dtype for the reductions that do not use it. 0.2.6's augmented
    forward passes the unresolved ``None`` on and fails comparing the target with it, its torch backward makes
    the unused total weight float64, which aten refuses for float32, and returns a 3-D input's gradient as 4-D:
    nll_loss (a language model's loss) could not be differentiated, under either cache."""
    import thunder.torch as ltorch

    ignore_index = -1 if ignore_index is None else ignore_index
    result, total_weight = ltorch._nll_loss_helper(a, target, weight, ignore_index, reduction)
    if total_weight is None:  # "sum" and "none"
        total_weight = ltorch.full((), 0.0, device=a.device, dtype=a.dtype)
    g = get_grad(result)
    if a.ndim in (1, 2, 4):
        put_grad(a, ltorch.nll_loss_backward(g, a, target, weight, reduction, ignore_index, total_weight))
        return result
    # the torch executor's backward reshapes other ranks to (N, C, 1, rest) and returns that shape
    rest = functools.reduce(operator.mul, a.shape[2:], 1)
    a4, target4 = ltorch.reshape(a, (a.shape[0], a.shape[1], 1, rest)), ltorch.reshape(target, (a.shape[0], 1, rest))
    g4 = ltorch.reshape(g, (a.shape[0], 1, rest)) if reduction == "none" else g
    grad4 = ltorch.nll_loss_backward(g4, a4, target4, weight, reduction, ignore_index, total_weight)
    put_grad(a, ltorch.reshape(grad4, a.shape))
    return result


@grad_rule(PrimIDs._GROUPED_MM)
def _grouped_mm_grad(a, b, offsets):
    """The gradients of a grouped matmul of rows grouped by ``offsets`` (2-D ``a``) with one matrix per
    group (3-D ``b``), the MoE experts' layout: ``g @ b[e].T`` per group, and ``a.T @ g`` per group as a
    grouped matmul of two 2-D operands. 0.2.6 has no rule, so the experts failed in grad mode."""
    if not (a.ndim == 2 and b.ndim == 3):
        raise NotImplementedError(
            f"the gradient of torch._grouped_mm is implemented for a 2-D and a 3-D operand, got {a.ndim}-D "
            f"and {b.ndim}-D"
        )
    result = prims._grouped_mm(a, b, offsets)
    g = get_grad(result)
    put_grad(a, prims._grouped_mm(g, prims.transpose(b, (0, 2, 1)), offsets))
    put_grad(b, prims._grouped_mm(prims.transpose(a, (1, 0)), g, offsets))
    return result


@patch(
    "thunder.core.transforms:_grad_fn_map",
    summary=(
        "grad rules of thunder_symbolic.autodiff.grad_rules: slice, cat and the fallback ops of "
        "thunder_symbolic.semantics.fallback_shapes keep symbolic sizes symbolic; a complex product's gradient is "
        "conjugated and the rules that are not right for complex tensors refuse them; _grouped_mm and the DTensor "
        "prims of tensor parallelism (thunder_symbolic.distributed.dtensor_grads), minimum, remainder, lerp and flip "
        "get rules; the gradient of a 0-d tensor broadcast as a number is summed to 0-d "
        "(thunder_symbolic.autodiff.scalar_grads); index_put and the fallback ops get rules that pair gradients with "
        "the right arguments (thunder_symbolic.autodiff.fallback_grads); nll_loss gets one that runs"
    ),
    why=(
        "0.2.6's slice rule converts its pad widths to Python ints, baking the first input's sizes into the backward; "
        "its cat rule reads the gradient's length, a second proxy for the cat's dim, and the executor pass then failed "
        "('Detected a cycle while swapping'). Under symbolic values both backwards needed one program per input shape, "
        "as did those of fallback ops (narrow, new_full, view_as_complex...: a fake run of torch's vjp on the traced "
        "sizes). 0.2.6's product rule gives wrong gradients for complex factors (Llama 4's rotary embedding), under "
        "either cache option, as do its other rules that are not linear (they now refuse complex tensors, "
        "thunder_symbolic.autodiff.complex_grads). 0.2.6 has no rule for _grouped_mm, from_local, to_local, "
        "redistribute, a DTensor linear, minimum, remainder, lerp or flip: MoE experts, tensor-parallel modules and "
        "programs with those ops failed in grad mode. A 0-d CPU tensor combined with a larger tensor (x + x.sum()) got "
        "the other operand's gradient: a failed backward, or a wrong gradient where the shapes matched. The autodiff "
        "pairs an augmented forward's gradients with the op's arguments one level deep: index_put's values and a "
        "fallback op's tensors in a list (vstack) got no gradient. 0.2.6's nll_loss backward failed for every call."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _grad_fn_map(original):
    return ScalarGradsSummed(RealOnlyRules(FallbackGradsFlattened(GradRules(original, rules()))))


@patch(
    "thunder.core.transforms:augmented_forward_impls",
    summary="thunder's augmented forwards (old-style grad rules) refuse complex tensors unless complex-safe",
    why=(
        "0.2.6's rules never conjugate: through sqrt, exp2, sinh... of a complex tensor its gradients differed "
        "from eager's, silently (thunder_symbolic.autodiff.complex_grads lists the rules that are right for them)."
    ),
)
def _augmented_forward_impls(original):
    return RealOnlyRules(original)


@patch(
    "thunder.core.transforms:_get_gradfn_and_executor",
    summary="the executors' checkers it asks know they are asked for a gradient transform (gradient_choice)",
    why=(
        "0.2.6 asks the same checker whether an executor runs an operation and whether its gradient transform "
        "differentiates it. The sdpa executor's checker answers both from fake tensors of the operands' concrete "
        "sizes: under symbolic values on CUDA every attention without grad (inference) pinned its sequence "
        "lengths, one program per length, though torch's own kernel choice at run time needs none of them."
    ),
)
def _get_gradfn_and_executor(original):
    @functools.wraps(original)
    def get_gradfn_and_executor(*args, **kwargs):
        with gradient_choice.choosing():
            return original(*args, **kwargs)

    return get_gradfn_and_executor


class _OnesOfResult:
    """The cotangents of ``value_and_grad``: ones shaped like the result, made once the forward is traced.

    A size that is also an input's is read from that input: read from the result, it would keep the forward in a
    program that only returns gradients (thunder's grad), for its shape alone."""

    @staticmethod
    def of(result, primals):
        owners = {d.name: p for p in primals if isinstance(p, TensorProxy) for d in p._shape if isinstance(d, Proxy)}

        def shape_of(x: TensorProxy):
            sizes = [d for d in x._shape if isinstance(d, Proxy)]
            if not all(d.name in owners for d in sizes):
                return x.shape
            for owner in {id(owners[d.name]): owners[d.name] for d in sizes}.values():
                owner.shape  # noqa: B018 (under symbolic values the read records where the sizes come from)
            return x._shape

        def one(x):
            if isinstance(x, TensorProxy):
                return full(shape_of(x), 1, device=x.device, dtype=x.dtype)
            return type(x.value)(1) if isinstance(x, NumberProxy) else None

        return tree_map(one, result)


@patch(
    "thunder.core.transforms:vjp_call",
    summary="takes the cotangents 'ones shaped like the result' (value_and_grad's), made after the forward",
    why="See value_and_grad: the ones are made from the forward's result as recorded in the trace being built.",
)
def _vjp_call(original):
    @functools.wraps(original)
    def vjp_call(primals, cotangents, trace, **kwargs):
        if cotangents is not _OnesOfResult:
            return original(primals, cotangents, trace, **kwargs)
        primals = primals if isinstance(primals, Sequence) else (primals,)
        result, env = augmented_forward_pass(*primals, trace=trace, **kwargs)
        return result, backward_pass(env, trace, _OnesOfResult.of(result, primals))

    return vjp_call


@patch(
    "thunder.core.transforms:value_and_grad",
    summary="under symbolic values the cotangent ones are shaped like the result the gradient's forward records",
    why=(
        "0.2.6 shapes them like the output of a separate trace of the function: under symbolic values reading "
        "that output's sizes records `prims.shape` of a tensor the program never makes, and every program of "
        "thunder.core.transforms.grad failed with UnboundLocalError (190 of thunder's test_grad tests)."
    ),
)
def _value_and_grad(original):
    @functools.wraps(original)
    def value_and_grad(func):
        upstream = original(func)

        @functools.wraps(upstream)
        def run(*args, **kwargs):
            if not using_symbolic_values():
                return upstream(*args, **kwargs)
            return vjp(func)(args, _OnesOfResult, **kwargs)

        return run

    return value_and_grad


@patch(
    "thunder.core.transforms:iter_bound_symbols",
    summary="the symbols the VJP transform walks leave out those that output no proxy (a shape of constant sizes)",
    why=(
        "The VJP transform keys each symbol's residuals by its first output proxy. Under symbolic values a composite "
        "operator's decomposition (outer, einsum) records `prims.shape` of tensors whose sizes are constants: a "
        "symbol with outputs and no proxy among them, on which the transform failed ('NoneType' object has no "
        "attribute 'name'). Such a symbol has nothing to differentiate."
    ),
)
def _iter_bound_symbols(original):
    @functools.wraps(original)
    def iter_bound_symbols(bound_symbols):
        for bsym in original(bound_symbols):
            if any(isinstance(out, Proxy) for out in bsym.flat_outs):
                yield bsym

    return iter_bound_symbols


@patch(
    "thunder.core.transforms:nondifferentiable_vjp_symbols",
    summary="the VJP transform (thunder.core.transforms.grad, vjp) takes python_number_op as not differentiable",
    why=(
        "The arithmetic of sizes under symbolic values (`head_dim ** 0.5`) is python_number_op, which takes its "
        "operands as *args; the transform differentiated it through its grad rule and failed matching the rule's "
        "parameters with the arguments (nanoGPT's attention under thunder's grad). Numbers get no gradient."
    ),
)
def _nondifferentiable_vjp_symbols(original):
    return original | {number_ops.python_number_op.id}


@patch(
    "thunder.core.transforms:add_transform",
    summary="the function it re-jits keeps the jitted function's cache option, dynamic_shapes and recompile limit "
    "(thunder.core.transforms.grad, thunder.core.transforms.add_transform)",
    why=(
        "0.2.6's add_transform re-jits the function with its executors and compile options only: "
        "`grad(thunder.jit(f, cache='symbolic values'))` ran under constant values, one program per shape, and "
        "lost the declared dims and recompile limit of this package's jit options."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _add_transform(original):
    @functools.wraps(original)
    def add_transform(cfn, *args, **kwargs):
        cd, cs = getattr(cfn, "_lc_cd", None), getattr(cfn, "_lc_cs", None)
        if cd is None or cs is None:
            return original(cfn, *args, **kwargs)  # (thunder's own check says what is wrong)
        options = controls.JitOptions(
            cache=cd.cache_option,
            dynamic_shapes=getattr(cd, "thunder_symbolic_dynamic_shapes", {}),
            budget=getattr(cs.interpreter_cache, "budget", None) or controls.budget_from_options(),
        )
        with controls.inheriting_options(options):
            return original(cfn, *args, **kwargs)

    return add_transform
