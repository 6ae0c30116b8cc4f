"""Patches of ``thunder/__init__.py``: record why each cache miss happened."""

from __future__ import annotations

from thunder_symbolic._registry import patch
from thunder_symbolic.diagnostics import MissRecordingCache


@patch(
    "thunder:jit",
    summary="watches each cached program's prologue so that recompile_reasons() can say why a call missed",
    why="0.2.6 only counts cache misses; the failed guard and the source line that created it are lost.",
    upstream="Lightning-AI/lightning-thunder#463",
)
def _jit(original):
    def jit(fn, /, *args, **kwargs):
        jfn = original(fn, *args, **kwargs)
        name = getattr(fn, "__qualname__", type(fn).__name__)
        jfn._lc_cs.interpreter_cache = MissRecordingCache(name, jfn._lc_cs)
        return jfn

    jit.__doc__ = original.__doc__
    return jit
