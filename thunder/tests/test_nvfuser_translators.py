"""The nvFuser translator patch, checked on any machine: what each translator hands to nvFuser.

nvFuser cannot define a fusion without a GPU, so these tests stand in a recording fusion definition for
the real one. The GPU tests (``test_nvfuser_symbolic.py``, ``scripts/gpu_checks.sh``) run the same
translators inside real fusions.
"""

import sys
import types

import pytest
from thunder.core.prims import PrimIDs
from thunder.core.proxies import IntegerProxy
from thunder.core.trace import TraceCtx, tracectx
from thunder.core.utils import ProxyDict

from thunder_symbolic.patches import executors_nvfuserex_impl as nvpatch


class Scalar:
    """Stands for an nvFuser scalar (a fusion input or a tensor's size)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"Scalar({self.name})"


class RecordingFusion:
    """Records the operations a translator defines, in place of nvFuser's FusionDefinition."""

    def __init__(self):
        self.calls = []
        self._selected_device = None
        fusion = self

        class Ops:
            def __getattr__(self, name):
                def op(*args, **kwargs):
                    fusion.calls.append((name, args, kwargs))
                    return f"T{len(fusion.calls)}"

                return op

        self.ops = Ops()


@pytest.fixture
def symbols():
    """Two symbolic extents and the map a fusion would hold for them."""
    with tracectx(TraceCtx()):
        n, m = IntegerProxy(name="n", value=5), IntegerProxy(name="m", value=7)
    mapping = ProxyDict()
    mapping[n], mapping[m] = Scalar("n"), Scalar("m")
    return n, m, mapping


def test_static_extents_stay_ints_and_symbolic_ones_become_fusion_scalars(symbols):
    n, m, mapping = symbols
    inlined = nvpatch.inline_shape([2, n, 3, m], mapping)
    assert inlined[0] == 2 and inlined[2] == 3
    assert inlined[1] is mapping[n] and inlined[3] is mapping[m]
    assert isinstance(inlined, list)
    assert isinstance(nvpatch.inline_shape((n, 4), mapping), tuple)
    assert nvpatch.inline_shape([], mapping) == []


def test_nested_pad_configuration_keeps_its_structure(symbols):
    n, _, mapping = symbols
    config = ((0, n, 0), (1, 2, 0))
    assert nvpatch.inline_shape(config, mapping) == ((0, mapping[n], 0), (1, 2, 0))


def test_an_extent_the_fusion_does_not_receive_is_named(symbols):
    _, _, mapping = symbols
    with tracectx(TraceCtx()):
        stray = IntegerProxy(name="stray", value=3)
    with pytest.raises(AssertionError, match="symbolic extent stray"):
        nvpatch.inline_shape([stray], mapping)


def test_a_shape_of_something_else_is_a_type_error(symbols):
    _, _, mapping = symbols
    with pytest.raises(TypeError, match="expected a shape of ints and NumberProxies"):
        nvpatch.inline_shape(["a"], mapping)


def test_wrapped_translator_receives_the_inlined_shape(symbols):
    n, _, mapping = symbols
    seen = []

    def reshape(a, shape, *, fd, lc_to_nv_map):
        seen.append(shape)
        return fd.ops.reshape(a, shape)

    fd = RecordingFusion()
    translate = nvpatch.with_inlined_shape(reshape, "shape")
    translate("t", [n, 8], fd=fd, lc_to_nv_map=mapping)
    translate("t", shape=(4, n), fd=fd, lc_to_nv_map=mapping)
    assert seen == [[mapping[n], 8], (4, mapping[n])]
    assert fd.calls[0] == ("reshape", ("t", [mapping[n], 8]), {})


class Bsym:
    def __init__(self, sym_id):
        self.sym = types.SimpleNamespace(id=sym_id)


def test_get_translator_wraps_shape_translators_only():
    def full(shape, fill_value, *, device, dtype, fd, lc_to_nv_map):
        return shape

    def add(a, b, *, fd, lc_to_nv_map):
        return a

    originals = {PrimIDs.FULL: full, PrimIDs.ADD: add}
    get_translator = nvpatch._get_translator(lambda bsym: originals[bsym.sym.id])

    assert get_translator(Bsym(PrimIDs.ADD)) is add
    wrapped = get_translator(Bsym(PrimIDs.FULL))
    assert wrapped.__wrapped__ is full
    assert get_translator(Bsym(PrimIDs.FULL)) is wrapped  # wrapped once per translator
    assert get_translator(Bsym(PrimIDs.UNIFORM)) is nvpatch.uniform
    assert get_translator(Bsym(PrimIDs.UNIFORM_PHILOX)) is nvpatch.uniform

    originals[PrimIDs.FULL] = lambda shape, fill_value, *, device, dtype, fd, lc_to_nv_map: shape
    assert get_translator(Bsym(PrimIDs.FULL)).__wrapped__ is originals[PrimIDs.FULL]  # re-registered translator


@pytest.fixture
def fake_impl(monkeypatch):
    """The three helpers of nvfuserex_impl the uniform translator uses, without nvFuser."""

    def getnv(x, fd, lc_to_nv_map):
        return lc_to_nv_map[x] if isinstance(x, IntegerProxy) else ("const", x)

    impl = types.SimpleNamespace(
        getnv=getnv,
        lcdtype_to_nvdtype=lambda dtype: f"nv:{dtype}",
        _select_device=lambda fd, device: setattr(fd, "_selected_device", device),
    )
    monkeypatch.setitem(sys.modules, nvpatch._IMPL, impl)
    return impl


def test_uniform_passes_an_inlined_shape(symbols, fake_impl):
    n, _, mapping = symbols
    fd = RecordingFusion()
    nvpatch.uniform([n, 3], 0.0, 1.0, device="cuda:0", dtype="float32", fd=fd, lc_to_nv_map=mapping)
    name, args, kwargs = fd.calls[0]
    assert name == "uniform"
    assert args == (("const", 0.0), ("const", 1.0), [mapping[n], 3])
    assert kwargs == {"dtype": "nv:float32"}
    assert fd._selected_device == "cuda:0"


def test_uniform_philox_passes_seed_and_offset(symbols, fake_impl):
    n, m, mapping = symbols
    fd = RecordingFusion()
    nvpatch.uniform((2, n), -1.0, 1.0, device="cuda:0", dtype="bfloat16", seed=7, offset=m, fd=fd, lc_to_nv_map=mapping)
    _, args, kwargs = fd.calls[0]
    assert args[2] == [2, mapping[n]]
    assert kwargs == {"dtype": "nv:bfloat16", "rng_seed": ("const", 7), "rng_offset": mapping[m]}
