"""Patches of ``thunder/dynamo/compiler.py``: a thunderfx call compiles with the garbage collector paused, and
the graph thunderfx splits holds no vmap region whose result nothing reads."""

from __future__ import annotations

import functools

from thunder_symbolic import controls
from thunder_symbolic.activation.registry import patch
from thunder_symbolic.runtime import gc_pause
from thunder_symbolic.thunderfx import fx_vmap


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


@patch(
    "thunder.dynamo.compiler:ThunderCompiler.__call__",
    summary="a vmap region of Dynamo's graph whose result nothing reads, and that writes nothing, is removed "
    "before the graph is split; the thunder regions of a graph Dynamo made dynamic (symbolic sizes) are jitted "
    "with symbolic values unless thunderfx was given a cache option (or THUNDER_SYMBOLIC_DEFAULT_CACHE one)",
    why=(
        "Dynamo keeps such a region (FX counts entering a vmap level as a side effect) and thunderfx leaves "
        "every vmap region to Inductor: transformers' mask functions build one a step whose mask is dropped, "
        "which cost the inference benchmark an Inductor region to compile and call in every graph, and one "
        "more thunder region (the region split thunder's in two). Dynamo makes a graph dynamic at the second "
        "size it sees, and Inductor then compiles it once for all sizes; thunder's regions, jitted under the "
        "default cache option, compiled at every new length (a decode loop: a compile a step)."
    ),
)
def _compiler_call(original):
    @functools.wraps(original)
    def __call__(self, gm, sample_args):
        from thunder.dynamo.compiler import is_dynamic_inputs

        fx_vmap.remove_unread_regions(gm)
        chosen = "cache" in self.thunder_options or controls.default_cache_option() is not None
        if chosen or not is_dynamic_inputs(sample_args):
            return original(self, gm, sample_args)
        with controls.inheriting_options(controls.JitOptions(cache="symbolic values")):
            return original(self, gm, sample_args)

    return __call__
