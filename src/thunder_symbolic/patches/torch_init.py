"""Patches of ``thunder/torch/__init__.py``: torch ops whose thunder rules pin sizes under symbolic values.

Fallback ("auto-registered") ops run on fake tensors with the traced values of the numbers they are given;
``chunk`` and ``split`` compute their slices with Python's ``range`` over the dim. Both pin sizes that
need not be: the replacements keep them symbolic and pin only what decides the program's structure.
"""

from __future__ import annotations

import functools
import itertools
import types
from typing import Any

import torch
from thunder.core import prims, utils
from thunder.core.compile_data import using_symbolic_values
from thunder.core.proxies import NumberProxy, TensorProxy

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards import recorder as guard_recorder
from thunder_symbolic.guards.recorder import python_value
from thunder_symbolic.semantics import fallback_shapes


@patch(
    "thunder.torch:_get_fake_arg",
    summary="a number handed to a fallback torch op's fake run is pinned by a guard",
    why=(
        "Ops thunder has no rule for run on fake tensors with the numbers' traced values: the output shape of "
        "`torch.diagflat(x, offset=n)` was that of the first n, reused for every n (a wrong result)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _get_fake_arg(original):
    def get_fake_arg(inp):
        if isinstance(inp, NumberProxy):
            python_value(inp)
        return original(inp)

    return get_fake_arg


def _under_symbolic_values(original, symbolic):
    """``original`` (a symbol's meta), replaced by ``symbolic(original, *args, **kwargs)`` under symbolic
    values unless that returns NotImplemented. Keeps the signature thunder binds arguments with."""

    @functools.wraps(original)
    def meta(*args, **kwargs):
        if using_symbolic_values():
            result = symbolic(original, *args, **kwargs)
            if result is not NotImplemented:
                return result
        return original(*args, **kwargs)

    return meta


def _replacing_under_symbolic_values(symbolic):
    def make(original):
        return _under_symbolic_values(original, symbolic)

    return make


def _slice(a: TensorProxy, dim: int, start, stop) -> TensorProxy:
    starts, stops = [0] * a.ndim, list(a.shape)
    starts[dim], stops[dim] = start, stop
    return prims.slice_prim(a, starts, stops, [1] * a.ndim)


def _pieces(a: TensorProxy, dim: int, piece, count: int) -> list[TensorProxy]:
    """``count`` slices of ``piece`` along ``dim``, the last one up to the end of the dim."""
    bounds = [piece * i for i in range(count)] + [a.shape[dim]]
    return [_slice(a, dim, start, stop) for start, stop in itertools.pairwise(bounds)]


def _symbolic_chunk(original, a, chunks, dim=0):
    """``torch.chunk`` with symbolic piece sizes: only the number of pieces is pinned. Bad arguments (a 0-d
    tensor, no pieces) are left to the original, whose errors name them."""
    if a.ndim == 0 or chunks <= 0:
        return NotImplemented
    dim = utils.canonicalize_dim(a.ndim, dim)
    length = a.shape[dim]
    if not isinstance(length, NumberProxy) or chunks == 1 or length == 0:
        return NotImplemented
    piece = (length + chunks - 1) // chunks
    return tuple(_pieces(a, dim, piece, int(python_value((length + piece - 1) // piece))))


def _symbolic_split(original, a, size_or_sections, dim=0):
    """``torch.split`` by a piece size, with symbolic piece sizes: only the number of pieces is pinned."""
    if not isinstance(size_or_sections, (int, NumberProxy)) or isinstance(size_or_sections, bool):
        return NotImplemented
    dim = utils.canonicalize_dim(a.ndim, dim)
    length = a.shape[dim]
    if not isinstance(length, NumberProxy) or size_or_sections <= 0:
        return NotImplemented
    count = int(python_value((length + size_or_sections - 1) // size_or_sections))
    return _pieces(a, dim, size_or_sections, max(count, 1))  # an empty dim splits into one empty piece


def _symbolic_multi_dot(original, tensors, *, out=None):
    """``torch.linalg.multi_dot`` of tensors with symbolic sizes: the sizes are pinned (the order of the products,
    the point of multi_dot, depends on all of them), then multiplied in the order of least work. Anything but 1-D
    or 2-D tensors of matching sizes is left to the original, whose errors name it."""
    import thunder.torch as ltorch

    n = len(tensors) if isinstance(tensors, (list, tuple)) else 0
    if out is not None or n < 2 or not all(isinstance(t, TensorProxy) for t in tensors):
        return NotImplemented
    if not any(isinstance(d, NumberProxy) for t in tensors for d in t.shape):
        return NotImplemented
    if not (1 <= tensors[0].ndim <= 2 and 1 <= tensors[-1].ndim <= 2 and all(t.ndim == 2 for t in tensors[1:-1])):
        return NotImplemented
    first = ltorch.unsqueeze(tensors[0], 0) if tensors[0].ndim == 1 else tensors[0]
    last = ltorch.unsqueeze(tensors[-1], -1) if tensors[-1].ndim == 1 else tensors[-1]
    matrices = [first, *tensors[1:-1], last]
    sizes = [int(python_value(d)) for d in (matrices[0].shape[0], *(m.shape[1] for m in matrices))]
    if any(int(python_value(m.shape[0])) != sizes[i] for i, m in enumerate(matrices)):
        return NotImplemented
    result = _chain_product(matrices, sizes)
    if tensors[0].ndim == 1:
        result = ltorch.squeeze(result, 0)
    if tensors[-1].ndim == 1:
        result = ltorch.squeeze(result, -1)
    return result


def _chain_product(matrices, sizes):
    """The product of ``matrices`` (the i-th of ``sizes[i]`` x ``sizes[i + 1]``) in the order of fewest
    multiplications (the matrix-chain recurrence)."""
    import thunder.torch as ltorch

    n = len(matrices)
    cost = {(i, i): (0, None) for i in range(n)}
    for length in range(2, n + 1):
        for i in range(n - length + 1):
            j = i + length - 1
            cost[i, j] = min(
                (cost[i, k][0] + cost[k + 1, j][0] + sizes[i] * sizes[k + 1] * sizes[j + 1], k) for k in range(i, j)
            )

    def product(i, j):
        if i == j:
            return matrices[i]
        k = cost[i, j][1]
        return ltorch.matmul(product(i, k), product(k + 1, j))

    return product(0, n - 1)


patch(
    "thunder.torch:multi_dot.meta",
    summary="multi_dot under symbolic values pins the sizes and multiplies in the order of least work",
    why="0.2.6 refuses symbolic sizes ('multi_dot(): does not support dynamic shapes') where it runs constant ones.",
    upstream="Lightning-AI/lightning-thunder#463",
)(_replacing_under_symbolic_values(_symbolic_multi_dot))


_PINNING_WHY = (
    "0.2.6's {} computes its slice bounds with Python's range over the dim, which pins the dim: one compile per "
    "size where the number of pieces is the same."
)
patch(
    "thunder.torch:chunk.meta",
    summary="chunk under symbolic values pins the number of pieces, not the size of the split dim",
    why=_PINNING_WHY.format("chunk"),
    upstream="Lightning-AI/lightning-thunder#463",
)(_replacing_under_symbolic_values(_symbolic_chunk))


@patch(
    "thunder.torch:split.meta",
    summary="split under symbolic values pins the number of pieces, not the size of the split dim; a static "
    "empty dim splits into one empty piece (either cache)",
    why=_PINNING_WHY.format("split")
    + " And 0.2.6 split an empty dim of static size into no pieces where torch gives one empty piece: "
    "`len(x.split(2))` was 0 (constant values), `x.split(2)[-1]` an IndexError.",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _split_meta(original):
    symbolic = _under_symbolic_values(original, _symbolic_split)

    @functools.wraps(original)
    def split(a, size_or_sections, /, dim=0):
        if isinstance(a, TensorProxy) and a.ndim and type(size_or_sections) is int and size_or_sections > 0:
            along = utils.canonicalize_dim(a.ndim, dim)
            if type(a.shape[along]) is int and a.shape[along] == 0:
                return [_slice(a, along, 0, 0)]
        return symbolic(a, size_or_sections, dim)

    return split


@patch(
    "thunder.torch:unflatten.meta",
    summary="unflatten infers its -1 size from the unflattened dim, as torch does",
    why=(
        "0.2.6 hands the -1 to a view of the whole tensor, which cannot infer it when another dim is 0: "
        "`x.unflatten(1, (2, -1))` of a tensor with no rows failed (either cache) where torch returns one."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _unflatten_meta(original):
    @functools.wraps(original)
    def unflatten(a, /, dim, sizes):
        sizes = tuple(sizes)
        holes = [i for i, s in enumerate(sizes) if isinstance(s, int) and s == -1]
        known = functools.reduce(lambda p, s: p * s, (s for i, s in enumerate(sizes) if i not in holes), 1)
        if len(holes) != 1 or not isinstance(a, TensorProxy) or a.ndim == 0 or isinstance(known, int) and known == 0:
            return original(a, dim, sizes)  # its result, or its error
        length = a.shape[utils.canonicalize_dim(a.ndim, dim)]
        if length % known != 0:
            return original(a, dim, sizes)  # (its error: the sizes do not divide the dim)
        return original(a, dim, sizes[: holes[0]] + (length // known,) + sizes[holes[0] + 1 :])

    return unflatten


@patch(
    "thunder.torch:logsumexp.meta",
    summary="logsumexp over an empty dim is -inf, as torch's (log_softmax over it is empty)",
    why=(
        "0.2.6 subtracts the maximum first, and a maximum over an empty dim is an error: `x.logsumexp(0)` "
        "and `F.log_softmax(x, 0)` of a tensor without rows failed (either cache) where torch returns -inf "
        "and an empty tensor."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _logsumexp_meta(original):
    import thunder.torch as ltorch

    @functools.wraps(original)
    def logsumexp(a, /, dim, keepdim=False):
        dims = (dim,) if isinstance(dim, (int, NumberProxy)) else tuple(dim)
        if isinstance(a, TensorProxy) and a.ndim and any(a.shape[utils.canonicalize_dim(a.ndim, d)] == 0 for d in dims):
            return ltorch.log(ltorch.sum(ltorch.exp(a), dim, keepdim))  # no maximum to subtract: log(0)
        return original(a, dim, keepdim)

    return logsumexp


@patch(
    "thunder.torch:tensor.meta",
    summary="torch.tensor(n) of a symbolic number is a 0-d tensor of it, of torch's dtype for its Python type",
    why=(
        "0.2.6 checks for a Python number or sequence before its branch for numbers, and its error message does "
        "not format: `torch.tensor(n)` of an int argument or a size failed with \"NameError: name 'n' is not "
        'defined" under symbolic values.'
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _tensor_meta(original):
    import thunder.torch as ltorch

    @functools.wraps(original)
    def tensor(seq_or_number, *, device=None, dtype=None, requires_grad=False, pin_memory=False):
        if not isinstance(seq_or_number, NumberProxy):
            return original(
                seq_or_number, device=device, dtype=dtype, requires_grad=requires_grad, pin_memory=pin_memory
            )
        if requires_grad or pin_memory:
            raise NotImplementedError(
                "torch.tensor(..., requires_grad=True or pin_memory=True) is not supported within thunder.jit"
            )
        if dtype is None:  # torch's for a number of that Python type (the default float dtype for a float)
            dtype = torch.tensor(seq_or_number.python_type()).dtype
        return ltorch.full((), seq_or_number, device=device, dtype=dtype)

    return tensor


def _shape_rule(rule):
    """A fallback op's symbolic output shape by ``rule``; dtype, device and a check of the sizes by the op's
    fake run on the traced values, not pinned (torch runs the op itself, so its errors stay eager's)."""

    def symbolic(original, *args, **kwargs):
        shape = rule(*args, **kwargs)
        if shape is NotImplemented:
            return NotImplemented
        with guard_recorder.paused():
            expected = original(*args, **kwargs)
        if not isinstance(expected, TensorProxy) or [getattr(d, "value", d) for d in shape] != list(expected.shape):
            return NotImplemented
        return TensorProxy(like=expected, shape=shape)

    return symbolic


for _name, _rule in fallback_shapes.RULES.items():
    _symbolic_meta = _replacing_under_symbolic_values(_shape_rule(_rule))  # for the symbol and its operator
    patch(
        f"thunder.torch:{_name}.meta",
        summary=f"{_name} (a fallback op) gets a symbolic output shape under symbolic values",
        why=(
            "Fallback ops run on fake tensors with the traced sizes and numbers, which pins every size they "
            f"see: `{_name}(...)` of tensors or with sizes from shapes or int arguments compiled once per size."
        ),
        upstream="Lightning-AI/lightning-thunder#463",
    )(_symbolic_meta)
    patch(
        f"thunder.executors.torchex:ex.opmap[{_name}].meta",
        after="thunder.torch",
        summary=f"the torch executor's {_name} operator gets the symbol's symbolic output shape",
        why=(
            "The executor pass re-runs the operator's own fake run (not the symbol's meta): in grad mode, where "
            f"it runs while the backward is watched, it pinned the sizes of `{_name}`'s inputs again."
        ),
        upstream="Lightning-AI/lightning-thunder#463",
    )(_symbolic_meta)
del _name, _rule, _symbolic_meta


@patch(
    "thunder.torch:opt_einsum",
    summary="einsum of one or two operands finds its contraction path without reading the operands' sizes",
    why=(
        "thunder's einsum asks opt_einsum for the contraction path with the operands, and opt_einsum reads every "
        "size (for costs and BLAS choices thunder does not use): `torch.einsum('i,j->ij', positions, inv_freq)` "
        "(rotary embeddings) compiled once per length under symbolic values. With one or two operands there is "
        "only one path; with more, the path depends on the sizes, which stay pinned. Only thunder.torch's view "
        "of opt_einsum changes."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
    rebinds=False,
)
def _opt_einsum(original):
    view = types.ModuleType(original.__name__, original.__doc__)
    view.__dict__.update(vars(original))
    view.contract_path = functools.partial(_contract_path, original.contract_path)
    return view


def _contract_path(contract_path, subscripts, *operands, **kwargs):
    """opt_einsum's ``contract_path``; for one or two operands, of stand-in shapes of their ranks, after the check
    opt_einsum makes of the sizes a label has in both (equal, or one of them 1)."""
    if len(operands) > 2 or kwargs.get("shapes") or not all(isinstance(op, TensorProxy) for op in operands):
        return contract_path(subscripts, *operands, **kwargs)
    _check_label_sizes(subscripts, operands)
    return contract_path(subscripts, *((2,) * op.ndim for op in operands), shapes=True, **kwargs)


def _check_label_sizes(subscripts: str, operands) -> None:
    """The ValueError opt_einsum raises where a label's sizes in two operands neither match nor broadcast (what it
    reads of the sizes besides costs); the sizes are compared as thunder compares sizes (guarded)."""
    terms = subscripts.replace(" ", "").partition("->")[0].split(",")
    if "." in subscripts or len(terms) != len(operands):
        return  # (thunder's einsum checks ellipses and the operand count itself)
    sizes: dict[str, Any] = {}
    for index, (term, operand) in enumerate(zip(terms, operands)):
        for label, size in zip(term, operand.shape):
            seen = sizes.setdefault(label, size)
            if seen == 1:
                sizes[label] = size
            elif size != 1 and size != seen:
                raise ValueError(
                    f"Size of label '{label}' for operand {index} ({seen}) does not match previous terms ({size})."
                )
