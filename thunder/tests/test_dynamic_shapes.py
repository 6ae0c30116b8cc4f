"""Symbolic values held to eager PyTorch: outputs equal at every call, and exactly the expected compiles.

Each sequence crosses every branch both ways; the compile count is one per distinct control-flow path,
never one per distinct value where a predicate guard suffices.
"""

import math

import pytest
import torch

import thunder
from thunder_symbolic.testing import check_against_eager, run_python


def rows(*sizes, cols=3):
    return [(torch.randn(n, cols),) for n in sizes]


# --- Predicate guards on tensor sizes ---------------------------------------------------------------


def test_size_branch_is_guarded_by_the_predicate():
    def f(x):
        if x.shape[0] > 8:
            return x * 2
        return x - 1

    # 4, 5 -> "<= 8"; 10, 12 -> "> 8"; back and forth: two programs, never a wrong one.
    jf = check_against_eager(f, rows(4, 10, 5, 12, 3, 9), compiles=2)
    prologue = str(thunder.last_prologue_traces(jf)[-1])
    assert "x.shape[0] > 8" in prologue


def test_equality_between_sizes_of_two_inputs():
    def f(x, y):
        if x.shape[0] == y.shape[0]:
            return x + y
        return x.sum(0) + y.sum(0)

    args = [(torch.randn(n, 3), torch.randn(m, 3)) for n, m in ((3, 3), (4, 5), (6, 6), (2, 7), (5, 5))]
    check_against_eager(f, args, compiles=2)


def test_chained_comparison():
    def f(x):
        if 2 < x.shape[0] <= 6:
            return x * 3
        return x

    check_against_eager(f, rows(4, 8, 5, 2, 3, 9), compiles=3)


def test_numel_and_inequality():
    def f(x):
        if x.numel() > 100:
            return x.mean()
        return x.sum()

    check_against_eager(f, rows(10, 40, 20, 50, cols=4), compiles=2)


def test_modulo_predicate():
    def f(x):
        if x.shape[0] % 2 == 0:
            return x[::2] * 1
        return x + 1

    check_against_eager(f, rows(4, 5, 6, 7, 8, 9), compiles=2)


def test_ndim_after_size_dependent_squeeze():
    def f(x):
        y = x.squeeze(0)
        return y.ndim, y * 2

    check_against_eager(f, rows(1, 3, 1, 4), compiles=2)


# --- Int, bool, str and float arguments --------------------------------------------------------------


def test_int_argument_branch_is_a_predicate_not_a_pin():
    def f(x, n):
        if n > 5:
            return x * n
        return x - n

    x = torch.randn(3)
    check_against_eager(f, [(x, 7), (x, 9), (x, 1), (x, 3), (x, 11), (x, 0)], compiles=2)


def test_truthiness_of_an_int_argument():
    def f(x, n):
        if n:
            return x * n
        return x

    x = torch.randn(3)
    check_against_eager(f, [(x, 2), (x, 0), (x, 5), (x, 0)], compiles=2)


def test_number_argument_is_guarded_by_type():
    def f(a, b):
        return torch.full((2,), a) * b, a * b

    check_against_eager(f, [(7, 2), (7.5, 2.0), (9, 4), (1.5, 0.5)], compiles=2)


def test_bool_argument_branch():
    def f(x, flag):
        if flag:
            return x + 1
        return x - 1

    x = torch.randn(3)
    check_against_eager(f, [(x, True), (x, False), (x, True)], compiles=2)


def test_str_argument_branch():
    def f(x, mode):
        if mode == "add":
            return x + 1
        return x * 2

    x = torch.randn(3)
    check_against_eager(f, [(x, "add"), (x, "mul"), (x, "add")], compiles=2)


# --- Values that become Python constants are pinned --------------------------------------------------


def test_loop_over_a_size_is_unrolled_and_pinned():
    def f(x):
        acc = x[0]
        for i in range(1, x.shape[0]):
            acc = acc + x[i]
        return acc

    check_against_eager(f, rows(2, 4, 2, 3), compiles=3)


def test_float_of_a_size_is_pinned():
    def f(x):
        return x * float(x.shape[0])

    check_against_eager(f, rows(2, 5, 2), compiles=2)


def test_math_sqrt_of_a_size_is_pinned():
    def f(x):
        return x / math.sqrt(x.shape[-1])

    check_against_eager(f, [(torch.randn(2, n),) for n in (4, 9, 4)], compiles=2)


