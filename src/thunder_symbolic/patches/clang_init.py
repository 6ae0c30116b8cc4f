"""Patches of ``thunder/clang/__init__.py``: core language operations under symbolic values."""

from __future__ import annotations

from thunder.core import devices, dtypes, prims, utils
from thunder.core.proxies import IntegerProxy, NumberProxy
from thunder.core.pytree import tree_map

from thunder_symbolic.activation.registry import patch
from thunder_symbolic.guards.prologue import check_float_value
from thunder_symbolic.guards.recorder import python_value


def _is_int(value) -> bool:
    if isinstance(value, IntegerProxy):
        return value.python_type is int
    return isinstance(value, int) and not isinstance(value, bool)


@patch(
    "thunder.clang:arange",
    summary="integer arange computes its length with integer arithmetic, so a symbolic end stays symbolic",
    why=(
        "0.2.6 checks math.isfinite() on every bound (a float conversion, which must pin the value) and "
        "computes the length through float division: torch.arange(kv_length) recompiled at every decode step."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _arange(original):
    def arange(*, start, step, stop, device, dtype=None):
        exact = dtype is None or utils.is_exact_dtype(dtype)
        if not (exact and _is_int(start) and _is_int(step) and _is_int(stop)):
            return original(start=start, step=step, stop=stop, device=device, dtype=dtype)
        utils.check(step != 0, lambda: "arange: step must not be zero")
        reaches = (stop >= start) if step > 0 else (stop <= start)  # one guard, whichever side of 0 the length is
        utils.check(reaches, lambda: f"step={step} must make progress from {start} to {stop}")
        length = -((start - stop) // step)  # ceil((stop - start) / step), exactly, for either sign of step
        device = devices.to_device(device)
        return prims.iota(length, start=start, step=step, device=device, dtype=dtype or dtypes.int64)

    return arange


@patch(
    "thunder.clang:reshape",
    summary="reshaping to a shape with -1 and another zero size raises torch's RuntimeError",
    why=(
        "0.2.6 infers the -1 size by dividing by the other sizes and raised ZeroDivisionError where torch "
        "raises RuntimeError (found by the differential fuzzer: rows that become 0)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _reshape(original):
    def reshape(a, shape):
        if any(isinstance(length, int) and length == -1 for length in shape):
            known = 1
            for length in shape:
                if not (isinstance(length, int) and length == -1):
                    known = known * length
            if known == 0:
                raise RuntimeError(
                    f"cannot reshape into shape {list(shape)}: the size for -1 is ambiguous when another size is 0"
                )
        return original(a, shape)

    return reshape


@patch(
    "thunder.clang:check_number_type_and_value",
    summary="a float pinned by value is checked bitwise: -0.0 is not 0.0, NaN pins NaN",
    why=(
        "0.2.6 compares pinned floats with ==, so a program traced for 0.0 was reused for -0.0, where "
        "math.copysign or 1 / x differ (both cache options): a silently wrong result."
    ),
    upstream="Lightning-AI/lightning-thunder#2779",
)
def _check_number_type_and_value(original):
    def check_number_type_and_value(n, value, /):
        if type(value) is float:
            return check_float_value(n, value)
        return original(n, value)

    return check_number_type_and_value


@patch(
    "thunder.clang:tensor_from_sequence",
    summary="numbers in the sequence (sizes, int arguments) are pinned by guards: `torch.tensor([n, m])` works",
    why=(
        "0.2.6's tensor_from_sequence accepts Python numbers only: a tensor built from sizes or int arguments "
        "failed under symbolic values ('Expected sequences of numbers')."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _tensor_from_sequence(original):
    def tensor_from_sequence(sequence, *, dtype=None, device=None):
        return original(tree_map(python_value, sequence), dtype=dtype, device=device)

    return tensor_from_sequence


def _clamped(bound, length):
    """A slice bound below -length means 0, in Python and PyTorch (``x[-9:]`` of 6 rows is every row)."""
    if not isinstance(bound, (int, NumberProxy)) or isinstance(bound, (bool, int)) and bound >= 0:
        return bound
    return 0 if bound < -length else bound


@patch(
    "thunder.clang:slice_in_dim",
    summary="a slice starting at or past the end of a dim is an empty slice of the tensor, not a new tensor",
    why=(
        "0.2.6 returns a new empty tensor (full) there, with no autograd connection to its input: for an x "
        "with 0 rows, x.chunk(2)[0] * 2 did not require grad, so a loss computed from it could not be "
        "backpropagated and x's gradient was None where eager's is an empty tensor."
    ),
)
def _slice_in_dim(original):
    def slice_in_dim(a, start_index, limit_index, stride=1, dim=0):
        dim = utils.canonicalize_dim(a.ndim, dim)
        length = a.shape[dim]
        if utils.canonicalize_dim_idx(length, start_index) >= length:
            starts, stops = [0] * a.ndim, list(a.shape)
            starts[dim] = length
            return prims.slice_prim(a, starts, stops, [1] * a.ndim)
        return original(a, start_index, limit_index, stride, dim)

    return slice_in_dim


@patch(
    "thunder.clang:_basic_indexing",
    summary="slice bounds below -length are clamped to 0, as Python and PyTorch do",
    why="0.2.6 raised 'start=-9 is not a valid index for length 6' where eager returns every row.",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _basic_indexing(original):
    def basic_indexing(a, /, key):
        clamped, nones = [], 0
        for position, x in enumerate(key):
            if x is None:
                nones += 1
            elif isinstance(x, slice) and position - nones < len(a.shape):
                length = a.shape[position - nones]
                x = slice(_clamped(x.start, length), _clamped(x.stop, length), x.step)
            clamped.append(x)
        return original(a, clamped)

    return basic_indexing


@patch(
    "thunder.clang:_advanced_indexing",
    summary="numbers in a list index (`x[[0, n]]`, `x[[x.shape[0] - 1]]`) are pinned by guards",
    why=(
        "0.2.6 turns a list index into a constant tensor from the numbers' traced values, unguarded: the "
        "program traced for n = 1 gathered row 1 for every n (wrong values and gradients)."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _advanced_indexing(original):
    def advanced_indexing(a, /, key):
        # Only numbers in sequences are read; tensors and slices are kept.
        pinned = [tree_map(python_value, k) if isinstance(k, (list, tuple)) else k for k in key]
        return original(a, pinned)

    return advanced_indexing


@patch(
    "thunder.clang:where",
    summary="a symbolic bool predicate is guarded before where() short-circuits on it",
    why="0.2.6 reads a number predicate's value (pyval) and returns one branch, unguarded.",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _where(original):
    def where(pred, a, b):
        return original(python_value(pred) if isinstance(pred, NumberProxy) else pred, a, b)

    return where
