"""Tracing a step as under ``cache="constant values"`` while the jit runs with symbolic values."""

from __future__ import annotations

import contextlib

from thunder.core import compile_data


@contextlib.contextmanager
def constant_values():
    """Hide the compile data (and so the cache option) from what runs inside; the stats stay visible."""
    _, stats = compile_data._compile_data.get()
    token = compile_data._compile_data.set((None, stats))
    try:
        yield
    finally:
        compile_data._compile_data.reset(token)
