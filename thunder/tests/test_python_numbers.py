"""Symbolic numbers behave as the Python numbers they stand for, wherever Python or thunder looks at them.

Each case is held to eager PyTorch over several calls with the compile count: a program that only needs
the number symbolically compiles once; one that reads its value (text, a hash, a fallback op) pins it.
"""

import pytest
import torch

import thunder
import thunder_symbolic
from thunder_symbolic.guards.recorder import DataDependentError
from thunder_symbolic.testing import check_against_eager


def x(rows=6, cols=4):
    return torch.randn(rows, cols)


def rows(*sizes):
    return [(x(n),) for n in sizes]


# --- Introspection: isinstance, type ------------------------------------------------------------------


def test_isinstance_and_type_of_symbolic_numbers():
    def f(t, n, s):
        out = t
        if isinstance(n, int) and type(n) is int:
            out = out * 2
        if isinstance(t.shape[0], int):
            out = out + 1
        if isinstance(s, (int, float)) and not isinstance(s, int):
            out = out - s
        return out

    check_against_eager(f, [(x(), 1, 1.5), (x(3), 2, 2.5), (x(5), 3, 0.5)], compiles=1)


def test_int_and_float_arguments_are_told_apart():
    def f(t, n):
        return t * 2 if isinstance(n, float) else t - 1

    check_against_eager(f, [(x(), 1), (x(), 1.0), (x(), 2), (x(), 2.0)], compiles=2)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_sizes_are_torch_sizes(cache):
    """A traced shape is a tuple: isinstance and type answered as for a tuple, under either cache option, and
    str showed its slices and sums as tuples; eager's are torch.Size (an empty one too, not any empty tuple)."""

    def f(t):
        answers = (
            isinstance(t.shape, torch.Size),
            type(t.size()) is torch.Size,
            isinstance(t.shape[1:], torch.Size),
            isinstance(t.shape[:-1] + (2,), torch.Size),
            isinstance((2,) + t.shape, torch.Size),
            isinstance(t.shape * 2, torch.Size),
            isinstance(t.shape[5:], torch.Size),
            isinstance((), torch.Size),
            isinstance(tuple(t.shape), torch.Size),
            isinstance(t.shape, (tuple, int)),
            isinstance((t.shape[0], 4), torch.Size),
            type(t.shape[0]) is int,
        )
        code = sum(2**i for i, answer in enumerate(answers) if answer)
        return t * code, str(t.shape[:-1] + (2,)), t.shape[1:].numel()

    check_against_eager(f, [(x(6),), (x(3),)], compiles=2, cache=cache)


def test_a_size_of_symbolic_dims_stays_symbolic():
    """``torch.Size`` converted each dim to an int: the sizes were pinned, a compile per length."""

    def f(t):
        size = torch.Size([t.shape[0], 2, -1])
        flat = torch.Size(d for d in (t.shape[0] * t.shape[1],))
        return t.view(size) * isinstance(size, torch.Size), t.view(flat), torch.Size([2, 3]).numel()

    check_against_eager(f, [(x(6),), (x(3),), (x(5),)], compiles=1)


def test_attributes_of_python_numbers():
    """``n.real`` or ``n.bit_length()`` of a symbolic number failed with AttributeError. The real part and
    numerator of a real number are the number (symbolic), the imaginary part and denominator constants; other
    attributes read the value, pinned."""

    def symbolic(t, n, s):
        return t * n.real + n.imag + n.numerator * n.denominator - s.real + s.imag + t.shape[0].real

    check_against_eager(symbolic, [(x(6), 4, 1.5), (x(3), 5, 2.5), (x(5), 6, 0.5)], compiles=1)

    def pinned(t, n, s, c):
        return t * n.bit_length(), s.is_integer(), s.as_integer_ratio(), c.real, c.imag, hex(t.shape[0])

    calls = [(x(6), 4, 1.5, 2 + 1j), (x(6), 5, 1.5, 2 + 1j), (x(6), 4, 2.0, 2 + 1j), (x(6), 4, 1.5, 1j)]
    check_against_eager(pinned, calls, compiles=4)


# --- Text and hashing ---------------------------------------------------------------------------------


def test_str_repr_format_and_fstrings_give_the_digits():
    def f(t, n):
        return str(t.shape[0]), repr(n), f"rows={t.shape[0]:03d}", format(n, "x"), f"{n!r}"

    check_against_eager(f, [(x(6), 10), (x(3), 11), (x(6), 10)], compiles=2)