def test_int_of_a_size_is_pinned():
    def f(x):
        return x * int(x.shape[0])

    check_against_eager(f, rows(4, 6, 4), compiles=2)


def test_len_of_a_tensor_is_its_symbolic_first_dim():
    def f(x):
        return x * len(x)

    check_against_eager(f, rows(4, 6, 4, 5), compiles=1)


def test_len_used_as_a_range_is_pinned():
    def f(x):
        for _ in range(len(x)):
            x = x * 2
        return x

    check_against_eager(f, rows(2, 3, 2), compiles=2)


def test_split_pins_its_number_of_pieces_only():
    def f(x):
        return [t * 2 for t in torch.split(x, 2)]

    # 4 rows -> 2 pieces, 6 -> 3, 5 -> 3 with a short last one (the program of 6 rows), 0 -> one empty piece.
    check_against_eager(f, rows(4, 6, 4, 5, 0), compiles=3)


def test_int_argument_used_as_range_is_pinned():
    def f(x, n):
        for _ in range(n):
            x = x * 2
        return x

    x = torch.randn(3)
    check_against_eager(f, [(x, 1), (x, 3), (x, 1)], compiles=2)


# --- Builtin min and max ---------------------------------------------------------------------------


def test_builtin_min_of_size_and_constant():
    def f(x):
        return x[: min(x.shape[0], 5)] * 1

    check_against_eager(f, rows(3, 8, 4, 10), compiles=2)


def test_builtin_min_of_size_and_int():
    def f(x, n):
        return x[: min(x.shape[0], n)] * 1

    args = [(torch.randn(m, 2), n) for m, n in ((6, 5), (3, 5), (8, 2), (4, 7))]
    check_against_eager(f, args, compiles=2)


def test_builtin_max_of_sizes():
    def f(x):
        return x[max(x.shape[0] - 5, 0) :] * 1

    check_against_eager(f, rows(3, 8, 4, 10), compiles=2)


# --- Shape-polymorphic programs stay one compile ---------------------------------------------------


