"""Shape controls (static dims, dynamic dims with a range) and the recompile budget, against eager."""

import warnings

import pytest
import torch

import thunder
import thunder_symbolic
from thunder_symbolic import STATIC, DeclaredShapeError, Dim, RecompileLimitExceeded, RecompileLimitWarning
from thunder_symbolic.testing import check_against_eager


def add(x, y):
    return x + y


def doubled(x):
    return x * 2


def repeated(x, n):
    for _ in range(n):
        x = x * 2
    return x


def guards(jfn, program=0):
    return [condition for condition, _ in thunder_symbolic.explain(jfn)[program].guards]


def pairs(*rows):
    return [(torch.randn(n, 3), torch.randn(n, 3)) for n in rows]


# --- Static dims ---------------------------------------------------------------------------------------


def test_a_dim_marked_static_specializes():
    calls = [(thunder_symbolic.mark_static(torch.randn(n, 4), 0),) for n in (1, 2, 1, 3)]
    jfn = check_against_eager(doubled, calls, compiles=3)
    assert guards(jfn) == ["(x.shape[0] == 1)"]


def test_a_dim_declared_static_by_name_specializes():
    jfn = check_against_eager(
        doubled, [(torch.randn(n, 4),) for n in (5, 6, 5)], compiles=2, dynamic_shapes={"x": {0: STATIC}}
    )
    assert guards(jfn) == ["(x.shape[0] == 5)"]


# --- Dynamic dims with a range ---------------------------------------------------------------------------


def test_a_range_drops_the_guards_it_implies():
    plain = check_against_eager(add, pairs(2, 3, 5, 8), compiles=1)
    ranged = check_against_eager(add, pairs(2, 3, 5, 8), compiles=1, dynamic_shapes={"x": {0: Dim(min=2, max=64)}})
    assert "(x.shape[0] != 1)" in guards(plain)
    assert "(x.shape[0] != 1)" not in guards(ranged)
    assert guards(ranged)[:2] == ["(x.shape[0] >= 2)", "(x.shape[0] <= 64)"]


def test_a_call_outside_a_range_recompiles_for_its_side_of_the_range():
    calls = [(thunder_symbolic.mark_dynamic(x, 0, min=2, max=6), y) for x, y in pairs(3, 7, 9, 4, 1)]
    jfn = check_against_eager(add, calls, compiles=3)  # [2, 6]; above it (7 and 9); 1
    assert "(x.shape[0] > 6)" in guards(jfn, 1)