def test_text_of_shapes_and_containers_gives_the_digits():
    """0.2.6 showed a tuple of symbolic sizes as proxy descriptions ('([IntegerProxy name=i0, value=6, ...')
    without pinning them, and a shape as a tuple under either cache; eager shows 'torch.Size([6, 3])'."""

    def f(t, n):
        sizes = str(t.size()), str(tuple(t.size())), t.size().numel() * t  # before any t.shape
        return *sizes, str(t.shape), f"{t.shape}", repr(list(t.shape)), str({"n": n, "dims": (n, t.shape[1])})

    check_against_eager(f, [(x(6), 10), (x(3), 11), (x(6), 10)], compiles=2)


def test_text_of_a_shape_read_after_numel():
    """thunder's numel reads the shape itself, and the interpreter then gave the user's ``t.shape`` that read's
    wrapper, which str showed as a tuple: the fuzzer's ``y * len(f'{y.shape}')`` after a branch on
    ``y.numel()`` multiplied by 6 (len('(1, 1)')) where eager multiplies by 18."""

    def f(t):
        return t * t.numel(), t * len(f"{t.shape}"), str(t.size())

    check_against_eager(f, [(x(1, 1),), (x(6),), (x(1, 1),)], compiles=2)


def test_string_keys_built_from_sizes():
    table = {"6": 2.0, "3": -1.0}

    def f(t):
        return t * table[str(t.shape[0])]

    check_against_eager(f, rows(6, 3, 6), compiles=2)


def test_hash_pins_the_value():
    def f(t, s):
        return t * {2.5: 1.0, 3.5: 2.0}[s]

    check_against_eager(f, [(x(), 2.5), (x(), 3.5), (x(), 2.5)], compiles=2)
    # A pin of the value (not of its hash) is expressible: sizes stay symbolic.
    check_against_eager(f, [(x(6), 2.5), (x(3), 2.5)], compiles=1)


# --- Number operations whose result type depends on the values ----------------------------------------


def test_max_of_an_int_and_a_float():
    def f(t, n):
        m = max(n, 2.5)
        return t * m, type(m) is int

    # Python returns the larger operand: an int for n = 3, 4; a float for n = 1, 2.
    check_against_eager(f, [(x(), 3), (x(), 1), (x(), 4), (x(), 2)], compiles=2)


def test_torch_sym_max_promotes_to_float():
    def f(t, n):
        return torch.full((2,), torch.sym_max(n, 2.5)), torch.full((2,), torch.sym_min(n, 2))

    check_against_eager(f, [(x(), 3), (x(), 1), (x(), 4)], compiles=1)


def test_int_power_with_a_symbolic_exponent():
    def f(t, n, k):
        return t * (n**k)

    ints = torch.arange(4)
    args = [(ints, 2, -1), (ints, 2, 1), (ints, 3, -2), (ints, 2, 3)]
    check_against_eager(f, args, compiles=2)  # an int for k >= 0, a float below


def test_divmod_of_sizes():
    def f(t, n):
        q, r = divmod(t.shape[0], n)
        return t[:q] * r

    check_against_eager(f, [(x(6), 4), (x(7), 3), (x(9), 2)], compiles=1)


# --- Values thunder reads itself ----------------------------------------------------------------------


def test_fallback_op_with_a_number_argument():
    def f(t, n):
        return torch.diagflat(t[0], offset=n)

    check_against_eager(f, [(x(), 1), (x(), 2), (x(), 1)], compiles=2)


