"""Programs that 0.2.6 (and this package before its guard algebra) specialized to one size without need:
each compiles once across at least 4 sizes, with eager's outputs. The guards each keeps are checked
through ``thunder_symbolic.explain``: simplified, none of them always true."""

import pytest
import torch

import thunder_symbolic
from thunder_symbolic.testing import check_against_eager


def new_factories(x):
    ones = x.new_ones((x.shape[0], 3))
    return x.new_zeros(x.shape[0], 3) + ones + x.new_full((x.shape[0], 3), 2.0) + x.new_empty(x.shape[0], 3).zero_()


def narrow(x, start, length):
    return x.narrow(0, start, length) * 2


def narrow_from_the_end(x, length):
    return torch.narrow(x, 0, -length, length) + 1


def chunk_in_two(x):
    a, b = x.chunk(2)
    return a.sum(0) + b.sum(0)


def length_times(x):
    return x * len(x)


def split_by_four(x):
    return [piece * 2 for piece in x.split(4)]


def cat_of_two_halves(x, n):
    return torch.cat([x[:n], x[n:] * 2])


def arange_from_an_int(x, start):
    return x + torch.arange(start, start + x.shape[1])


def sum_over_an_int_dim(a, s):
    return (a * s).sum(s)


def _x(*shape):
    return torch.randn(*shape)


CASES = {
    "new_zeros/new_ones/new_full/new_empty": (new_factories, [(_x(n, 3),) for n in (3, 4, 5, 7)]),
    "narrow with int arguments": (narrow, [(_x(8, 2), 1, 3), (_x(9, 2), 2, 4), (_x(10, 2), 0, 5), (_x(12, 2), 3, 6)]),
    "narrow from the end": (narrow_from_the_end, [(_x(8, 2), 3), (_x(9, 2), 4), (_x(10, 2), 2), (_x(12, 2), 12)]),
    "chunk(2) of a varying dim": (chunk_in_two, [(_x(n, 2),) for n in (6, 7, 10, 13)]),
    "len(x)": (length_times, [(_x(n, 2),) for n in (3, 4, 5, 6)]),
    "split(4) into 2 pieces": (split_by_four, [(_x(n, 2),) for n in (8, 7, 6, 5)]),
    "cat of pieces of equal length": (cat_of_two_halves, [(_x(6, 2), 2), (_x(6, 3), 3), (_x(8, 2), 4), (_x(9, 2), 5)]),
    "arange(start, start + size)": (arange_from_an_int, [(_x(2, n), n - 3) for n in (5, 6, 7, 9)]),
    "sum over an int dim": (sum_over_an_int_dim, [(_x(n, 3, 4), 1) for n in (2, 3, 4, 5)]),
}


@pytest.mark.parametrize("name", CASES)
def test_one_compile_across_sizes(name):
    fn, calls = CASES[name]
    jfn = check_against_eager(fn, calls, compiles=1)
    (program,) = thunder_symbolic.explain(jfn)
    assert program.observed >= len(program.guards)
    assert not any(condition in ("True", "(True)") for condition, _ in program.guards)


def test_chunk_and_split_pin_the_number_of_pieces():
    def chunk_pieces(x):
        return [piece * 2 for piece in x.chunk(2)]

    check_against_eager(chunk_pieces, [(_x(n, 2),) for n in (6, 7, 1, 10)], compiles=2)  # 1 row: one piece
    check_against_eager(split_by_four, [(_x(n, 2),) for n in (8, 9, 5, 12, 0)], compiles=3)  # 2, 3, 1 pieces


def test_narrow_out_of_range_raises_as_eager_does():
    jfn = check_against_eager(narrow, [(_x(8, 2), 1, 3), (_x(9, 2), 2, 4)], compiles=1)
    with pytest.raises(RuntimeError):
        narrow(_x(8, 2), 6, 3)
    with pytest.raises(RuntimeError):
        jfn(_x(8, 2), 6, 3)


def test_guards_implied_by_others_are_not_checked():
    """Branching on ever larger thresholds keeps only the strongest guard."""

    def fn(x):
        taken = 0
        for threshold in range(16):
            if x.shape[0] > threshold:
                taken += 1
        return x + taken

    jfn = check_against_eager(fn, [(_x(n, 2),) for n in (20, 30, 17)], compiles=1)
    (program,) = thunder_symbolic.explain(jfn)
    assert [condition for condition, _ in program.guards] == ["(x.shape[0] > 15)"]
    assert program.observed >= 16