def test_a_call_outside_a_strict_range_raises_naming_the_argument_dim_range_and_value():
    jfn = thunder.jit(add, cache="symbolic values", dynamic_shapes={"y": {0: Dim(min=2, strict=True)}})
    x, y = pairs(3)[0]
    torch.testing.assert_close(jfn(x, y), x + y)
    with pytest.raises(DeclaredShapeError, match=r"y\.shape\[0\] is 1, outside the range \[2, inf\] declared for it"):
        jfn(torch.randn(1, 3), torch.randn(1, 3))
    assert isinstance(DeclaredShapeError("x"), ValueError)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: Dim(min=3, max=2), ValueError, "min"),
        (lambda: Dim(min=-1), ValueError, "min"),
        (lambda: thunder_symbolic.mark_dynamic(torch.ones(2, 2), 2), ValueError, "dim"),
        (lambda: thunder_symbolic.mark_static([1, 2], 0), TypeError, "tensor"),
        (lambda: thunder_symbolic.mark_dynamic([1, 2], 0), TypeError, "mark_dynamic expects a tensor"),
        (lambda: thunder_symbolic.mark_dynamic(torch.tensor(1.0), 0), ValueError, "0-d tensor"),
        (lambda: thunder_symbolic.mark_dynamic(torch.ones(2), 0, strict="no"), TypeError, "strict must be a bool"),
        (lambda: thunder.jit(add, dynamic_shapes={"z": {0: Dim()}}), ValueError, "'z'"),
        (lambda: thunder.jit(add, dynamic_shapes={"x": {0: (2, 8)}}), TypeError, "Dim"),
        (lambda: thunder.jit(add, recompile_limit=0), ValueError, "recompile_limit"),
        (lambda: thunder.jit(add, on_recompile_limit="ignore"), ValueError, "on_recompile_limit"),
    ],
)
def test_bad_declarations_are_refused_clearly(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_the_default_cache_option_from_the_environment(monkeypatch):
    """A jit call that names no cache option takes THUNDER_SYMBOLIC_DEFAULT_CACHE's: one program across sizes."""
    monkeypatch.setenv("THUNDER_SYMBOLIC_DEFAULT_CACHE", "symbolic values")
    jf = thunder.jit(lambda x: x * 2)
    for rows in (2, 3, 5):
        torch.testing.assert_close(jf(t := torch.randn(rows, 2)), t * 2)
    assert thunder.cache_misses(jf) == 1
    assert thunder.compile_data(jf).cache_option is thunder.CACHE_OPTIONS.SYMBOLIC_VALUES
    named = thunder.jit(lambda x: x * 2, cache="constant values")  # a call that names one keeps it
    assert thunder.compile_data(named).cache_option is thunder.CACHE_OPTIONS.CONSTANT_VALUES
    monkeypatch.setenv("THUNDER_SYMBOLIC_DEFAULT_CACHE", "sometimes")
    with pytest.raises(ValueError, match="THUNDER_SYMBOLIC_DEFAULT_CACHE must be one of"):
        thunder.jit(add)


@pytest.mark.parametrize("value, on", [("0", False), ("false", False), ("No", False), ("off", False), ("1", True),
                                       ("yes", True), ("", True)])  # fmt: skip
def test_boolean_switches_read_one_way(monkeypatch, tmp_path, value, on):
    from thunder_symbolic.distributed import shared_sums
    from thunder_symbolic.thunderfx import verdict_cache

    monkeypatch.setenv("THUNDER_SYMBOLIC_SHARED_SUMS", value)
    monkeypatch.setenv("THUNDER_SYMBOLIC_VERDICT_CACHE", value)
    monkeypatch.setenv("THUNDER_SYMBOLIC_CACHE_DIR", str(tmp_path))
    assert shared_sums.enabled() is (on and shared_sums.platform.machine() in ("x86_64", "AMD64"))
    assert (verdict_cache._open() is not None) is on


def test_a_switch_that_is_no_switch_is_an_error(monkeypatch):
    from thunder_symbolic.activation.environment import switch

    monkeypatch.setenv("THUNDER_SYMBOLIC_SHARED_SUMS", "maybe")
    with pytest.raises(ValueError, match="THUNDER_SYMBOLIC_SHARED_SUMS must be one of"):
        switch("THUNDER_SYMBOLIC_SHARED_SUMS")


# --- The recompile budget ----------------------------------------------------------------------------------


def _calls(*ns):
    return [(torch.randn(2, 2), n) for n in ns]


def test_at_the_limit_calls_run_eagerly_with_one_warning_naming_the_guards_that_failed_most():
    """torch.compile's behaviour: no program past the limit; a call that no cached program accepts runs the
    function eagerly (correctly), and the cached programs keep serving the calls they accept."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_against_eager(repeated, _calls(0, 1, 2, 3, 4, 5, 1, 5), compiles=3, recompile_limit=3)
    found = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(found) == 1
    message = str(found[0].message)
    assert "repeated has compiled 3 programs, its recompile limit (3), and none of them accepts this call" in message
    assert "(n == 0) (recorded at test_controls.py" in message and "for _ in range(n):" in message
    assert "run eagerly" in message
    assert found[0].filename == __file__ or "thunder_symbolic/testing.py" in found[0].filename  # the user's call


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_past_the_limit_nothing_is_compiled_for_functions_and_modules(cache):
    linear = torch.nn.Linear(3, 2)
    jm = thunder.jit(linear, cache=cache, recompile_limit=1)
    jfn = thunder.jit(repeated, cache=cache, recompile_limit=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileLimitWarning)
        for b in (1, 2, 3, 4):
            x = torch.randn(b, 3)
            torch.testing.assert_close(jm(x), linear(x))
        for n in range(6):
            torch.testing.assert_close(jfn(torch.ones(2), n), repeated(torch.ones(2), n))
    assert (thunder.cache_misses(jm), thunder.cache_misses(jfn)) == (1, 2)
    assert len(thunder.compile_stats(jfn).interpreter_cache) == 2


def test_the_strict_mode_raises_on_the_first_extra_recompile():
    jfn = thunder.jit(repeated, cache="symbolic values", recompile_limit=2, on_recompile_limit="raise")
    x = torch.randn(2, 2)
    for n in (0, 1, 0, 1):
        torch.testing.assert_close(jfn(x, n), repeated(x, n))
    with pytest.raises(RecompileLimitExceeded, match="recompile limit \\(2\\)"):
        jfn(x, 2)
    torch.testing.assert_close(jfn(x, 1), repeated(x, 1))  # the cached programs keep working
    assert len(thunder_symbolic.explain(jfn)) == 2
    assert thunder.cache_misses(jfn) == 2  # (raised before compiling: no program was built and dropped)


def test_fail_on_recompile_after_warm_up():
    jfn = thunder.jit(add, cache="symbolic values")
    for x, y in pairs(2, 3):
        jfn(x, y)
    thunder_symbolic.fail_on_recompile(jfn)
    for x, y in pairs(5, 9):  # the same program: no recompile
        torch.testing.assert_close(jfn(x, y), x + y)
    with pytest.raises(RecompileLimitExceeded):
        jfn(torch.randn(1, 3), torch.randn(1, 3))  # a size-1 dim broadcasts: a new program


def test_the_limit_from_the_environment(monkeypatch):
    monkeypatch.setenv("THUNDER_SYMBOLIC_RECOMPILE_LIMIT", "1")
    monkeypatch.setenv("THUNDER_SYMBOLIC_ON_RECOMPILE_LIMIT", "raise")
    jfn = thunder.jit(repeated, cache="symbolic values")
    jfn(torch.randn(2, 2), 0)
    with pytest.raises(RecompileLimitExceeded):
        jfn(torch.randn(2, 2), 1)
    monkeypatch.setenv("THUNDER_SYMBOLIC_RECOMPILE_LIMIT", "many")
    with pytest.raises(ValueError, match="THUNDER_SYMBOLIC_RECOMPILE_LIMIT"):
        thunder.jit(repeated)


def test_the_sources_of_a_deleted_functions_programs_leave_linecache():
    """thunder keeps each generated program's source for tracebacks; kept for the life of the process, they grew
    memory with every function jitted and deleted."""
    import gc
    import linecache

    before = set(linecache.cache)
    jfn = thunder.jit(lambda x: x * 2, cache="symbolic values")
    jfn(torch.ones(2))
    added = set(linecache.cache) - before
    assert len(added) >= 3, added  # (prologue, computation, epilogue)
    del jfn
    gc.collect()
    assert not added & set(linecache.cache)


def _loss(x, w):
    return (x @ w).tanh().sum()


def _inputs(rows, cols=4):
    return torch.randn(rows, cols, requires_grad=True), torch.randn(cols, 2, requires_grad=True)


def _eager_grads(x, w):
    return list(torch.autograd.grad(_loss(x, w), (x, w)))


@pytest.mark.parametrize("cache", ["constant values", "symbolic values"])
def test_thunders_grad_transform_keeps_the_jit_options(cache):
    """``thunder.core.transforms.grad`` re-jits the function (``add_transform``): the new jit keeps the cache option,
    declared dims and recompile limit (0.2.6 dropped the cache option: constant values, a program per shape)."""
    from thunder.core.transforms import grad

    gfn = grad(thunder.jit(_loss, cache=cache, dynamic_shapes={"x": {1: STATIC}}, recompile_limit=2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for rows, cols in ((3, 4), (5, 4), (7, 4), (5, 6), (5, 8)):
            x, w = _inputs(rows, cols)
            torch.testing.assert_close(gfn(x, w), _eager_grads(x, w))
    # symbolic values: one program across rows; x's dim 1, declared static, makes one per width, the third past
    # the limit of 2 (with a warning: a transformed function compiles on). Constant values: one per shape.
    assert thunder.cache_misses(gfn) == (3 if cache == "symbolic values" else 5)
    at_limit = [str(w.message) for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(at_limit) == 1 and "_GradTransform" in at_limit[0]


def test_a_transformed_function_compiles_past_its_limit_instead_of_running_eagerly():
    """Past the limit a plain function runs eagerly; one jitted with transforms (here ``grad``) would compute its
    eager self, not what the transforms make of it: it compiles on, as thunder does, after one warning; with
    ``"raise"`` it raises."""
    from thunder.core.transforms import grad

    gfn = grad(thunder.jit(_loss, recompile_limit=1))
    gfn(*_inputs(3))
    with pytest.warns(RecompileLimitWarning, match="cannot run eagerly"):
        x, w = _inputs(5)
        torch.testing.assert_close(gfn(x, w), _eager_grads(x, w))
    assert thunder.cache_misses(gfn) == 2
    strict = grad(thunder.jit(_loss, recompile_limit=1, on_recompile_limit="raise"))
    strict(*_inputs(3))
    with pytest.raises(RecompileLimitExceeded):
        strict(*_inputs(5))


def test_thunders_vjp_cache_keeps_no_functions_of_symbolic_sizes():
    """thunder caches an operation's forward and backward by its operands' sizes: a symbolic size compared equal to
    the constant one of an earlier constant-values program, whose backward (with its sizes) was then reused."""
    from thunder.core.transforms import grad

    grad(thunder.jit(_loss))(*_inputs(3))  # (constant values: fills thunder's cache for these sizes)
    gfn = grad(thunder.jit(_loss, cache="symbolic values"))
    for rows in (3, 5):
        x, w = _inputs(rows)
        torch.testing.assert_close(gfn(x, w), _eager_grads(x, w))
    assert thunder.cache_misses(gfn) == 1