SHAPED_FALLBACK_OPS = {
    "cumprod": lambda t: torch.cumprod(t, 0),
    "logcumsumexp": lambda t: torch.logcumsumexp(t, 1),
    "roll": lambda t: torch.roll(t, 1, 0),
    "bucketize": lambda t: torch.bucketize(t, torch.tensor([-0.5, 0.0, 0.5])),
    "searchsorted": lambda t: torch.searchsorted(torch.tensor([-0.5, 0.0, 0.5]), t),
    "kron": lambda t: torch.kron(t, torch.ones(2, 1)),
    "hstack": lambda t: torch.hstack([t, t[:, :1]]),
    "tile with dims as arguments": lambda t: t.tile(2, 1),  # (0.2.6: a TypeError)
    "tile of more dims": lambda t: torch.tile(t, (2, 1, 2)),
    "tile of fewer dims": lambda t: t.tile((3,)),
    "vector_norm over a dim": lambda t: torch.linalg.vector_norm(t, dim=1),
    "vector_norm of all": lambda t: torch.linalg.vector_norm(t, 3, keepdim=True),
    "norm": lambda t: t.norm(),
    "normalize": lambda t: torch.nn.functional.normalize(t, dim=-1),
    "cdist": lambda t: torch.cdist(t, t[:2]),
    "diag of a vector": lambda t: torch.diag(t[:, 0], 1),
    "diag_embed": lambda t: torch.diag_embed(t),
}


@pytest.mark.parametrize("name", SHAPED_FALLBACK_OPS)
def test_fallback_ops_keep_sizes_symbolic(name):
    """0.2.6 ran these torch ops as fallbacks on fake tensors of the traced sizes: a compile per shape."""
    check_against_eager(SHAPED_FALLBACK_OPS[name], [(x(3),), (x(5),), (x(4, 6),)], compiles=1)


@pytest.mark.parametrize(
    "equation, operands",
    [
        ("i,j->ij", lambda t: (torch.arange(t.shape[0]) * 1.0, t[0])),  # rotary embeddings' angles
        ("ij,kj->ik", lambda t: (t, t)),
        ("bi,i->b", lambda t: (t, t[0])),
    ],
)
def test_einsum_of_one_or_two_operands_keeps_sizes_symbolic(equation, operands):
    """thunder's einsum asked opt_einsum for the contraction path, which read every size: a compile per shape."""

    def f(t):
        return torch.einsum(equation, *operands(t))

    check_against_eager(f, [(x(3),), (x(5),), (x(4, 6),)], compiles=1)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_windows_of_a_tensor(cache):
    """``x.unfold(dim, size, step)`` ran ``F.unfold`` (im2col), whose id thunder gave its symbol: a tensor of
    another shape and other values where F.unfold's arguments happened to be valid, under either cache."""

    def f(t):
        return t.unfold(1, 2, 1) * 2, torch.Tensor.unfold(t, -1, 3, 2).sum(-1)

    symbolic = cache == "symbolic values"
    shapes = [(2, 3, 4, 5), (2, 6, 4, 5), (1, 3, 2, 7)]
    check_against_eager(f, [(torch.randn(s),) for s in shapes], cache=cache, compiles=1 if symbolic else 3)


def test_list_index_holding_symbolic_ints():
    def f(t, n):
        return t[[0, n]] * 2, t[[t.shape[0] - 1]]

    check_against_eager(f, [(x(6), 1), (x(6), 3), (x(4), 3), (x(6), 1)], compiles=3)


def test_list_index_gradient():
    def f(t, n):
        return (t[[n, 0]] * torch.arange(2.0)[:, None]).sum()

    jf = thunder.jit(f, cache="symbolic values")
    for n in (1, 3, 1):
        t = x().requires_grad_()
        expected = torch.autograd.grad(f(t, n), t)[0]
        actual = torch.autograd.grad(jf(t, n), t)[0]
        torch.testing.assert_close(actual, expected)
    assert thunder.cache_misses(jf) == 2


def test_tensor_built_from_sizes_and_ints():
    def f(t, n):
        return torch.tensor([t.shape[0], n]) * 2

    check_against_eager(f, [(x(6), 1), (x(3), 2), (x(6), 1)], compiles=2)


def test_tensor_of_a_symbolic_number():
    """``torch.tensor(n)`` of an int argument or a size failed ("NameError: name 'n' is not defined"); it is a
    0-d tensor of the number, not a pin, of torch's dtype for the number's Python type."""

    def f(t, n, s):
        return t * torch.tensor(n), torch.tensor(t.shape[0]), torch.tensor(s), torch.tensor(n, dtype=torch.float64)

    check_against_eager(f, [(x(6), 1, 0.5), (x(3), 2, 1.5), (x(5), 3, 2.5)], compiles=1)


def test_negative_slice_beyond_the_length_is_clamped():
    def f(t, n):
        return t[-n:] * 2

    check_against_eager(f, [(x(6), 3), (x(6), 9), (x(4), 2), (x(3), 7)], compiles=2)


