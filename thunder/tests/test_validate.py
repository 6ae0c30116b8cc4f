"""The trace validator finds uses before definition and double definitions."""

import pytest
import thunder
import torch
from thunder.core.trace import from_trace

from thunder_symbolic.validate import TraceValidationError, validate_trace


def computation_trace():
    jf = thunder.jit(lambda x: (x[1:] * 2).sum() + x.shape[0], cache="symbolic values")
    jf(torch.randn(4, 3))
    return thunder.last_traces(jf)[-1]


def test_valid_trace_passes():
    validate_trace(computation_trace())


def test_use_before_definition_is_reported():
    trace = computation_trace()
    broken = from_trace(trace)
    broken.bound_symbols = list(reversed(trace.bound_symbols))
    with pytest.raises(TraceValidationError, match="before it is defined"):
        validate_trace(broken)


def test_second_definition_is_reported():
    trace = computation_trace()
    broken = from_trace(trace)
    producing = next(b for b in trace.bound_symbols if b.flat_proxy_outs and b.sym.name != "unpack_trivial")
    index = trace.bound_symbols.index(producing)
    broken.bound_symbols = [*trace.bound_symbols[: index + 1], producing, *trace.bound_symbols[index + 1 :]]
    with pytest.raises(TraceValidationError, match="defined a second time"):
        validate_trace(broken)


def test_dims_without_a_producer_get_one_after_dce():
    # The safety net run after every DCE under symbolic values: a pass that drops (or never adds) the
    # prims.shape producing a dim gets one bound before the dim's first use.
    from thunder.core.prims import PrimIDs
    from thunder.executors import torchex

    from thunder_symbolic.patches.core_transform_common import ensure_dims_produced

    jf = thunder.jit(lambda x: torch.cat([x, x]).reshape(-1) * torch.cat([x, x]).shape[0], cache="symbolic values")
    jf(torch.randn(4, 3))
    trace = thunder.last_traces(jf)[0]
    broken = from_trace(trace)
    broken.bound_symbols = [b for b in trace.bound_symbols if b.sym.id != PrimIDs.SHAPE]
    assert len(broken.bound_symbols) < len(trace.bound_symbols)
    with pytest.raises(TraceValidationError, match="before it is defined"):
        validate_trace(broken)
    fixed = ensure_dims_produced(broken)
    validate_trace(fixed)
    assert sum(b.sym is torchex.shape for b in fixed.bound_symbols) == 1  # executable in any trace
