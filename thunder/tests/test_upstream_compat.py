"""What lightning-thunder 0.2.6 runs correctly, the patch set runs too, identically.

Each case is one kind of program thunder's own test suite exercises that the patch set once broke (found by
``make upstream-test``, which runs that suite with the patch set off and on); each test says what broke and why,
and holds the program to eager PyTorch and to thunder's own traces.
"""

import functools
import io
import re
import textwrap

import pytest
import torch

import thunder
from thunder.executors.torch_compile import torch_compile_ex
from thunder.transforms.constant_folding import ConstantFolding

from thunder_symbolic.testing import check_against_eager, run_python

CACHES = pytest.mark.parametrize("cache", ["symbolic values", "constant values"])


def test_a_builtin_method_that_needs_its_class_does_not_crash_the_interpreter():
    """thunder finds a builtin method's descriptor by binding each base class's method to the object; binding
    `_io._BufferedIOBase.seek` without the type crashed CPython 3.12.1 (segmentation fault), which transformers'
    generation reached through torch.vmap, torch.library, traceback and linecache's `buffer.seek(0)`. In a
    subprocess: a crash must fail the test, not the suite."""
    code = textwrap.dedent(
        """
        import io, torch, thunder

        def f(x):
            buffer = io.BufferedReader(io.BytesIO(b"abc"))
            buffer.seek(0)
            return x * len(buffer.read())

        print(thunder.jit(f)(torch.ones(2)).tolist())
        """
    )
    done = run_python(code)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[3.0, 3.0]"


@CACHES
def test_a_buffered_reader_made_in_the_program(cache):
    def f(x):
        buffer = io.BufferedReader(io.BytesIO(b"abcd"))
        buffer.seek(1)
        return x + len(buffer.read())

    check_against_eager(f, [(torch.ones(2),)], cache=cache)


def test_two_traces_of_one_program_print_alike():
    """The checks of Python values named their expected objects by id in the prologue (`("len", 1400..., ...)`):
    two compiles of one module printed different prologues (thunder's test_thunder_jit_parts)."""
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    prologues = []
    for _ in range(2):
        jm = thunder.jit(model)
        jm(torch.randn(2, 8))
        prologues.append(re.sub(r"took \d+ ", "", str(thunder.last_prologue_traces(jm)[-1])))
    assert prologues[0] == prologues[1]


@CACHES
def test_containers_as_arguments_are_checked_through_their_own_proxies(cache):
    """A value check and a value the epilogue returns were both proxies named `any0`: the prologue checked the
    returned int as the tuple, and the first call raised GuardFailed (thunder's test_crazy_collections_in_and_out)."""

    def f(tup):
        (a, b), c = tup
        return a + b["dict"]["val"], c

    check_against_eager(f, [(((2, {"dict": {"val": 2}}), 4),), (((3, {"dict": {"val": 2}}), 5),)], cache=cache)


class _Capture:
    def capture(self, *args, **kwargs):
        return args, kwargs

    bound = functools.partialmethod(capture, 1)


@CACHES
def test_a_partialmethod_read_again_is_the_same_callable(cache):
    """A partialmethod makes a new partial (of a new bound method) at each read, and read from its class a new
    function: checked by identity, the first call raised GuardFailed (thunder's test_partial_method)."""
    obj = _Capture()

    def f(x):
        args, kwargs = obj.bound(2, k=3)
        unbound_args, _ = _Capture.bound(obj, 4)
        return x * sum(args) + sum(unbound_args) + kwargs["k"]

    jf = check_against_eager(f, [(torch.ones(2),), (torch.ones(2),)], cache=cache, compiles=1)
    _Capture.bound = functools.partialmethod(_Capture.capture, 10)
    try:
        torch.testing.assert_close(jf(t := torch.ones(2)), f(t))  # another partial: another program
        assert thunder.cache_misses(jf) == 2
    finally:
        _Capture.bound = functools.partialmethod(_Capture.capture, 1)


class _Key:
    def __hash__(self):
        return id(self)


@CACHES
def test_a_dict_item_read_by_an_object_key(cache):
    """Items of a dict read from the inputs are re-read by their keys; a key the prologue cannot write (a user
    object) failed to unpack (thunder's test_indexing_with_hashable_object). Such an item keeps the path of its
    key's own read, and a change of its value recompiles."""
    key = _Key()
    table = {key: 1, 1: 0}

    def f():
        return table[key]

    jf = thunder.jit(f, cache=cache)
    assert jf() == 1 and jf() == 1
    table[key] = 2
    assert jf() == 2