def test_dtype_compares_equal_to_torch_dtypes():
    def f(t):
        if t.dtype == torch.float64:
            return t * 2
        if t.dtype in (torch.float16, torch.bfloat16):
            return t.float()
        return t - 1

    check_against_eager(f, [(x().double(),), (x(),), (x().half(),)], compiles=3)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_dtypes_and_devices_are_torch_objects(cache):
    """Traced code held thunder's dtype and device objects (``torch.device(...)`` makes one): ``t.dtype is
    torch.float32`` and ``isinstance(t.device, torch.device)`` were False and ``str(t.dtype)``
    'thunder.dtypes.float32', under either cache option; ``t.dtype.is_floating_point`` failed."""

    def f(t):
        cpu = torch.device("cpu")
        answers = (
            t.dtype is torch.float32,
            isinstance(t.dtype, torch.dtype),
            type((t * 2).dtype) is torch.dtype,
            t.dtype.is_floating_point,
            isinstance(t.device, torch.device),
            type(cpu) is torch.device,
            cpu == t.device,
        )
        code = sum(2**i for i, answer in enumerate(answers) if answer)
        return t * code, str(t.dtype), repr(t.device), f"{cpu}", str([t.dtype, cpu]), t.dtype.itemsize

    compiles = 2 if cache == "symbolic values" else 3  # (a new dtype recompiles; a new size only constant values)
    check_against_eager(f, [(x(),), (x().double(),), (x(3),)], compiles=compiles, cache=cache)


def test_device_index_is_pinned():
    def f(t, i):
        return t.to(torch.device("cpu", i)) * 2, i

    check_against_eager(f, [(x(), 0), (x(3), 0), (x(), 1)], compiles=2)


def test_shape_numel():
    def f(t):
        return t * t.shape.numel()

    check_against_eager(f, rows(6, 3, 5), compiles=1)


def test_branch_on_the_contiguity_of_an_input():
    def f(t):
        return t * 2 if t.is_contiguous() else t - 1

    base = x()
    check_against_eager(f, [(base,), (base.t(),), (x(3),), (x(5).t(),)], compiles=2)


def test_contiguity_of_a_computed_tensor_is_refused():
    def f(t):
        y = t.t()
        return y * 2 if y.is_contiguous() else y

    with pytest.raises(NotImplementedError, match="does not track the strides of tensors the program computes"):
        thunder.jit(f, cache="symbolic values")(x())


def test_strides_of_an_input():
    """0.2.6 had no ``x.stride()`` (AttributeError). An input's strides are answered and checked: a transposed
    input is a new program, a longer one with the same strides is not."""

    def f(t):
        return t * t.stride(0) + t.stride()[-1]

    jf = check_against_eager(f, [(x(3),), (x(4).t(),), (x(5),), (x(3),)], compiles=2)
    assert "guard t.stride() == (4, 1) failed" in str(thunder_symbolic.recompile_reasons(jf)[0])


def test_strides_of_a_computed_tensor_are_refused():
    def f(t):
        y = t * 2
        return y * y.stride(0)

    with pytest.raises(NotImplementedError, match="does not track the strides of tensors the program computes"):
        thunder.jit(f, cache="symbolic values")(x())


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_storage_attributes_of_tensors(cache):
    """``itemsize``, ``nbytes`` and ``layout`` were AttributeErrors in 0.2.6, and ``element_size()`` ran as a
    fallback at the first call's shape: a compile per shape under symbolic values."""

    def f(t):
        y = t.double()
        strided = t.layout == torch.strided
        return t * t.itemsize + t.nbytes + y.element_size() + y.nbytes + strided

    symbolic = cache == "symbolic values"
    check_against_eager(f, [(x(3),), (x(5),), (x(3).half(),)], cache=cache, compiles=2 if symbolic else 3)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_data_of_a_tensor(cache):
    """``x.data`` was an AttributeError in 0.2.6. It is ``x.detach()``: an in-place update of it updates ``x``."""

    def scaled(t):
        t.data.mul_(2)
        return t.data * 3 + t

    check_against_eager(scaled, [(x(3),), (x(5),)], cache=cache)


