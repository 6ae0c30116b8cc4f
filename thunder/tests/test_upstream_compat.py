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
