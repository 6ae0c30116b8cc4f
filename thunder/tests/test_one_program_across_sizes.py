"""Ordinary dynamic-shape programs (the corpus of ``benchmark_compiles.py``), several of which 0.2.6 (and
this package before its guard algebra) specialized to one size without need: each compiles once across at
least 4 sizes, with eager's outputs. The guards each keeps are checked through ``thunder_symbolic.explain``:
simplified, none of them always true."""

import importlib.util
from pathlib import Path

import pytest
import torch

import thunder_symbolic
from thunder_symbolic.testing import check_against_eager


def _load_corpus():
    """The programs of ``thunder/benchmarks/benchmark_compiles.py`` (one definition for both)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / "benchmark_compiles.py"
    spec = importlib.util.spec_from_file_location("benchmark_compiles", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


corpus = _load_corpus()
CASES = corpus.PROGRAMS
split_by_four, narrow, _x = corpus.split_by_four, corpus.narrow, corpus._x


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


@pytest.mark.parametrize("cache", ["symbolic values", "constant values"])
def test_split_of_an_empty_dim_is_one_empty_piece(cache):
    """0.2.6 split a dim of static size 0 into no pieces: `len(...)` was 0 where torch gives 1, and the long
    fuzzing profile's `y.split(2)[-1]` an IndexError."""

    def split_nothing(x):
        empty = torch.zeros(0, x.shape[1])
        return len(empty.split(2)), empty.split(2)[-1] + x.sum()

    check_against_eager(
        split_nothing, [(_x(n, 2),) for n in (3, 4)], compiles=1 if cache == "symbolic values" else 2, cache=cache
    )


def test_narrow_out_of_range_raises_as_eager_does():
    jfn = check_against_eager(narrow, [(_x(8, 2), 1, 3), (_x(9, 2), 2, 4)], compiles=1)
    with pytest.raises(RuntimeError):
        narrow(_x(8, 2), 6, 3)
    with pytest.raises(RuntimeError):
        jfn(_x(8, 2), 6, 3)


@pytest.mark.parametrize(
    "name", ["rotary embedding (complex)", "repeat a growing KV cache", "view to a size built from the shape"]
)
def test_thunderfx_keeps_the_program_in_one_thunder_program(name):
    """thunderfx leaves to PyTorch what thunder has no mapping for, splitting the graph there. The complex
    rotary embedding's fallback ops (polar, view_as_complex, view_as_real) have symbolic shapes, the length
    of a grown cache is Dynamo's ``torch.sym_sum``, and a size built from the shape Dynamo's ``torch.Size``
    (whose result the view's proxy could not be made of): all stay in thunder, one program, one compile."""
    from thunder.dynamo import thunderfx

    import thunder

    torch._dynamo.reset()
    fn, calls = CASES[name]
    compiled = thunderfx(fn, cache="symbolic values")
    for args in calls:
        torch.testing.assert_close(compiled(*args), fn(*args))
    info = compiled._backend.subgraph_infos[-1]
    assert info.split_reasons == []
    (program,) = info.thunder_compiled_fns
    assert thunder.cache_misses(program) == 1


def test_guards_implied_by_others_are_not_checked():
    """Branching on ever larger thresholds keeps only the strongest guard."""
    jfn = check_against_eager(corpus.branches_on_thresholds, [(_x(n, 2),) for n in (20, 30, 17)], compiles=1)
    (program,) = thunder_symbolic.explain(jfn)
    assert [condition for condition, _ in program.guards] == ["(x.shape[0] > 15)"]
    assert program.observed >= 16


def test_the_benchmark_measures_compiles_and_guards():
    fn, calls = CASES["branches on 16 thresholds"]
    assert corpus.measure(fn, calls) == {"compiles": 1, "guards": 1, "matches_eager": True}


def test_shapes_of_different_ranks_are_not_compared_size_by_size():
    """Broadcasting a 1-d arange against a 2-d input compared its length with the input's first dim (Python's
    tuple == compares items before lengths): square inputs recompiled."""
    calls = [(_x(2, 5), 1), (_x(4, 4), 2), (_x(5, 5), 0), (_x(3, 7), 2)]
    check_against_eager(corpus.arange_from_an_int, calls, compiles=1)


def _scaled_silu(x, w):
    return torch.nn.functional.silu(x @ w).sum(-1) * x.shape[0]


@pytest.mark.parametrize("cache", [None, "constant values"])
def test_thunderfx_regions_of_a_dynamic_graph_compile_once(cache):
    """Dynamo makes its graph dynamic at the second size it sees; thunderfx then jits its thunder regions with
    symbolic values (one compile for every later size, as Inductor's), unless it was given a cache option."""
    from thunder.dynamo import thunderfx

    import thunder

    torch._dynamo.reset()
    compiled = thunderfx(_scaled_silu, **({} if cache is None else {"cache": cache}))
    for rows in (3, 5, 7, 9):
        x, w = torch.randn(rows, 4), torch.randn(4, 2)
        torch.testing.assert_close(compiled(x, w), _scaled_silu(x, w))
    static, dynamic = compiled._backend.subgraph_infos
    assert [thunder.cache_misses(fn) for fn in static.thunder_compiled_fns] == [1]
    assert [thunder.cache_misses(fn) for fn in dynamic.thunder_compiled_fns] == [1 if cache is None else 3]