def test_broadcast_to_as_a_method():
    """thunder maps ``torch.broadcast_to`` but had no such tensor method (AttributeError)."""

    def f(t):
        return t[:1].broadcast_to(t.shape[0], t.shape[1]) * 2 + t.broadcast_to((2, *t.shape)).sum(0)

    check_against_eager(f, [(x(3),), (x(5),)], compiles=1)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_layout_of_an_input_is_checked(cache):
    """``x.layout``, ``x.is_sparse``, ``x.is_cpu`` and ``x.is_meta`` were AttributeErrors in 0.2.6. thunder takes a
    sparse input (its checks of a tensor do not tell it from a dense one): an input's layout is checked."""

    def f(t):
        scaled = t * 2 if t.layout == torch.strided else t * 3
        return scaled * ((2 if t.is_sparse else 1) + t.is_cpu + t.is_meta)

    jf = thunder.jit(f, cache=cache)
    dense = x(3, 3)
    sparse = dense.to_sparse()
    for t in (dense, sparse, dense):
        torch.testing.assert_close(jf(t).to_dense(), f(t).to_dense())
    assert thunder.cache_misses(jf) == 2
    assert "guard t.layout is torch.strided failed" in str(thunder_symbolic.recompile_reasons(jf)[0])


@pytest.mark.parametrize("method", ["half", "bfloat16", "double", "cfloat", "bool", "byte", "char", "short", "int"])
def test_casting_methods_keep_sizes_symbolic(method):
    """0.2.6 ran these methods as torch fallbacks at the first call's shape: a compile per shape."""

    def f(t):
        return getattr(t * 3, method)() * 2

    check_against_eager(f, [(x(3),), (x(5),), (x(2, 7),)], compiles=1)


def test_data_dependent_number_in_text_is_refused():
    def f(t):
        return t * 2, str(t.sum().item())

    with pytest.raises(DataDependentError, match="depends on tensor data"):
        thunder.jit(f, cache="symbolic values")(x())


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_branch_on_a_data_dependent_number_is_refused(cache):
    """Under constant values 0.2.6 converted the unknown value of ``s.item() > 0`` to bool as False: the else
    branch, whatever s held. A conversion of an unknown number is unknown, and Python's use of it refused."""

    def branch(t, s):
        return t * 2 if s.item() > 0 else t

    def conversion(t, s):
        return t * int(s.item())

    with pytest.raises(Exception, match="conversion to bool is not allowed on dynamic proxy"):
        thunder.jit(branch, cache=cache)(x(), torch.tensor(1.0))
    with pytest.raises(DataDependentError, match="depends on tensor data"):
        thunder.jit(conversion, cache=cache)(x(), torch.tensor(2.0))


NUMPY_NUMBERS = {
    "x * np.float32": (lambda t, s: t * s, "float32", 0.5, 0.75),
    "np.float32 * x": (lambda t, s: s * t, "float32", 2.0, 3.0),
    "torch.add": (lambda t, s: torch.add(t, s), "float64", 2.0, 3.0),
    "clamp(max=)": (lambda t, s: t.clamp(max=s), "float32", 0.1, 0.2),
    "torch.full": (lambda t, s: t + torch.full(t.shape, s), "int64", 3, 4),
    "x ** np.int32": (lambda t, s: t**s, "int32", 2, 3),
    "x * np.bool_": (lambda t, s: t * s, "bool_", True, False),
}


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
@pytest.mark.parametrize("use", list(NUMPY_NUMBERS))
def test_numpy_numbers_given_to_operators(cache, use):
    """torch takes numpy numbers as Python numbers; 0.2.6's operators failed on them ("Trying to convert unknown
    type <class 'numpy.float32'> to a numbertype"), and its interpreter on ``np.float32(2) * x``. The numpy value is
    checked by value."""
    numpy = pytest.importorskip("numpy")
    f, kind, first, second = NUMPY_NUMBERS[use]
    args = [(x(), getattr(numpy, kind)(value)) for value in (first, second, first)]
    check_against_eager(f, args, cache=cache, compiles=2)


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_numpy_function_of_a_float_argument(cache):
    """``np.sqrt(d)`` of a float argument read the proxy under symbolic values ("loop of ufunc does not support
    argument 0 of type FloatProxy"); it reads the value, pinned, as ``math.sqrt`` does."""
    numpy = pytest.importorskip("numpy")
    check_against_eager(lambda t, d: t / numpy.sqrt(d), [(x(), 4.0), (x(), 9.0), (x(), 4.0)], cache=cache, compiles=2)