def test_a_torch_size_in_a_trace_prints_as_a_tuple():
    """ConstantFolding binds `full(t.shape, ...)` with a torch.Size, which thunder printed as a context object named
    `_torch.Size_0`: NameError ("name '_torch' is not defined") at the first call (thunder's test_constant_folding,
    and its max_pool tests)."""

    def forward():
        const = torch.tensor([2])
        return (const * 2)[0], const

    jf = thunder.jit(forward, transforms=[ConstantFolding()])
    actual = jf()
    torch.testing.assert_close(actual, forward())
    assert "torch.full((), 4" in str(thunder.last_traces(jf)[-1])


@CACHES
def test_an_in_place_update_of_a_view_with_the_torch_compile_executor(cache):
    """The patch set splits torch.compile regions at alias updates; the update of `y` is then a region without
    outputs, which DCE dropped (its step removing duplicate numbers removes what has no outputs): `x` came back
    unchanged, a silent wrong result (thunder's test_setitem_on_view)."""

    def f(x):
        y = x.view(3, 2)
        y[0][0] = 0
        return x

    check_against_eager(f, [(torch.randn(2, 3),)], cache=cache, executors=[torch_compile_ex])


def test_the_prologue_checks_tensors_with_thunders_operator():
    """The fast tensor check was an operator of its own, which transforms looking for thunder's check by its id did
    not find (ExtractionOnlyPrologueTransform kept every parameter's check: thunder's
    test_disable_params_and_buffer_check)."""
    from thunder.executors.pythonex import check_tensor_shape_and_metadata
    from thunder.transforms.extraction_only_prologue_transform import ExtractionOnlyPrologueTransform

    jm = thunder.jit(torch.nn.Linear(4, 4), transforms=[ExtractionOnlyPrologueTransform()])
    jm(torch.randn(2, 4))
    checks = [
        bsym
        for bsym in thunder.last_prologue_traces(jm)[-1].bound_symbols
        if bsym.sym.id == check_tensor_shape_and_metadata.id
    ]
    assert len(checks) == 1  # the input's; the parameters' went


def test_code_in_thunders_tests_folder_is_user_code():
    """Under symbolic values an int argument is a symbolic number, which `isinstance(n, int)` in user code answers
    as an int; the patch set took any code under thunder's folder for thunder's own helpers, thunder's tests
    included, and answered False there: the program took the other branch, a wrong result (thunder's
    test_integer_isinstance_mimicry with symbolic values as the default cache option)."""
    import os

    import thunder.tests

    namespace = {}
    source = "def f(a, t):\n    return t + a if isinstance(a, int) else t * 2\n"
    exec(compile(source, os.path.join(os.path.dirname(thunder.tests.__file__), "a_user_program.py"), "exec"), namespace)
    check_against_eager(namespace["f"], [(2, torch.ones(2)), (3, torch.ones(2))], cache="symbolic values")


def test_thunders_grad_transform_under_symbolic_values(monkeypatch):
    """thunder.core.transforms.grad seeded its cotangents with ones shaped like the output of a separate trace of
    the function: under symbolic values reading those sizes recorded `prims.shape` of a tensor the program never
    makes (UnboundLocalError at the first call: 190 of thunder's test_grad tests with symbolic values as the
    default cache option). The grad transform re-jits without the cache option, hence the default. The ones take the
    inputs' sizes: read from the result, they kept the forward (its sum) in a program that returns only gradients."""
    from thunder.core.transforms import grad

    monkeypatch.setenv("THUNDER_SYMBOLIC_DEFAULT_CACHE", "symbolic values")

    def f(a, b):
        return (a * b).sum(0), a.exp()

    gf = grad(thunder.jit(f))
    for n in (3, 5):
        a = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
        b = torch.randn(n, 4, dtype=torch.float64, requires_grad=True)
        expected = torch.autograd.grad([t.sum() for t in f(a, b)], (a, b))
        torch.testing.assert_close(gf(a.detach(), b.detach()), list(expected))
    assert thunder.cache_misses(gf) == 1
    assert not [bsym for bsym in thunder.last_traces(gf)[-1].bound_symbols if "sum" in bsym.sym.name]


