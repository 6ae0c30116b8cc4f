"""Patches of ``thunder/dynamo/compiler.py``: a thunderfx call compiles with the garbage collector paused."""

from __future__ import annotations

import functools

from thunder_symbolic import gc_pause
from thunder_symbolic._registry import patch


@patch(
    "thunder.dynamo.compiler:ThunderFXCompiledObject.__call__",
    summary="a call of a thunderfx-compiled function runs with Python's cyclic garbage collector paused, so "
    "that Dynamo's tracing and the split compile without it too (thunder's own compile already did)",
    why=(
        "thunderfx compiles inside the call: Dynamo traces, thunderfx splits the graph and Inductor compiles "
        "the regions left to it, each allocating objects by the hundred thousand, and the collector's full "
        "collections scan the whole heap (about 850,000 objects once the benchmark's model is compiled). In "
        "the inference benchmark's first prefill (2 ranks) collections outside thunder's own compile took "
        "0.7 s, two of them full, and 0.75 to 0.95 s in each decode compile. A call that compiles nothing "
        "(a decode step) made no collection either way; what a call leaves is collected after it."
    ),
)
def _call(original):
    @functools.wraps(original)
    def __call__(self, *args, **kwargs):
        with gc_pause.paused():
            return original(self, *args, **kwargs)

    return __call__
