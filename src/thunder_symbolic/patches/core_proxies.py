"""Patches of ``thunder/core/proxies.py``: how tensors become proxies under symbolic values."""

from __future__ import annotations

import contextlib

import torch
from thunder.core import compile_data
from thunder.core.interpreter import ProvenanceRecord, PseudoInst
from thunder.core.proxies import Proxy

from thunder_symbolic._registry import patch


@contextlib.contextmanager
def _constant_values():
    """Trace as under ``cache="constant values"`` for the duration (only the cache option is hidden)."""
    _, stats = compile_data._compile_data.get()
    token = compile_data._compile_data.set((None, stats))
    try:
        yield
    finally:
        compile_data._compile_data.reset(token)


def _forget_provenance(p) -> None:
    """Drop the placeholder history from a tensor proxy, its dims and its grad."""
    p.history = None
    for dim in p._shape:
        if isinstance(dim, Proxy):
            dim.history = None
    if p._grad is not None:
        _forget_provenance(p._grad)


@patch(
    "thunder.core.proxies:tensorproxy",
    summary="nn.Parameters keep static shapes; tensors without history get symbolic dims without provenance",
    why=(
        "Under symbolic values every dim became a proxy to unpack in the prologue: parameters failed "
        "('Parameter was not tagged with STATIC_MEMORY_LOCATION'), and a proxy built with history=None "
        "(the local tensor of DTensor.from_local) failed an assertion while building the dims' provenance."
    ),
    upstream="Lightning-AI/lightning-thunder#2749, #2755",
)
def _tensorproxy(original):
    def tensorproxy(t: torch.Tensor, /, *, name, history=None):
        if not compile_data.using_symbolic_values():
            return original(t, name=name, history=history)
        if isinstance(t, torch.nn.Parameter):
            # Parameters do not change shape between calls (torch.compile's dynamic=True agrees).
            with _constant_values():
                return original(t, name=name, history=history)
        if history is None:
            # Nothing in the prologue can re-derive these dims; they are produced by the computation.
            p = original(t, name=name, history=ProvenanceRecord(PseudoInst.OPAQUE, inputs=[]))
            _forget_provenance(p)
            return p
        return original(t, name=name, history=history)

    return tensorproxy