@pytest.mark.parametrize("sizes", [(4, 5, 7, 9, 13)])
def test_shape_polymorphic_program_compiles_once(sizes):
    def f(x, n):
        return (x[:n] * x.shape[0]).sum(0) + n

    check_against_eager(f, [(torch.randn(m, 3), m // 2) for m in sizes], compiles=1)


# --- Modules ---------------------------------------------------------------------------------------


def test_linear_module_keeps_static_parameter_shapes():
    # Inference (no_grad); training the same module is in test_backward_symbolic.py.
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    with torch.no_grad():
        jm = check_against_eager(model, rows(3, 5, 7, 2, cols=8), compiles=1)
    assert thunder.cache_hits(jm) == 3


# --- Dims computed by meta functions are produced in the trace -------------------------------------


def test_numel_of_a_concatenation():
    check_against_eager(lambda x: torch.cat([x, x]).numel() * x.sum(), rows(3, 5, 7), compiles=1)


def test_numel_of_a_slice():
    check_against_eager(lambda x: x[1:].numel() * 2, rows(3, 5, 7), compiles=1)


def test_numel_after_reshape():
    def f(x):
        y = x.reshape(-1)
        return y * y.numel()

    check_against_eager(f, rows(3, 5, 7), compiles=1)


def test_size_unpacking_and_iteration():
    def f(x):
        rows_, cols = x.size()
        return x * rows_ + cols, sum(r for r in x[:2])

    check_against_eager(f, rows(3, 5, 7), compiles=1)


def test_embedding_then_linear():
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 3))
    with torch.no_grad():
        check_against_eager(model, [(torch.randint(0, 10, (1, n)),) for n in (3, 5, 7)], compiles=1)


def test_integer_arange_of_sizes_and_int_arguments():
    def f(x, n):
        return torch.arange(x.shape[0] + 1) * 2, torch.arange(n, 0, -3), torch.arange(2, x.shape[0], 2)

    check_against_eager(f, [(torch.randn(m, 2), k) for m, k in ((5, 7), (8, 9), (12, 4), (6, 10))], compiles=1)


def test_empty_arange_is_one_dimensional():
    """0.2.6 gave an arange of length 0 a 0-d proxy: its shape was () and its ndim 0 (either cache option),
    len() raised TypeError and cat or index_put with it failed."""

    def f(x, n):
        r = torch.arange(n)
        y = x.index_put((torch.arange(x.shape[0]),), x * 3, accumulate=True)
        return r.ndim, len(r), torch.cat([r, torch.arange(3)]) * 2, y

    calls = [(torch.randn(m, 2), k) for m, k in ((3, 4), (0, 0), (5, 2), (2, 0))]
    check_against_eager(f, calls, compiles=1)


def test_modulo_of_a_tensor_is_remainder():
    """0.2.6 resolved a tensor's `%` to a method the torch language lacks ("'NoneType' object is not callable")."""

    def f(x, n):
        return x % 3, 7 % x, x % -n, (torch.arange(x.shape[0]) - n) % x.shape[0]

    calls = [(torch.randn(m) * 5, k) for m, k in ((5, 2), (8, 3), (6, 4))]
    check_against_eager(f, calls, compiles=1)


def test_without_grad_the_same_program_compiles_once():
    jf = check_against_eager(lambda x: x[: x.shape[0] // 2] * 2, rows(6, 8, 5, 7), compiles=1)
    assert thunder.last_backward_traces(jf) == []


# --- Number operations on symbolic ints (and floats): Python's results, one compile ------------------

NUMBER_ARGS = [(7, 2), (9, 4), (17, 5), (-6, 4)]


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: (a // b, a % b, -a, +a, abs(a - 10)),
        lambda a, b: (a << b, a >> b, ~a),
        lambda a, b: (round(a / b), math.ceil(a / b), math.floor(a / b), math.trunc(a / b)),
        lambda a, b: (a + b) * 2 - b,
    ],
    ids=["floordiv-mod-neg-pos-abs", "shifts-invert", "round-ceil-floor-trunc", "arithmetic"],
)
def test_number_operations_on_int_arguments(fn):
    check_against_eager(fn, NUMBER_ARGS, compiles=1)


def test_float_floordiv_and_mod_recompile_on_type_change():
    check_against_eager(lambda a, b: (a // b, a % b), [(7, 2), (7.5, 2.0), (9, 4), (1.5, 0.5)], compiles=2)


def test_results_returned_as_a_tuple_are_not_pinned():
    check_against_eager(lambda a, b: (a % b, a + b), NUMBER_ARGS, compiles=1)


def test_sym_max_and_sym_min_stay_symbolic():
    def f(x, n):
        return x[: torch.sym_max(n, 2)] * torch.sym_min(n, 3)

    check_against_eager(f, [(torch.randn(6, 2), k) for k in (1, 3, 4, 5)], compiles=1)


# --- Regressions found by the differential fuzzer (test_fuzz_dynamic_shapes.py) ----------------------


def test_fuzz_loop_bound_by_min_of_int_and_constant_pins_the_min_not_the_int():
    def f(x, k):
        for _ in range(min(k, 3)):
            x = x * 2 + 1
        return x

    x = torch.randn(2, 1)
    check_against_eager(f, [(x, 0), (x, 3), (x, 4), (x, 7)], compiles=2)


def test_fuzz_reshape_with_minus_one_and_a_zero_size_raises_runtime_error():
    def f(x):
        return x.flatten().reshape(x.shape[0], -1)

    jf = thunder.jit(f, cache="symbolic values")
    with pytest.raises(RuntimeError):
        f(torch.randn(0, 3))
    with pytest.raises(RuntimeError, match="ambiguous"):
        jf(torch.randn(0, 3))
    check_against_eager(f, rows(2, 4))


# --- The torch.compile executor runs the same programs ---------------------------------------------

TORCH_COMPILE_PROGRAMS = {
    "view": lambda x: x.view(x.shape[0], -1) * 2,
    "returned size": lambda x: (x + 1, x.shape[0]),
    "size branch": lambda x: x * 2 if x.shape[0] > 4 else x - 1,
    "expand": lambda x: x[:1].expand(x.shape[0], -1) + x,
    "factory of a size": lambda x: torch.zeros(x.shape[0], 3) + x,
    "cat then reshape": lambda x: torch.cat([x, x]).reshape(-1, 3) * 2,
    "numel of a cat": lambda x: torch.cat([x, x]).numel() * x.sum(),
}


@pytest.mark.parametrize("name", TORCH_COMPILE_PROGRAMS)
def test_torch_compile_executor(name):
    from thunder.executors.torch_compile import torch_compile_ex

    expected_compiles = 2 if name == "size branch" else 1
    program = TORCH_COMPILE_PROGRAMS[name]
    check_against_eager(program, rows(3, 5, 7), compiles=expected_compiles, executors=[torch_compile_ex])


# --- Aliased inputs ---------------------------------------------------------------------------------


def aliased_inputs(rows_):
    base = torch.randn(rows_, 1, 2)
    return base, base.clone(), base.view(1, rows_, 2)


def test_aliased_inputs_with_symbolic_shapes():
    def f(x, y, z):
        return y.exp_(), x * 2, z + 1

    check_against_eager(f, [aliased_inputs(n) for n in (2, 3, 5)], compiles=1)


def _disjoint_halves(n):
    base = torch.arange(2.0 * n)
    return base[:n], base[n:]


def _matrix_and_its_first_row(n):
    base = torch.randn(2 * n)
    return base.view(2, n), base[:n]


def _overlapping_windows_and_base(n):
    base = torch.randn(n + 2)
    return base[:n], base[1 : n + 1], base


def _update_first_read_second(a, b):
    a.add_(1)
    return b * 2


def _update_by_other_sum(y, z):
    return y.add_(z.sum())


def _read_update_update_read(x, y, z):
    before = z * 1
    x.mul_(2)
    y.add_(1)
    return before, z + 0


ALIASED_INPUTS = {
    # 0.2.6 stood in for `b` with `a` (same shape): b * 2 read a's updated elements, a silent wrong result.
    "disjoint views of one storage": (_update_first_read_second, _disjoint_halves),
    # 0.2.6: "Attempting to reshape a.shape=(2, 3) to shape=(3,)".
    "views of different numel": (_update_by_other_sum, _matrix_and_its_first_row),
    "overlapping views and their base": (_read_update_update_read, _overlapping_windows_and_base),
}


DISJOINT_HALVES_SNIPPET = """
import torch, thunder
def f(a, b):
    a.add_(1)
    return b * 2
base = torch.arange(6.0)
print("right" if thunder.jit(f)(base[:3], base[3:]).tolist() == [6.0, 8.0, 10.0] else "wrong")
"""


@pytest.mark.parametrize(("switch", "expected"), [("0", "wrong"), ("1", "right")])
def test_disjoint_views_read_their_own_elements_only_when_patched(switch, expected):
    # The regression held against upstream: 0.2.6 (THUNDER_SYMBOLIC=0) returns (a + 1) * 2 for b * 2.
    result = run_python(DISJOINT_HALVES_SNIPPET, env={"THUNDER_SYMBOLIC": switch})
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == expected


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
@pytest.mark.parametrize("name", ALIASED_INPUTS)
def test_inputs_sharing_memory_updated_in_place(name, cache):
    fn, make_inputs = ALIASED_INPUTS[name]
    check_against_eager(
        fn, [make_inputs(n) for n in (3, 4, 6)], cache=cache, compiles=1 if cache == "symbolic values" else 3
    )


@pytest.mark.parametrize("name", ALIASED_INPUTS)
def test_inputs_sharing_memory_with_the_torch_compile_executor(name):
    from thunder.executors.torch_compile import torch_compile_ex

    fn, make_inputs = ALIASED_INPUTS[name]
    check_against_eager(fn, [make_inputs(n) for n in (3, 4, 6, 5)], compiles=1, executors=[torch_compile_ex])


def test_builtin_min_max_of_sequences_and_keywords_keep_python_semantics():
    def f(x, k):
        return x * max(x.shape) + min([k, 2]) + max(k, 1, 0) + min((3, k), key=lambda v: -v)

    check_against_eager(f, [(torch.randn(m, 3), k) for m, k in ((2, 0), (5, 4), (4, 1), (6, 3))])


# --- Values that depend on tensor data cannot be guarded: a clear error, never a wrong program -------


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x * float(x.sum().item()),
        lambda x: x[: int(x.sum().item() > 0) + 1],
        lambda x: x * 2 if x.sum().item() > 0 else x,
    ],
    ids=["float", "int-of-comparison", "branch"],
)
def test_python_values_of_data_dependent_numbers_are_refused(fn):
    jf = thunder.jit(fn, cache="symbolic values")
    with pytest.raises(Exception, match="depends on tensor data|dynamic proxy"):
        jf(torch.ones(3))


def test_data_dependent_numbers_kept_symbolic_work():
    check_against_eager(lambda x: x * x.sum().item(), [(torch.full((n,), float(n)),) for n in (2, 3, 4)], compiles=1)
