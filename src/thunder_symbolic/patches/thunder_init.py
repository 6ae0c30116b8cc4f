"""Patches of ``thunder/__init__.py``: why each cache miss happened, and a shorter path for cache hits."""

from __future__ import annotations

from thunder.core import compile_data
from thunder.core.options import CACHE_OPTIONS

from thunder_symbolic import controls
from thunder_symbolic.activation.registry import patch
from thunder_symbolic.diagnostics import MissRecordingCache, eager_past_limit
from thunder_symbolic.guards import backward_watch
from thunder_symbolic.runtime.dispatch import fast_call_path


@patch(
    "thunder:jit",
    summary=(
        "watches each cached program's prologue (for recompile_reasons()); at its recompile limit a function "
        "compiles no more (calls no program accepts run eagerly, or raise); "
        "takes the options dynamic_shapes, recompile_limit and on_recompile_limit (thunder_symbolic.controls); "
        "a call that names no cache option takes THUNDER_SYMBOLIC_DEFAULT_CACHE's, when set; a call made while "
        "thunder adds a transform to a jitted function, or jits thunderfx's regions of a dynamic graph, takes those "
        "options where it names none; "
        "under symbolic values, cache hits take a shorter call path that runs the same checks"
    ),
    why=(
        "0.2.6 only counts cache misses: the failed guard and its source line were lost, and a function that "
        "recompiles at every call says nothing and keeps every program (200 widths: 200 programs, +604 MB). "
        "Users cannot declare a dim static or its range. And its per-call wrappers cost more than the prologue's "
        "checks, where decode loops pay them every step. A default cache option set once for a process lets code "
        "that never names one (thunderfx, thunder.compile, thunder's own tests) run under symbolic values."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _jit(original):
    def jit(fn, /, *args, dynamic_shapes=None, recompile_limit=None, on_recompile_limit=None, **kwargs):
        inherited = controls.inherited_options()
        declared = controls.dynamic_shapes_from_options(fn, dynamic_shapes)
        budget = controls.budget_from_options(recompile_limit, on_recompile_limit)
        if inherited is not None:  # (thunder jitting a function for the user: see controls.inheriting_options)
            if dynamic_shapes is None and inherited.dynamic_shapes is not None:
                declared = inherited.dynamic_shapes
            if recompile_limit is None and on_recompile_limit is None and inherited.budget is not None:
                budget = inherited.budget
            kwargs["cache"] = kwargs.get("cache") or inherited.cache
        if kwargs.get("cache") is None and (default := controls.default_cache_option()) is not None:
            kwargs["cache"] = default
        jfn = original(fn, *args, **kwargs)
        cd, cs = jfn._lc_cd, jfn._lc_cs
        cd.thunder_symbolic_dynamic_shapes = declared
        name = getattr(fn, "__qualname__", type(fn).__name__)
        cs.interpreter_cache = MissRecordingCache(name, cs, budget, cd.transforms)
        fast = cd.cache_option is CACHE_OPTIONS.SYMBOLIC_VALUES

        def wrapped(call):  # (the shorter path calls thunder's only on a miss: a cache hit pays no eager wrapper)
            call = eager_past_limit(call, fn)
            return fast_call_path(call, cd, cs) if fast else call

        if hasattr(jfn, "_forward_fn"):  # a ThunderModule
            jfn._forward_fn = wrapped(jfn._forward_fn)
            return jfn
        return wrapped(jfn)

    jit.__doc__ = original.__doc__
    return jit


@patch(
    "thunder:CacheEntry",
    summary="ends the backward watch; under symbolic values, an entry whose backward observed sizes checks them "
    "after its prologue",
    why=(
        "thunder builds the backward after the prologue: what a grad rule reads of a size (reshape and "
        "var_mean check numel) would otherwise be reused for any input the prologue accepts."
    ),
    upstream="Lightning-AI/lightning-thunder#463",
)
def _cache_entry(original):
    class CacheEntry(original):
        __slots__ = ()

        def __new__(cls, *args, **kwargs):
            entry = super().__new__(cls, *args, **kwargs)
            # The backward is built: nothing more can be baked into it.
            return backward_watch.finish(entry) if compile_data.using_symbolic_values() else entry

    CacheEntry.__doc__ = original.__doc__
    return CacheEntry