def test_an_element_count_names_the_sizes_it_multiplies():
    """thunder counts a tensor's elements under symbolic values by multiplying the sizes the proxy was made with,
    which the operator computing the count (softmax, nll_loss) does not name: the trace used numbers no symbol of it
    defines, and thunder's own trace checker refused nanoGPT and litGPT (thunder's test_nanogpt, test_litgpt_variants
    with symbolic values as the default cache option)."""
    from thunder.dev_utils.check_trace import check_trace

    def f(x, target):
        return torch.nn.functional.nll_loss(x.softmax(-1).log(), target) + x.numel()

    samples = [(torch.randn(n, 5), torch.randint(0, 5, (n,))) for n in (3, 4)]
    jf = check_against_eager(f, samples, cache="symbolic values")
    check_trace(thunder.last_traces(jf)[0])


def test_thunders_grad_transform_through_composites_and_size_arithmetic(monkeypatch):
    """Under thunder.core.transforms.grad with symbolic values: torch.outer's decomposition records shapes of
    constant sizes, symbols without an output proxy, on which the VJP transform failed ('NoneType' object has no
    attribute 'name': thunder's phantom-grad tests of outer and einsum); and the arithmetic of a size
    (`(1.0 / x.shape[-1]) ** 0.5`, nanoGPT's attention) was differentiated through a rule the transform could not call
    (thunder's test_populate_grads)."""
    from thunder.core.transforms import grad

    monkeypatch.setenv("THUNDER_SYMBOLIC_DEFAULT_CACHE", "symbolic values")

    def f(a, b):
        return torch.outer(a, b) * (1.0 / a.shape[-1]) ** 0.5

    gf = grad(thunder.jit(f))
    for n in (3, 5):
        a = torch.randn(n, dtype=torch.float64, requires_grad=True)
        b = torch.randn(4, dtype=torch.float64, requires_grad=True)
        expected = torch.autograd.grad(f(a, b).sum(), (a, b))
        torch.testing.assert_close(gf(a.detach(), b.detach()), list(expected))


def test_multi_dot_under_symbolic_values():
    """thunder's multi_dot refused symbolic sizes ("does not support dynamic shapes"), where it runs constant ones
    (thunder's test_multi_dot_optimization with symbolic values as the default cache option). The order of the
    products depends on every size, so they are pinned: a compile per set of sizes, none of them (100, 100)."""

    def f(x, a, b, y):
        return torch.linalg.multi_dot([x, a, b, y])

    samples = [
        (torch.randn(10), torch.randn(10, 100), torch.randn(100, 10), torch.randn(10)),
        (torch.randn(10), torch.randn(10, 100), torch.randn(100, 10), torch.randn(10)),
        (torch.randn(3), torch.randn(3, 4), torch.randn(4, 5), torch.randn(5)),
    ]
    jf = check_against_eager(f, samples, cache="symbolic values", compiles=2, rtol=1e-4, atol=1e-4)
    (multi_dot,) = [b for b in thunder.last_traces(jf)[0].bound_symbols if b.sym.name == "multi_dot"]
    matmuls = [b.output for b in multi_dot.subsymbols if b.sym.name == "matmul"]
    assert len(matmuls) == 3
    assert all(tuple(getattr(d, "value", d) for d in t._shape) != (100, 100) for t in matmuls)


def test_a_thunder_module_is_freed_with_its_last_reference():
    """The ThunderModule of a transformers model keeps a forward of the model's signature on itself; the test that
    picks those models answered yes for any module without `generate` once transformers was imported, and the
    forward was a partial bound to the module: a reference cycle, so every ThunderModule outlived its last
    reference until a garbage collection (thunder's test_thunder_optimized_module_is_freed, after a test that
    imported transformers). A transformers model's ThunderModule is freed by the next collection (tracing it
    leaves the usual cycles of caught exceptions)."""
    import gc
    import weakref

    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2
    )
    llama = thunder.jit(transformers.LlamaForCausalLM(config))
    llama(torch.randint(0, 32, (1, 4)))
    llama = weakref.ref(llama)
    gc.disable()
    try:
        relu = thunder.jit(torch.nn.ReLU())
        relu(torch.randn(2, 3))
        assert "forward" not in vars(relu)  # (a module without generation keeps ThunderModule's forward)
        relu = weakref.ref(relu)
        assert relu() is None
    finally:
        gc.enable()
    gc.collect()
    assert llama() is None
