"""Python's cyclic garbage collector paused while thunder compiles.

A compile allocates objects by the hundred thousand (proxies, bound symbols, traces, fake tensors), and
the collector runs each time allocations outnumber frees by its threshold; its full collections scan
the whole heap: the model, torch's, thunder's and Dynamo's own objects. On the benchmark's prefill (one
rank) that was 0.96 s of a 5.5 s compile, in 818 collections. Reference counting still frees what a
compile drops; the cycles it leaves are collected by the collector's first run after it. Paused around
thunder's compile on a cache miss (:mod:`thunder_symbolic.runtime.dispatch`) and around a thunderfx call, which
compiles Dynamo's graphs inside (:mod:`thunder_symbolic.patches.dynamo_compiler`).
"""

from __future__ import annotations

import contextlib
import gc
import threading

__all__ = ["paused"]

_lock = threading.Lock()
_depth = 0  # compiles in progress (nested, or in several threads)
_resume = False  # whether the collector was enabled when the first of them began


@contextlib.contextmanager
def paused():
    """No cyclic collection inside (unless the collector is enabled again meanwhile); reentrant."""
    global _depth, _resume
    with _lock:
        if _depth == 0:
            _resume = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _resume:
                gc.enable()
